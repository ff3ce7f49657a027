"""Vendor RNN libraries: cuDNN (NVIDIA), MIOpen (AMD, same torch flag on ROCm builds), and
`aten` with the vendor library off. `auto` picks one from the device and build."""

from __future__ import annotations

from typing import ContextManager

import torch

from rnnexp.backends.base import Backend
from rnnexp.platform import Platform


class VendorLibrary(Backend):
    enabled = True

    def __init__(self, plat: Platform, device: torch.device, cudnn_benchmark: bool = False,
                 **options):
        super().__init__(plat, device, **options)
        self.cudnn_benchmark = cudnn_benchmark

    def context(self) -> ContextManager:
        return torch.backends.cudnn.flags(enabled=self.enabled, benchmark=self.cudnn_benchmark)

    def info(self) -> dict:
        info = {"name": self.name, "vendor_library": self.enabled,
                "cudnn_benchmark": self.cudnn_benchmark}
        if self.optimize_s is not None:  # a scripted loop model: its untimed warm-up
            info.update(optimize_s=self.optimize_s, warm_runs=self.WARM_RUNS)
        return info


class Cudnn(VendorLibrary):
    name = "cudnn"

    def check(self, model_name, model) -> None:
        plat = self.plat
        if plat.hip_version:
            self.refuse(f"needs a CUDA build of PyTorch; this build is {plat.build} "
                        "— use backend=miopen")
        if not plat.cuda_version:
            self.refuse(f"needs a CUDA build of PyTorch; this build is {plat.build} "
                        "— use backend=aten")
        if self.device.type != "cuda":
            self.refuse("runs on a GPU only; device is cpu — use device=cuda or backend=aten")

    def info(self) -> dict:
        return {**super().info(), "cuda": self.plat.cuda_version,
                "cudnn": self.plat.cudnn_version}


class Miopen(VendorLibrary):
    name = "miopen"

    def check(self, model_name, model) -> None:
        plat = self.plat
        if not plat.hip_version:
            alt = "cudnn" if plat.cuda_version and self.device.type == "cuda" else "aten"
            self.refuse(f"needs a ROCm build of PyTorch; this build is {plat.build} "
                        f"— use backend={alt}")
        if self.device.type != "cuda":
            self.refuse("runs on a GPU only; device is cpu — use device=cuda or backend=aten")

    def info(self) -> dict:
        return {**super().info(), "hip": self.plat.hip_version,
                "miopen": self.plat.cudnn_version}


class Aten(VendorLibrary):
    """PyTorch's native kernels: the vendor RNN library off (fastrnns' `aten` runner)."""

    name = "aten"
    enabled = False

    def info(self) -> dict:
        return {**super().info(), "onednn_available": self.plat.has_mkldnn}


def auto(plat: Platform, device: torch.device, **options) -> Backend:
    """cudnn on an NVIDIA GPU, miopen on an AMD GPU, aten on the CPU."""
    if device.type == "cuda":
        cls = Miopen if plat.hip_version else Cudnn
    else:
        cls = Aten
    return cls(plat, device, **options)
