"""The commands and Hydra's entry points: the `rnnexp` app, its config check, sweep
launch, callbacks, and the matrix and sync commands. May import every stage."""
