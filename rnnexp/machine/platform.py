"""What this PyTorch build, machine and checkout are, read once into plain data.

Decisions (which device, which backend is possible) take a `Platform`, never torch itself,
so tests can describe a CUDA or ROCm machine without having one.
"""

from __future__ import annotations

import platform as _pyplatform
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class Platform:
    torch_version: str
    cuda_version: str | None = None  # torch.version.cuda: a CUDA build
    hip_version: str | None = None  # torch.version.hip: a ROCm build
    gpu_count: int = 0
    gpu_names: tuple[str, ...] = ()
    # (major, minor) compute capability per GPU (CUDA SM; ROCm reports its gfx major/minor).
    gpu_capabilities: tuple[tuple[int, int], ...] = ()
    cudnn_version: int | None = None  # cuDNN on CUDA, MIOpen on ROCm
    # Why the vendor RNN library cannot be used although the build has one (version query
    # raised): backend=cudnn/miopen refuse with it; every other backend runs.
    cudnn_error: str = ""
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

    def capability(self, index: int | None) -> tuple[int, int] | None:
        caps = self.gpu_capabilities
        i = index or 0
        return tuple(caps[i]) if i < len(caps) else None  # type: ignore[return-value]

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


def vendor_library_version() -> tuple[int | None, str]:
    """(version, "") or (None, why). `torch.backends.cudnn.version()` runs `_init()`, which
    raises RuntimeError on a runtime/compile-time cuDNN or MIOpen mismatch, and for cuDNN >=
    9.11 with any visible GPU below SM 7.5 (torch/backends/cudnn/__init__.py): that must
    not stop jobs that never use the library (device=cpu, aten, jit, ...)."""
    import torch  # here: results, and the commands that read them, load without torch

    if not torch.backends.cudnn.is_available():
        return None, ""
    try:
        return torch.backends.cudnn.version(), ""
    except RuntimeError as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return None, first


@lru_cache(maxsize=1)
def current() -> Platform:
    import torch

    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cudnn, cudnn_error = vendor_library_version()
    return Platform(
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        hip_version=getattr(torch.version, "hip", None),
        gpu_count=gpu_count,
        gpu_names=tuple(torch.cuda.get_device_name(i) for i in range(gpu_count)),
        gpu_capabilities=tuple(tuple(torch.cuda.get_device_capability(i))
                               for i in range(gpu_count)),
        cudnn_version=cudnn,
        cudnn_error=cudnn_error,
        cpu_name=_cpu_name(),
        cpu_threads=torch.get_num_threads(),
        host=socket.gethostname(),
        has_mkldnn=torch.backends.mkldnn.is_available(),
        extra={"python": _pyplatform.python_version()},
    )


# The code version a result was measured with: the project's checkout.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def git_commit() -> str:
    """HEAD of the project's checkout (+"-dirty" with local changes), or "" outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, text=True,
                             capture_output=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=PROJECT_ROOT, text=True, capture_output=True, timeout=5
                               ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{sha}-dirty" if dirty else sha
