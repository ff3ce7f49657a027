"""Turn the `device` config into a torch.device, with one-line reasons when it cannot be had."""

from __future__ import annotations

import torch

from rnnexp.errors import ConfigError, UnsupportedError
from rnnexp.platform import Platform
from rnnexp.schema import DeviceConfig, DeviceKind, DType


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
