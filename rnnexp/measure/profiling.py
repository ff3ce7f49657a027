"""`bench.profile=true`: a torch.profiler trace of a few extra iterations, after timing.

The timed iterations are never profiled (the profiler's own overhead would be in them). The
extra iterations run the same forward(+backward) as the timer, each marked `iteration N`;
the Chrome trace lands in the job folder (`profile/trace.json`: open it in Perfetto,
ui.perfetto.dev, or chrome://tracing) and the MLflow sink logs it as an artifact. The
operators that took the most self time (device time on a GPU, CPU time otherwise) go into
results.json. Upstream's profiling path was nvprof, which does not run on GPUs of compute
capability 8.0 and newer.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, record_function

from rnnexp.backends.base import untimed_runs
from rnnexp.measure.records import ProfileInfo
from rnnexp.models.workload import Workload

TRACE_FILE = "profile/trace.json"
TOP_OPS = 10


def record(workload: Workload, device: torch.device, iters: int, folder: Path) -> ProfileInfo:
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(iters):
            with record_function(f"iteration {i}"):
                untimed_runs(workload, device, 1)
    path = Path(folder) / TRACE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return ProfileInfo(iters=iters, trace=TRACE_FILE, **top_operators(prof, on_gpu, iters))


def top_operators(prof: torch.profiler.profile, on_gpu: bool, iters: int) -> dict:
    """The operators with the most self time, per iteration, in ms (our markers left out)."""
    self_key = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    total_key = "device_time_total" if on_gpu else "cpu_time_total"
    events = [e for e in prof.key_averages() if not e.key.startswith("iteration ")]
    events.sort(key=lambda e: getattr(e, self_key), reverse=True)
    top = [{"name": e.key, "calls": e.count // max(iters, 1),
            "self_ms": getattr(e, self_key) / 1e3 / max(iters, 1),
            "total_ms": getattr(e, total_key) / 1e3 / max(iters, 1)}
           for e in events[:TOP_OPS] if getattr(e, self_key) > 0]
    return {"sorted_by": "self device time" if on_gpu else "self CPU time", "top_ops": top}
