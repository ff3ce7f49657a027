"""The commands and Hydra's entry points: the `rnnexp` app, its config check, sweep
launch, callbacks, and the matrix, sync, history and bisect commands. May import every stage."""
