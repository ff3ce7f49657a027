"""A measurement's history: its runs as a series over commits, torch versions and dates, and
the changes in its level, each found and sized from the runs' replicates.

A series is one measurement (rnnexp.results.identity: the key without versions) on one
machine (device name and thread count, as rnnexp.run.drift keys a history): runs of another
machine or device are never one series. Its points are runs in the order they started, each
with its replicates — the phase's median in each of its processes (one value for a run of one
process).

Change points (`changes`): Apache Otava's E-divisive detector (Matteson & James; Otava's
`ChangePointDetector` with its pair-distance calculator, the method of Daly et al. and Hunter)
proposes where the series of run levels splits, and each candidate is tested on the
replicates of both sides (`ReplicateTester`) rather than on one number per run:

- a run's level is the median of the logarithms of its replicates (one process of three
  hit by a burst does not move it), known to the spread between its processes (shrunk
  towards the series' typical spread, so a run of three processes does not claim to know
  its own spread, and a run whose processes disagree counts less);
- runs move between each other by more than their processes say (the machine's drift from
  minute to minute): that variance (τ², DerSimonian–Laird) is estimated inside each side;
- the sides' levels are compared weighted by 1/(τ² + the run's own variance) — a run hit by
  a burst in one of its processes counts less — with the Hartung–Knapp correction (never
  narrower than the runs’ own variances say), on n − 2
  degrees of freedom (n runs: the run, not the process, is the unit of replication).

A change needs `MIN_RUNS` runs on each side: a single run off the level is a burst until a
second one agrees. Its size (after ÷ before − 1) has the same test's 95% interval.

The level followed is the phase's time (`TIME`: each process's median, ms) or, for runs
taken with `bench.metric=instructions`, its instruction count (`INSTRUCTIONS`: each counting
process's median count per iteration, rnnexp.results.result.CountStats) — the same test on
replicates that repeat to a fraction of a percent, whatever the machine's load.

`gate` picks the changes a CI job fails on: of a size and direction, in the latest runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional, Sequence

import numpy as np
from scipy import stats as sps

from rnnexp.analysis.replicates import ALPHA, CONFIDENCE, Shift
from rnnexp.analysis.sweeps import Run
from rnnexp.errors import RnnexpError
from rnnexp.results.identity import MeasurementKey
from rnnexp.results.result import OK, PhaseStats

TIME, INSTRUCTIONS = "time", "instructions"
METRICS = {TIME: "ms", INSTRUCTIONS: "instructions"}  # the level followed, and its unit
SLOWER, FASTER, EITHER = "slower", "faster", "either"


@dataclass(frozen=True)
class Machine:
    """Where a series was measured: runs of another machine are another series."""

    device_name: str
    threads: int

    def __str__(self) -> str:
        return f"{self.device_name or '?'}, {self.threads} threads"


@dataclass
class Point:
    """One run of a series: its replicates (per-process medians, ms) and what code took it."""

    replicates: tuple[float, ...]
    commit: str = ""
    torch: str = ""
    started_at: str = ""
    run_id: str = ""
    name: str = ""
    flags: tuple[str, ...] = ()
    # The median's own interval when the run had one process (nothing between processes).
    single_low: Optional[float] = None
    single_high: Optional[float] = None

    @property
    def logs(self) -> np.ndarray:
        return np.log(np.asarray(self.replicates, dtype=float))

    @property
    def level(self) -> float:
        """The median of its replicates, ms (as the change points read it: `Replicates`)."""
        return float(np.exp(np.median(self.logs)))

    def interval(self) -> tuple[float, float]:
        """95% interval of its level from its replicates (t on their logs); with one process,
        the median's interval from its samples."""
        k = len(self.replicates)
        if k < 2:
            low, high = self.single_low, self.single_high
            return (low, high) if low is not None and high is not None else (self.level,) * 2
        half = float(sps.t.ppf((1 + CONFIDENCE) / 2, k - 1)) * float(
            np.std(self.logs, ddof=1)) / math.sqrt(k)
        return self.level * math.exp(-half), self.level * math.exp(half)

    @property
    def version(self) -> str:
        """The code that took it: short commit and torch version."""
        commit = self.commit[:7] + ("-dirty" if self.commit.endswith("-dirty") else "")
        return f"{commit or '?'} · torch {self.torch or '?'}"

    @property
    def day(self) -> str:
        return self.started_at[:16].replace("T", " ")

    @classmethod
    def of(cls, run: Run, phase: str, metric: str = TIME) -> Optional[Point]:
        """The run as a point of `phase` ("auto": forward+backward, forward alone where no
        backward ran) in `metric`; None when it did not time (or count) it."""
        if run.result.status != OK:
            return None
        if metric == INSTRUCTIONS:
            counted = run.result.instructions.phases if run.result.instructions else {}
            if phase == "auto":
                phase = "total" if "total" in counted else "forward"
            c = counted.get(phase)
            if c is None:
                return None
            reps, low, high = c.process_medians or [c.median], c.low, c.high
        else:
            if phase == "auto":
                phase = "total" if run.result.phase("total").timed else "forward"
            stats: PhaseStats = run.result.phase(phase)
            if not stats.timed:
                return None
            reps = stats.process_medians_ms or [stats.median_ms]
            low, high = stats.median_ci_low_ms, stats.median_ci_high_ms
        reps = [m for m in reps if m and m > 0]
        if not reps:
            return None
        plat = run.result.platform
        return cls(replicates=tuple(reps), commit=run.result.git_commit,
                   torch=plat.torch_version if plat else "", started_at=run.result.started_at,
                   run_id=run.row.run_id, name=run.row.job, flags=tuple(run.flags),
                   single_low=low, single_high=high)


