"""Turn the `device` config into a torch.device, with one-line reasons when it cannot be had."""

from __future__ import annotations

import torch

from rnnexp.errors import ConfigError, UnsupportedError
from rnnexp.platform import Platform
from rnnexp.schema import DeviceConfig, DeviceKind, DType, ModelConfig


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
                          dtype: DType) -> None:
    """Refuse, before anything is built, a model on a device or dtype it cannot run in.

    On the CPU (torch 2.13) nn.LSTM/GRU, packed sequences, LayerNorm and the loop ops all run
    float16 and bfloat16 forward and backward, so only the model's own `dtypes` restrict it.
    On CUDA bfloat16 needs compute capability ≥ 8.0, checked when a GPU is really present.
    """
    if model.cpu_only and device.type != "cpu":
        raise UnsupportedError(f"model={model_name} runs on the CPU only; device is {device} "
                               "— use device=cpu")
    if model.dtypes and dtype.value not in model.dtypes:
        raise UnsupportedError(f"dtype={dtype.value}: model={model_name} supports "
                               f"{', '.join(model.dtypes)} only — use dtype={model.dtypes[0]}")
    if (dtype is DType.bfloat16 and device.type == "cuda" and torch.cuda.is_available()
            and not torch.cuda.is_bf16_supported()):
        raise UnsupportedError(f"dtype=bfloat16: {torch.cuda.get_device_name(device)} has no "
                               "bfloat16 support — use dtype=float16 or float32")
