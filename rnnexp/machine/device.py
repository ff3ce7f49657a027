"""Turn the `device` config into a torch.device, with one-line reasons when it cannot be had."""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from rnnexp.config.schema import DeviceConfig, DeviceKind, DType, ModelConfig
from rnnexp.errors import ConfigError, UnsupportedError
from rnnexp.machine.platform import Platform
from rnnexp.machine.platform import current as current_platform


def resolve_device(cfg: DeviceConfig, plat: Platform) -> torch.device:
    kind = cfg.kind
    if kind is DeviceKind.auto:
        kind = DeviceKind.cuda if plat.gpu_count else DeviceKind.cpu
    if kind is DeviceKind.cpu:
        return torch.device("cpu")
    if not plat.gpu_count:
        raise UnsupportedError(
            f"device=cuda: no GPU is visible to this {plat.build} build of PyTorch — use device=cpu"
        )
    if cfg.index >= plat.gpu_count:
        raise ConfigError("device.index", f"{cfg.index} is out of range",
                          f"this machine has {plat.gpu_count} GPU(s): use 0..{plat.gpu_count - 1}")
    return torch.device("cuda", cfg.index)


def torch_dtype(dtype: DType) -> torch.dtype:
    return getattr(torch, dtype.value)


def device_name(device: torch.device, plat: Platform) -> str:
    if device.type == "cuda":
        return plat.gpu_names[device.index or 0]
    return plat.cpu_name


def check_model_placement(model_name: str, model: ModelConfig, device: torch.device,
                          dtype: DType, plat: Platform | None = None) -> None:
    """Refuse, before anything is built, a model on a device or dtype it cannot run in.

    On the CPU (torch 2.13) nn.LSTM/GRU, packed sequences, LayerNorm and the loop ops all run
    float16 and bfloat16 forward and backward, so only the model's own `dtypes` restrict it.
    On an NVIDIA GPU bfloat16 needs compute capability >= 8.0 of the chosen GPU. Not
    `torch.cuda.is_bf16_supported()`: it asks about the current device, not the chosen one,
    and by default (including_emulation=True) says yes on pre-Ampere GPUs, which only
    emulate bfloat16 (torch/cuda/__init__.py). ROCm GPUs that PyTorch supports have it.
    """
    if model.cpu_only and device.type != "cpu":
        raise UnsupportedError(f"model={model_name} runs on the CPU only; device is {device} "
                               "— use device=cpu")
    if model.dtypes and dtype.value not in model.dtypes:
        raise UnsupportedError(f"dtype={dtype.value}: model={model_name} supports "
                               f"{', '.join(model.dtypes)} only — use dtype={model.dtypes[0]}")
    if dtype is DType.bfloat16 and device.type == "cuda":
        plat = plat or current_platform()
        cap = plat.capability(device.index)
        if not plat.hip_version and cap is not None and cap < (8, 0):
            raise UnsupportedError(
                f"dtype=bfloat16: {device_name(device, plat)} (SM {cap[0]}.{cap[1]}) has no "
                "native bfloat16 (needs SM >= 8.0) — use dtype=float16 or float32")


def use_device(device: torch.device) -> ContextManager:
    """Make the chosen GPU the current one while a job runs: current-device queries inside
    PyTorch (cuDNN's bfloat16 RNN check, default streams, is_bf16_supported) then answer
    for it, not for GPU 0."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a host clock read after it covers that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
