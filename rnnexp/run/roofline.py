"""The limits a result is placed against: the achievable GEMM GFLOP/s and memory-copy GB/s of
a device, measured on its first use and cached on disk.

A measurement is keyed by device kind and name, dtype, thread count (CPU), torch and
CUDA/HIP versions, and the measurement method, so a new device, dtype or library measures
again and everything else reads the cache. Both numbers come from
`torch.utils.benchmark.Timer.blocked_autorange` (it synchronises the accelerator around its
blocks); the peak is the *best* block, not the median: other work on the machine only ever
slows a block down, and a ceiling should be what the device can reach, not what it reached on
average while shared.

- GEMM: `torch.mm` of two n×n matrices, 2n³ FLOPs. n doubles from 256 until one product takes
  ≥ 10 ms (at most 8192): compute-bound on a small CPU and a large GPU alike (intensity n/6
  FLOP/byte in float32, far above any device's ridge point), and short where GEMM is slow
  (float16 on a CPU runs at a few GFLOP/s).
- Copy: `dst.copy_(src)` of a tensor far larger than the caches (256 MiB on a CPU, 1 GiB on a
  GPU), counting the bytes read and written (2 × size), as the work counts do (minimum
  traffic).
- On a CPU with several threads, each peak is the better of those threads and one (see
  `measure`).

The peaks are kept in rnnexp's cache folder (rnnexp.results.cache), under `roofline/`; delete
a file, or run `python -m rnnexp roofline --remeasure`, to measure again. `python -m rnnexp
roofline` prints the peaks of this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import torch
from filelock import FileLock
from torch.utils.benchmark import Timer

from rnnexp.results import cache
from rnnexp.results.result import Result, Roofline, attainable

# Part of the key: raise it when the measurement changes, so old numbers are not reused.
METHOD = 1
GEMM_START_N = 256
GEMM_MAX_N = 8192
GEMM_TARGET_S = 0.01  # one product at least this long: compute-bound, timer overhead nil
MIN_RUN_TIME_S = 0.2  # blocked_autorange's budget per measurement (its own default)
CALIBRATE_S = 0.05  # ... and per GEMM size tried on the way
COPY_BYTES = {"cpu": 256 * 2**20, "cuda": 2**30}


@dataclass(frozen=True)
class Key:
    """What a measurement holds for."""

    device_type: str
    device_name: str
    dtype: str
    threads: int  # torch threads on a CPU; 0 on a GPU (host threads do not matter there)
    torch: str
    accelerator: str  # CUDA or HIP version of the build, "" for a CPU-only build
    method: int = METHOD

    @classmethod
    def of(cls, device: torch.device, device_name: str, dtype: str, threads: int) -> Key:
        return cls(device_type=device.type, device_name=device_name, dtype=dtype,
                   threads=threads if device.type == "cpu" else 0,
                   torch=torch.__version__,
                   accelerator=torch.version.cuda or getattr(torch.version, "hip", None) or "")

    def filename(self) -> str:
        """Readable and unique: a slug of device and dtype plus a hash of the whole key."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.device_type}-{self.device_name}").strip("-")
        return f"{slug[:60]}-{self.dtype}-{digest[:12]}.json"


@dataclass(frozen=True)
class Peaks:
    gflops: float  # best GEMM throughput
    gbps: float  # best copy bandwidth, read + write bytes
    gemm_n: int
    copy_bytes: int
    measured_at: str  # UTC, ISO 8601
    # 1-minute load average when measured (None where the OS has none): how shared it was.
    load_1min: Optional[float] = None
    # The thread counts that reached the peaks (CPU: the key's threads or 1; see measure).
    gemm_threads: int = 0
    copy_threads: int = 0


def threads_text(key: Key) -> str:
    return f", {key.threads} thread{'s' if key.threads > 1 else ''}" if key.threads else ""


def cache_path(key: Key) -> Path:
    return cache.cache_dir() / "roofline" / key.filename()


def _best_s(timer: Timer, min_run_time: float = MIN_RUN_TIME_S) -> float:
    return min(timer.blocked_autorange(min_run_time=min_run_time).times)


def _gemm(device: torch.device, dtype: torch.dtype, threads: int) -> tuple[float, int]:
    """(GFLOP/s, n) of the best n×n product."""
    n = GEMM_START_N
    while True:
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        c = torch.empty(n, n, device=device, dtype=dtype)
        timer = Timer("torch.mm(a, b, out=c)", globals={"torch": torch, "a": a, "b": b, "c": c},
                      num_threads=threads)
        # Sized by the best of a short block (its first products warm the library up): one
        # product slowed by other work must not stop the growth early.
        if _best_s(timer, CALIBRATE_S) >= GEMM_TARGET_S or 2 * n > GEMM_MAX_N:
            return 2 * n**3 / _best_s(timer) / 1e9, n
        n *= 2


def _copy(src: torch.Tensor, dst: torch.Tensor, threads: int) -> float:
    """GB/s of one copy, bytes read plus bytes written."""
    timer = Timer("dst.copy_(src)", globals={"src": src, "dst": dst}, num_threads=threads)
    return 2 * src.numel() * src.element_size() / _best_s(timer) / 1e9


