"""What a run records and where it goes: the Result, its statistics, the console
report and summaries, exit codes, resume, and the sinks (JSON, console, MLflow,
fastrnns). Imports the stages below it (config, machine, measure)."""
