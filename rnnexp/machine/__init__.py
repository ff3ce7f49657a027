"""Where it runs: the platform and device, their emulation for tests, the machine's
state (load, clocks), memory budgets and process placement.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config.
"""
