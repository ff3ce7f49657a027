"""What a run records and where it goes: the Result, its statistics, the console
report and summaries, exit codes, resume, and the sinks (JSON, console, MLflow,
fastrnns).

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, measure.
"""
