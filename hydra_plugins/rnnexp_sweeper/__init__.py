"""rnnexp's Hydra sweeper plugin (hydra/sweeper=rnnexp, the default of `python -m rnnexp -m`)."""