@dataclass
class Change:
    """A change point: the level moved between `index - 1` and `index`."""

    index: int
    shift: Shift
    before: Point
    after: Point

    @property
    def same_code(self) -> bool:
        """Both runs ran the same commit and torch: the machine changed, not the code."""
        return self.before.version == self.after.version

    def fires(self, threshold: float, direction: str) -> bool:
        """Whether it is a change of at least `threshold` (0.05: 5%) in `direction`."""
        size = self.shift.size
        return {SLOWER: size >= threshold, FASTER: size <= -threshold,
                EITHER: abs(size) >= threshold}[direction]

    def size_text(self) -> str:
        s = self.shift
        return (f"{100 * s.size:+.1f}% ({100 * s.low:+.1f} … {100 * s.high:+.1f})"
                if math.isfinite(s.low) else f"{100 * s.size:+.1f}%")


@dataclass
class Series:
    """One measurement on one machine, its runs in the order they started."""

    key: MeasurementKey
    machine: Machine
    name: str
    points: list[Point] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    metric: str = TIME

    @property
    def unit(self) -> str:
        return METRICS[self.metric]


def machine_of(run: Run) -> Machine:
    timing = run.result.timing
    threads = (timing.threads if timing else 0) or 0
    return Machine(run.result.device_name or run.result.device, int(threads))


def _started(point: Point) -> datetime:
    try:
        return datetime.fromisoformat(point.started_at)
    except ValueError:
        return datetime.min


def series_key(run: Run) -> MeasurementKey:
    """The measurement, whatever interpreter took it (bench.python is an environment, as
    the torch version is)."""
    return dataclasses.replace(run.key, bench=tuple(
        (k, v) for k, v in run.key.bench if k != "python"))


def names(runs: Sequence[Run]) -> dict[MeasurementKey, str]:
    """Each measurement by its job label, with the key's fields that tell apart
    measurements whose labels read alike."""
    first: dict[MeasurementKey, Run] = {}
    for r in runs:
        first.setdefault(r.key, r)
    out = {k: r.row.label for k, r in first.items()}
    fields = {k: k.fields() for k in first}
    for label in {v for v in out.values() if list(out.values()).count(v) > 1}:
        same = [k for k, v in out.items() if v == label]
        vary = sorted({f for k in same for f in fields[k]
                       if len({fields[o].get(f) for o in same}) > 1})
        for k in same:
            out[k] = f"{label} " + " ".join(f"{f}={fields[k].get(f, '?')}" for f in vary)
    return out


def build(runs: Sequence[Run], phase: str, names: dict[MeasurementKey, str],
          metric: str = TIME) -> list[Series]:
    """The runs as series: one per measurement (its key without versions) and machine,
    each in the order its runs started. `names`: what each measurement is called."""
    found: dict[tuple[MeasurementKey, Machine], Series] = {}
    for run in runs:
        point = Point.of(run, phase, metric)
        if point is None:
            continue
        where = machine_of(run)
        series = found.setdefault((run.key, where), Series(run.key, where, names.get(
            run.key, ""), metric=metric))
        series.points.append(point)
    for s in found.values():
        s.points.sort(key=_started)
    return sorted(found.values(), key=lambda s: (s.name, str(s.machine)))


def detect(series: Series, alpha: float = ALPHA) -> Series:
    """`series` with its changes found."""
    try:
        from rnnexp.analysis.change_points import change_points
    except ImportError as err:
        raise RnnexpError(f"change points need Apache Otava ({err.name} is missing) — "
                          "install rnnexp's history extra: pip install -e '.[history]' "
                          "(make install includes it)") from None
    series.changes = [Change(index=i, shift=s, before=series.points[i - 1],
                             after=series.points[i])
                      for i, s in change_points([p.replicates for p in series.points], alpha)]
    return series


def find(runs: Sequence[Run], phase: str, metric: str = TIME, alpha: float = ALPHA
         ) -> list[Series]:
    """The runs' series (an interpreter is an environment, as a torch version is), each with
    its changes found. Raises a one-line error when no run has the phase in `metric`."""
    keyed = [dataclasses.replace(r, key=series_key(r)) for r in runs]
    found = [detect(s, alpha) for s in build(keyed, phase, names(keyed), metric)]
    if not found:
        if metric == INSTRUCTIONS:
            raise RnnexpError("--metric instructions: no selected run was counted — record "
                              "runs with bench.metric=instructions, or use --metric time")
        raise RnnexpError(f"--phase {phase}: no selected run timed it — try --phase auto")
    return found


def gate(all_series: Sequence[Series], threshold: float, direction: str = SLOWER,
         latest: int = 5) -> list[tuple[Series, Change]]:
    """The changes a CI gate fails on: at least `threshold` in `direction`, whose first run
    after it is one of the series' `latest` runs (an old change was already seen)."""
    return [(s, c) for s in all_series for c in s.changes
            if c.index >= len(s.points) - latest and c.fires(threshold, direction)]
