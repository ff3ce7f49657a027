"""Execution backends: how a model runs (vendor RNN library, TorchScript, torch.compile)."""

from rnnexp.backends.base import Backend

__all__ = ["Backend"]
