"""Execution backends: how a model runs (vendor RNN library, TorchScript, torch.compile);
knows nothing of tracking.

Imports (rnnexp's stages; tests/test_imports.py checks it):
errors, config, machine, models.
"""

from rnnexp.backends.base import Backend

__all__ = ["Backend"]
