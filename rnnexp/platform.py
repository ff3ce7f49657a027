"""What this PyTorch build and machine offer, read once into plain data.

Decisions (which device, which backend is possible) take a `Platform`, never torch itself,
so tests can describe a CUDA or ROCm machine without having one.
"""

from __future__ import annotations

import platform as _pyplatform
import socket
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import torch


@dataclass(frozen=True)
class Platform:
    torch_version: str
    cuda_version: str | None = None  # torch.version.cuda: a CUDA build
    hip_version: str | None = None  # torch.version.hip: a ROCm build
    gpu_count: int = 0
    gpu_names: tuple[str, ...] = ()
    cudnn_version: int | None = None  # cuDNN on CUDA, MIOpen on ROCm
    cpu_name: str = ""
    cpu_threads: int = 1
    host: str = ""
    has_mkldnn: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def build(self) -> str:
        """Human words for the build, used in error messages."""
        if self.hip_version:
            return f"ROCm {self.hip_version}"
        if self.cuda_version:
            return f"CUDA {self.cuda_version}"
        return "CPU-only"

    @property
    def gpu_vendor(self) -> str | None:
        if not self.gpu_count:
            return None
        return "amd" if self.hip_version else "nvidia"

    def as_dict(self) -> dict:
        return asdict(self)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _pyplatform.processor() or _pyplatform.machine()


@lru_cache(maxsize=1)
def current() -> Platform:
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return Platform(
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        hip_version=getattr(torch.version, "hip", None),
        gpu_count=gpu_count,
        gpu_names=tuple(torch.cuda.get_device_name(i) for i in range(gpu_count)),
        cudnn_version=cudnn,
        cpu_name=_cpu_name(),
        cpu_threads=torch.get_num_threads(),
        host=socket.gethostname(),
        has_mkldnn=torch.backends.mkldnn.is_available(),
        extra={"python": _pyplatform.python_version()},
    )
