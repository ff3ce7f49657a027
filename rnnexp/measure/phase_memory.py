"""Peak memory of each phase — forward, backward — above the level at the phase's start,
from one extra iteration after the timed samples (never inside them: the timing is not
perturbed). It uses the `timing.Steps` protocol only, nothing of the model.

What can be measured depends on the device; each kind is named for what it is:

- `cuda_peak_mb` (a GPU): `torch.cuda.max_memory_allocated` over the phase minus
  `torch.cuda.memory_allocated` at its start, the peak counter reset there
  (`torch.cuda.reset_peak_memory_stats`). Tensor memory handed out by PyTorch's CUDA caching
  allocator — not the cache it keeps reserved, nor workspaces that libraries allocate
  outside it.
- `rss_hwm_mb` (a CPU, on Linux with glibc): the process's resident-set high-water mark
  (VmHWM in /proc/self/status) over the phase minus its resident set (VmRSS) at the start.
  The high-water mark is reset by writing 5 to /proc/self/clear_refs, and freed heap memory
  is handed back to the OS first (glibc `malloc_trim`), so memory the phase takes from
  chunks that earlier iterations freed counts as the new memory it is. It holds everything
  the process touched: tensors, autograd's saved state, oneDNN scratch, Python objects, in
  whole pages. PyTorch's CPU allocator has no peak counter of its own, and the profiler's
  memory events cost seconds.
- elsewhere nothing is measured, and the reason is recorded.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from pathlib import Path
from typing import Optional, Protocol

import torch

from rnnexp.measure.records import CUDA_PEAK, RSS_HWM, PhaseMemory
from rnnexp.measure.timing import Steps

MB = 2 ** 20


class Meter(Protocol):
    kind: str

    def begin(self) -> None: ...

    def end(self) -> float:
        """MiB above the level at `begin`."""
        ...


class CudaPeak:
    kind = CUDA_PEAK

    def __init__(self, device: torch.device):
        self.device = device
        self._base = 0

    def begin(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self._base = torch.cuda.memory_allocated(self.device)

    def end(self) -> float:
        torch.cuda.synchronize(self.device)
        return max(0, torch.cuda.max_memory_allocated(self.device) - self._base) / MB


class RssHighWater:
    kind = RSS_HWM

    def __init__(self, proc: Path, trim):
        self.proc, self._trim = proc, trim
        self._base = 0

    def _status(self, key: str) -> int:
        """A /proc status field in bytes (the file says kB)."""
        for line in (self.proc / "status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise OSError(f"{self.proc / 'status'} has no {key}")

    def begin(self) -> None:
        self._trim(0)  # freed heap back to the OS: reused chunks count as new memory
        (self.proc / "clear_refs").write_text("5")  # VmHWM := VmRSS
        self._base = self._status("VmRSS")

    def end(self) -> float:
        return max(0, self._status("VmHWM") - self._base) / MB


def _malloc_trim():
    """glibc's malloc_trim, or None (another C library)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def meter_for(device: torch.device, proc: Path = Path("/proc/self"),
              platform: str = sys.platform) -> tuple[Optional[Meter], str]:
    """The meter for a job on `device`, or None and why nothing can be measured there."""
    if device.type == "cuda":
        return CudaPeak(device), ""
    if device.type != "cpu":
        return None, f"no peak-memory counter for device type {device.type}"
    if not platform.startswith("linux"):
        return None, f"the resident-set high-water mark needs Linux's /proc ({platform})"
    trim = _malloc_trim()
    if trim is None:
        return None, "the resident-set high-water mark needs glibc's malloc_trim"
    clear = proc / "clear_refs"
    try:
        clear.write_text("5")
    except OSError as err:
        return None, f"cannot reset the resident-set high-water mark ({clear}: " \
                     f"{err.strerror or err})"
    return RssHighWater(proc, trim), ""


def measure(steps: Steps, device: torch.device, backward: bool) -> PhaseMemory:
    """One untimed iteration with the meter around each phase, gradients cleared before it
    as the timer does (so the backward allocates them) and after it."""
    meter, why = meter_for(device)
    if meter is None:
        return PhaseMemory(not_measured=why)
    backward = backward and steps.has_backward
    steps.zero_grad()
    gc.collect()
    try:
        meter.begin()
        with torch.set_grad_enabled(backward):
            outputs = steps.run_forward()
        forward_mb = meter.end()
        backward_mb = None
        if backward:
            args = steps.backward_setup(outputs)  # type: ignore[misc]
            meter.begin()
            steps.backward(*args)  # type: ignore[misc]
            backward_mb = meter.end()
            del args
        del outputs
    except OSError as err:  # /proc changed its mind: say so rather than fail the job
        return PhaseMemory(not_measured=f"{meter.kind}: {err}")
    finally:
        steps.zero_grad()
    return PhaseMemory(kind=meter.kind, forward_mb=round(forward_mb, 3),
                       backward_mb=None if backward_mb is None else round(backward_mb, 3))
