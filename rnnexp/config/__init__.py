"""What to measure: the config schema, DeepBench problems, how Hydra's overrides
compose, which `_target_`s may be built, and credentials in URIs. Imports only
rnnexp.errors."""
