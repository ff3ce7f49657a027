"""What a run records and where it goes: the Result, its statistics, the console
report and summaries, exit codes, resume, the sinks (JSON, console, MLflow,
fastrnns), and saved results uploaded to MLflow (sync).

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models, measure.
"""
