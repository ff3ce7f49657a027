"""Where it runs: the platform and device, their emulation for tests, the machine's
state (load, clocks), memory budgets, process placement and malloc's thresholds.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config.
"""
