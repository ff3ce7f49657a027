"""How far this machine's speed moves between runs minutes or hours apart: what no spread
measured within one job's seconds can show, and what a rerun of the same configuration meets.

A probe, one LSTM cell step at fastrnns' default size (`torch.lstm_cell`, batch 64, input and
hidden 512, float32) timed by torch.utils.benchmark's `blocked_autorange` for about 50 ms,
runs after a job's processes have finished (not before: beside a fork server importing torch
it ran 28× slower), at most once a minute per device and thread count (the history's newest
entry decides, across processes). Its median goes into a history in the cache, next to the
roofline's (`drift/` under `$RNNEXP_CACHE_DIR`, keyed the same way). The machine's drift is
the standard deviation of the logarithms of the probes of the last day (≈ their relative
spread), once there are at least `MIN_PROBES`. A probe during which other processes kept the
machine busy (rnnexp.environment's rule) is kept as `busy` and left out: it measures them,
not the machine (the probe ran 2 ms idle and 56 ms beside a benchmark), and a result timed
on a busy machine carries its own flag.

The probe's own noise is in that spread too, so it errs wide. Its premise: what slows the
machine (other tenants of the host, frequency, thermal state) slows a job about as much as the
probe. The between-process interval adds it (stats.between_processes), so a rerun's median
lands inside it here even when the machine changes speed between runs; on a machine whose
speed holds, it adds next to nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from filelock import FileLock
from torch.utils.benchmark import Timer

from rnnexp import environment, roofline

PROBE_EVERY_S = 60.0  # at most one probe a minute: a sweep's jobs share it
WINDOW_S = 24 * 3600.0  # probes older than a day say little about today
MAX_PROBES = 200  # kept in the history
MIN_PROBES = 5  # fewer probes than this: drift unknown (None)
PROBE_S = 0.05
BATCH, SIZE = 64, 512


@dataclass(frozen=True)
class Drift:
    """The machine's speed drift between runs, as far as its probes show it."""

    spread: Optional[float]  # std of log probe medians (≈ relative); None: too few probes
    probes: int  # probes in the window
    hours: float  # from the oldest probe used to now

    @property
    def known(self) -> bool:
        return self.spread is not None


def probe_ms(device: torch.device, threads: int) -> float:
    """Median of one LSTM cell step on `device` with `threads` threads, in ms."""
    from rnnexp.device import use_device

    with use_device(device):
        g = torch.Generator(device=device).manual_seed(0)
        x, h, c = (torch.randn(BATCH, SIZE, device=device, generator=g) for _ in range(3))
        w_ih, w_hh = (torch.randn(4 * SIZE, SIZE, device=device, generator=g) / SIZE ** 0.5
                      for _ in range(2))
        timer = Timer("torch.lstm_cell(x, (h, c), w_ih, w_hh)",
                      globals={"torch": torch, "x": x, "h": h, "c": c, "w_ih": w_ih,
                               "w_hh": w_hh}, num_threads=max(threads, 1))
        return timer.blocked_autorange(min_run_time=PROBE_S).median * 1e3


def estimate(probes: Sequence[dict], now: float) -> Drift:
    """The drift from the probes of the last WINDOW_S (dicts with `at`, epoch s, and `ms`)."""
    recent = [p for p in probes if now - p["at"] <= WINDOW_S and p["ms"] > 0
              and not p.get("busy")]
    if not recent:
        return Drift(None, 0, 0.0)
    hours = (now - min(p["at"] for p in recent)) / 3600
    if len(recent) < MIN_PROBES:
        return Drift(None, len(recent), hours)
    logs = np.log([p["ms"] for p in recent])
    return Drift(float(logs.std(ddof=1)), len(recent), hours)


def history_path(key: roofline.Key) -> Path:
    return roofline.cache_dir() / "drift" / key.filename()


def _load(path: Path, key: roofline.Key) -> list[dict]:
    try:
        data = json.loads(path.read_text())
        if data.get("key") != asdict(key):
            return []
        return [p for p in data["probes"] if isinstance(p.get("at"), (int, float))
                and isinstance(p.get("ms"), (int, float))]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []  # absent or unreadable: a history starts again


def _save(path: Path, key: roofline.Key, probes: list[dict]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": asdict(key), "probes": probes[-MAX_PROBES:]}))
    os.replace(tmp, path)  # readers never see half a file


def observe(device: torch.device, device_name: str, threads: int, probe: bool = True,
            now: Optional[float] = None) -> Drift:
    """Probe the machine (`probe`) when its history has no probe from the last minute, then
    the drift from that history. Parallel jobs wait for one probe instead of each running
    their own. An unwritable cache costs nothing but the estimate: drift unknown."""
    key = roofline.Key.of(device, device_name, "float32", threads)
    path = history_path(key)
    now = time.time() if now is None else now
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            probes = _load(path, key)
            if probe and (not probes or now - probes[-1]["at"] >= PROBE_EVERY_S):
                start = environment.snapshot()
                ms = probe_ms(device, threads)
                # A process started during the probe counts too (a benchmark starting beside
                # the probe slowed it 3×).
                busy = environment.busy_reason(environment.look_since(start, include_new=True),
                                               environment.usable_cores())
                probes.append({"at": now, "ms": ms, **({"busy": busy} if busy else {})})
                _save(path, key, probes)
    except OSError:
        return Drift(None, 0, 0.0)
    return estimate(probes, now)


def describe(drift: Drift) -> str:
    """e.g. "±3.1% (1σ) over 24 probes in 5.2 h"."""
    if not drift.known:
        return f"unknown ({drift.probes} of {MIN_PROBES} probes so far)"
    return f"±{100 * drift.spread:.1f}% (1σ) over {drift.probes} probes in {drift.hours:.1f} h"


def main(argv: Optional[Sequence[str]] = None) -> int:
    from rnnexp.device import device_name
    from rnnexp.platform import current

    parser = argparse.ArgumentParser(
        prog="python -m rnnexp.drift",
        description="This machine's speed drift between runs, from its probe history; "
                    "--watch probes once a minute to learn it before a comparison.")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help=f"torch threads (default: torch's, here {torch.get_num_threads()})")
    parser.add_argument("--watch", type=float, default=0.0, metavar="MINUTES",
                        help="probe once a minute for this long (default: probe once if due)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.exit(2, f"error: --threads: must be ≥ 1, got {args.threads}\n")
    if args.watch < 0:
        parser.exit(2, f"error: --watch: must be ≥ 0 minutes, got {args.watch}\n")
    try:
        device = torch.device(args.device)
        if device.type not in ("cpu", "cuda"):
            raise RuntimeError(device.type)
        name = device_name(device, current())
    except (RuntimeError, IndexError):
        parser.exit(2, f"error: --device {args.device}: no such device here — use cpu\n")
    key = roofline.Key.of(device, name, "float32", args.threads)
    end = time.monotonic() + 60 * args.watch
    while True:
        found = observe(device, name, args.threads)
        latest = _load(history_path(key), key)[-1:]
        probe = f"; latest probe {latest[0]['ms']:.3f} ms" if latest else ""
        if latest and latest[0].get("busy"):
            probe += f" (left out: {latest[0]['busy']})"
        print(f"{name} ({device.type}, {args.threads} threads): drift {describe(found)}{probe}",
              flush=True)
        if time.monotonic() + PROBE_EVERY_S > end:
            break
        time.sleep(PROBE_EVERY_S)
    print(f"history: {history_path(key)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
