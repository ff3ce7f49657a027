"""Hydra's entry points — the `rnnexp` app, its config check, sweep launch, callbacks — and
the commands beside the app, one module each in `commands/`.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, measure, results, run, analysis.
"""
