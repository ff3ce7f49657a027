"""What is measured: model factories (each returns a Workload for a WorkloadSpec), their
float64 references and work counts; knows nothing of tracking.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config.
"""
