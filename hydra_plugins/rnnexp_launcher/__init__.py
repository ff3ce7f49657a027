"""rnnexp's Hydra launcher plugin (hydra/launcher=rnnexp, the default of `python -m rnnexp`)."""
