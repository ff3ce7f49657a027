"""How far a configuration's median moves between runs on this machine, from its own earlier
runs: what no spread measured within one job's seconds can show, and what a rerun meets.

Every valid run (status ok, machine not flagged busy) appends its phase medians to a history
in rnnexp's cache folder (`drift/` there: rnnexp.results.cache), keyed by what makes
two runs the same measurement (rnnexp.results.identity: the configuration less the options that only
decide how long or how to measure — iteration counts, processes, precision, verification,
sinks, ... — with the torch and code versions) and the machine it ran on (device name and
thread count). The drift of a phase is the spread of
the logarithms of the earlier runs' medians of the last day (≈ relative; σ from their median
absolute deviation, so one run hit by a burst does not widen every later interval), known
from `MIN_RUNS` runs on; stats.between_processes adds it to the interval.
A configuration without that many runs yet borrows the drift of the others measured on this
device, thread count and torch version (their variances pooled, weighted by degrees of
freedom): how much reruns move here, if not how much this one's do.

Why the configuration's own runs and not a probe of the machine: a fixed probe (an LSTM cell
step timed once a minute) varied by 2.4–3.2 ms over minutes in which the fastrnns-shape `jit`
loop held at 5.2–5.4 ms; on another afternoon the loop moved by 5.5 → 9.4 ms. Workloads feel
the same machine differently; only reruns of the workload show its drift.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from filelock import FileLock

from rnnexp.results import cache
from rnnexp.results.identity import MeasurementKey

WINDOW_S = 24 * 3600.0  # runs older than a day say little about today
MAX_RUNS = 100  # kept in a history
MIN_RUNS = 5  # fewer earlier runs than this: drift unknown (a MAD of fewer says little)
MAD_TO_SIGMA = 1.4826  # a normal distribution's σ per median absolute deviation
PHASES = ("forward", "backward", "total")


@dataclass(frozen=True)
class Drift:
    """A configuration's run-to-run drift on this machine, as its earlier runs show it."""

    spreads: Mapping[str, float] = field(default_factory=dict)  # phase → σ of log medians
    runs: int = 0  # earlier runs in the window (pooled: degrees of freedom + 1)
    hours: float = 0.0  # from the oldest of them to now
    source: str = ""  # "own", "pooled from N configurations", "" (unknown)

    @property
    def known(self) -> bool:
        return bool(self.spreads)

    @property
    def spread(self) -> Optional[float]:
        """The fwd+bwd phase's (forward alone when there is no backward), None if unknown."""
        return self.spreads.get("total", self.spreads.get("forward"))


UNKNOWN = Drift()


def history_key(measurement: MeasurementKey, device_name: str, threads: int) -> dict[str, Any]:
    """A history's key: the measurement (its torch and code versions included) on this
    machine — its device's name and the threads it ran with."""
    return {**measurement.to_json(), "device_name": device_name, "threads": threads}