def measure(device: torch.device, dtype: torch.dtype, threads: int) -> Peaks:
    """GEMM and copy peaks of `device` (its current-device context entered for a GPU).

    On a CPU with several threads each peak is the better of those threads and one: a library
    may run a job's small products on one thread, and on an oversubscribed machine several
    threads can be far slower than one (threads wait at barriers for a descheduled partner),
    so the threads' number alone could sit below what a job reaches."""
    from rnnexp.machine.device import use_device

    counts = [threads, 1] if device.type == "cpu" and threads > 1 else [threads]
    with use_device(device):
        (gflops, gemm_n), gemm_threads = max((_gemm(device, dtype, t), t) for t in counts)
        size = COPY_BYTES["cpu" if device.type == "cpu" else "cuda"]
        src = torch.ones(size // torch.empty((), dtype=dtype).element_size(), device=device,
                         dtype=dtype)
        gbps, copy_threads = max((_copy(src, torch.empty_like(src), t), t) for t in counts)
    load = current_load()
    return Peaks(gflops=gflops, gbps=gbps, gemm_n=gemm_n, copy_bytes=size,
                 measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 load_1min=load, gemm_threads=gemm_threads, copy_threads=copy_threads)


def _load(path: Path, key: Key) -> Optional[Peaks]:
    try:
        data = json.loads(path.read_text())
        if data.get("key") != asdict(key):
            return None
        return Peaks(**data["peaks"])
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or unreadable: measure again


def _save(path: Path, key: Key, peaks: Peaks) -> None:
    cache.write_atomically(path, json.dumps({"key": asdict(key), "peaks": asdict(peaks)},
                                            indent=2))


def peaks(device: torch.device, device_name: str, dtype: str, threads: int,
          remeasure: bool = False) -> Peaks:
    """The cached peaks of this device, dtype and thread count; measured (one line on stderr)
    when there are none. Parallel jobs wait for one measurement instead of each running their
    own. An unwritable cache only costs a measurement per call."""
    key = Key.of(device, device_name, dtype, threads)
    path = cache_path(key)
    cached = None
    if not remeasure and (cached := _load(path, key)) and not _retake(device, cached):
        return cached
    what = f"{device_name} ({device.type}, {dtype}{threads_text(key)})"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            if not remeasure and (cached := _load(path, key)) and not _retake(device, cached):
                return cached  # another process measured while this one waited
            why = "again: the cached ones were taken on a busy machine" if cached else "once"
            print(f"roofline: measuring GEMM and copy peaks of {what} {why}; cached in {path}",
                  file=sys.stderr, flush=True)
            found = measure(device, getattr(torch, dtype), threads)
            _save(path, key, found)
            _warn_if_busy(device, found)
            return found
    except OSError as err:
        print(f"roofline: cache {path.parent} not writable ({err.strerror}); measuring "
              f"{what} uncached", file=sys.stderr, flush=True)
        return measure(device, getattr(torch, dtype), threads)


def current_load() -> Optional[float]:
    """The 1-minute load average (None where the OS keeps none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def busy(device: torch.device, load: Optional[float]) -> bool:
    """A CPU with more runnable work than cores: its peaks measured now would be low, and
    every % of peak placed against them high."""
    return device.type == "cpu" and load is not None and load > (os.cpu_count() or 1)


def _retake(device: torch.device, cached: Peaks) -> bool:
    """Cached peaks taken on a busy machine are measured again once it is quiet, so % of
    peak does not depend on which process happened to measure first."""
    return busy(device, cached.load_1min) and not busy(device, current_load())


def _warn_if_busy(device: torch.device, found: Peaks) -> None:
    cpus = os.cpu_count() or 1
    if busy(device, found.load_1min):
        print(f"roofline: the machine was busy (load {found.load_1min:.1f} on {cpus} CPUs), so "
              "these peaks are low and every % of peak high — the first run on a quiet machine "
              "measures them again", file=sys.stderr, flush=True)


def place(result: Result, found: Peaks) -> Optional[Roofline]:
    """The result's rate phase against the peaks; None when it has no rates."""
    phase = result.rate_phase
    if not phase.timed or not phase.gflops or not phase.gbps:
        return None
    intensity = phase.gflops / phase.gbps  # = FLOPs / bytes of the phase
    roof = attainable(intensity, found.gflops, found.gbps)
    return Roofline(
        phase="total" if result.phase("total").timed else "forward",
        intensity=intensity, gflops=phase.gflops, gbps=phase.gbps,
        peak_gflops=found.gflops, peak_gbps=found.gbps,
        pct_peak_flops=100 * phase.gflops / found.gflops,
        pct_peak_bandwidth=100 * phase.gbps / found.gbps,
        pct_attainable=100 * phase.gflops / roof,
        bound="compute" if roof == found.gflops else "memory",
        peaks_measured_at=found.measured_at)


def of_result(result: Result) -> Optional[Roofline]:
    """The roofline of a finished job: the peaks of its device, dtype and thread count (from
    the cache, measured on first use), its rates placed against them."""
    if not result.timed or not result.device:
        return None
    threads = (result.timing.threads if result.timing else 0) or torch.get_num_threads()
    try:
        found = peaks(torch.device(result.device), result.device_name or result.device,
                      result.dtype or "float32", threads)
    except RuntimeError as err:  # e.g. a GPU without room for the copy: keep the result
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"roofline: could not measure the peaks of {result.device} ({first}); the "
              "result is recorded without its roofline", file=sys.stderr, flush=True)
        return None
    return place(result, found)
