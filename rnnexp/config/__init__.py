"""What to measure: the config schema, DeepBench problems, how Hydra's overrides
compose, which `_target_`s may be built, and credentials in URIs.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors.
"""
