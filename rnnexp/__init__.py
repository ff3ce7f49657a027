"""rnnexp: how fast recurrent networks run in PyTorch, recorded in MLflow."""

__version__ = "0.1.0"
