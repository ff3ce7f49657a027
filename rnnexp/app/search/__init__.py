"""`rnnexp search`: the fastest configuration of a space written in Hydra's sweep syntax,
found without measuring every cell (Optuna's ask/tell), each batch measured against a
baseline in one interleaved window and the winner confirmed by a fresh A/B. Part of the
app stage: may import every stage."""
