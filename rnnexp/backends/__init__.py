"""Execution backends: how a model runs (vendor RNN library, TorchScript, torch.compile).
Imports rnnexp.config, rnnexp.machine and rnnexp.models; knows nothing of tracking."""

from rnnexp.backends.base import Backend

__all__ = ["Backend"]
