"""One configuration in one process: its workload and work counts, verification
against the float64 reference, the timer, the plan (job) and the isolated worker
process.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, backends.
"""
