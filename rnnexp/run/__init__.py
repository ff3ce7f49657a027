"""Running jobs: worker processes and their stopping rules (schedule), the blocks of
configurations that share workers (blocks), interleaved windows (interleave), their
instruction counts (counting), drift, the
roofline peaks, estimates, and signals.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, measure, results.
"""