def history_path(key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return cache.cache_dir() / "drift" / f"{digest[:24]}.json"


def _read(path: Path) -> tuple[dict, list[dict]]:
    """A history's key and its well-formed runs; ({}, []) when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
        return dict(data["key"]), [r for r in data["runs"]
                                   if isinstance(r.get("at"), (int, float))]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}, []


def _load(path: Path, key: Mapping[str, Any]) -> list[dict]:
    """The runs of `key`'s history (none if the file holds another key: a history starts
    again)."""
    stored, runs = _read(path)
    return runs if stored == json.loads(json.dumps(key, default=str)) else []


def estimate(runs: Sequence[Mapping[str, Any]], now: float) -> Drift:
    """The drift from the runs of the last WINDOW_S (dicts with `at`, epoch s, and a median
    in ms per phase)."""
    recent = [r for r in runs if now - r["at"] <= WINDOW_S]
    hours = (now - min(r["at"] for r in recent)) / 3600 if recent else 0.0
    spreads = {}
    for phase in PHASES:
        medians = [r[phase] for r in recent if isinstance(r.get(phase), (int, float))
                   and r[phase] > 0]
        if len(medians) >= MIN_RUNS:
            spreads[phase] = robust_spread(np.log(medians))
    return Drift(spreads, len(recent), hours)


def robust_spread(logs: np.ndarray) -> float:
    """σ from the median absolute deviation: one rerun hit by a burst of other work on the
    host (10 ms against 5.2) must not widen every later interval (the standard deviation of
    42 runs with a few such made a claim of ±59% where most reruns moved ±3%)."""
    return MAD_TO_SIGMA * float(np.median(np.abs(logs - np.median(logs))))


def earlier(key: Mapping[str, Any], now: Optional[float] = None) -> Drift:
    """The drift of this measurement from its earlier runs; with too few of them, the pooled
    drift of the other measurements here (`pooled`); UNKNOWN when there is neither."""
    now = time.time() if now is None else now
    own = estimate(_load(history_path(key), key), now)
    if own.known:
        return dataclasses.replace(own, source="own")
    return pooled(key, now) or dataclasses.replace(own, source="")


# Same device, thread count and torch version: histories a configuration may borrow from.
MACHINE = ("device_name", "threads", "torch_version")


class PooledCache:
    """The pooled drift of each machine (`MACHINE`), kept `max_age_s` in this process: a
    sweep's first runs would each read every history in the cache folder."""

    def __init__(self, max_age_s: float = 60.0):
        self.max_age_s = max_age_s
        self._found: dict[tuple, tuple[float, Optional[Drift]]] = {}

    def get(self, machine: tuple, now: float) -> tuple[bool, Optional[Drift]]:
        """(known, drift): known is False when this machine's was not read recently."""
        cached = self._found.get(machine)
        if cached is not None and now - cached[0] < self.max_age_s:
            return True, cached[1]
        return False, None

    def put(self, machine: tuple, now: float, found: Optional[Drift]) -> None:
        self._found[machine] = (now, found)

    def clear(self) -> None:
        self._found.clear()


POOLED = PooledCache()  # this process's


def pooled(key: Mapping[str, Any], now: float) -> Optional[Drift]:
    """The fwd+bwd (else forward) drift of the other measurements on this machine, their
    variances pooled by degrees of freedom, Σ(nᵢ−1)sᵢ² / Σ(nᵢ−1), applied to every phase;
    None when none has enough runs. Read once a minute per process (POOLED)."""
    machine = tuple(key.get(f) for f in MACHINE)
    known, cached = POOLED.get(machine, now)
    if known:
        return cached
    weighted = df = configurations = 0
    oldest = 0.0
    for path in history_path(key).parent.glob("*.json"):
        other, runs = _read(path)
        if tuple(other.get(f) for f in MACHINE) != machine:
            continue
        found = estimate(runs, now)
        if found.spread is not None:
            weighted += (found.runs - 1) * found.spread ** 2
            df += found.runs - 1
            configurations += 1
            oldest = max(oldest, found.hours)
    result = None
    if df:
        spread = float(np.sqrt(weighted / df))
        result = Drift({phase: spread for phase in PHASES}, df + 1, oldest,
                       f"pooled from {configurations} configuration"
                       + ("s" if configurations > 1 else ""))
    POOLED.put(machine, now, result)
    return result


def record(key: Mapping[str, Any], medians: Mapping[str, Optional[float]],
           now: Optional[float] = None) -> None:
    """Append one run's phase medians (ms). An unwritable cache loses only the record."""
    path = history_path(key)
    entry = {"at": time.time() if now is None else now,
             **{p: m for p, m in medians.items() if m is not None}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            runs = [*_load(path, key), entry][-MAX_RUNS:]
            cache.write_atomically(path, json.dumps({"key": key, "runs": runs}, default=str))
    except OSError:
        pass


