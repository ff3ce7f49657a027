"""The commands and Hydra's entry points: the `rnnexp` app, its config check, sweep
launch, callbacks, and the matrix, sync, history and bisect commands.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, measure, results, run, analysis.
"""
