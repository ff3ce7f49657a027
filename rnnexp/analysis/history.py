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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional, Sequence

import numpy as np
from otava.change_point_divisive.base import CandidateChangePoint, ChangePoint, SignificanceTester
from otava.change_point_divisive.calculator import PairDistanceCalculator
from otava.change_point_divisive.detector import ChangePointDetector
from scipy import stats as sps

from rnnexp.analysis.sweeps import Run
from rnnexp.results.identity import MeasurementKey
from rnnexp.results.result import OK, PhaseStats

ALPHA = 0.001  # as Otava's default: a history is read often, and every read is a test
CONFIDENCE = 0.95
MIN_RUNS = 2  # runs needed on each side of a change
PRIOR_DF = 4  # how many degrees of freedom the series' pooled process spread counts for


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
    def of(cls, run: Run, phase: str) -> Optional[Point]:
        """The run as a point of `phase` ("auto": forward+backward, forward alone where no
        backward ran); None when it did not time it."""
        if phase == "auto":
            phase = "total" if run.result.phase("total").timed else "forward"
        stats: PhaseStats = run.result.phase(phase)
        if run.result.status != OK or not stats.timed:
            return None
        reps = [m for m in (stats.process_medians_ms or [stats.median_ms]) if m and m > 0]
        if not reps:
            return None
        plat = run.result.platform
        return cls(replicates=tuple(reps), commit=run.result.git_commit,
                   torch=plat.torch_version if plat else "", started_at=run.result.started_at,
                   run_id=run.row.run_id, name=run.row.job, flags=tuple(run.flags),
                   single_low=stats.median_ci_low_ms, single_high=stats.median_ci_high_ms)


@dataclass
class Shift:
    """The difference in level between two sides of a series (after vs before)."""

    pvalue: float
    size: float = 0.0  # after ÷ before − 1
    low: float = math.nan  # its 95% interval
    high: float = math.nan
    before_ms: float = math.nan
    after_ms: float = math.nan


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


def machine_of(run: Run) -> Machine:
    timing = run.result.timing
    threads = (timing.threads if timing else 0) or 0
    return Machine(run.result.device_name or run.result.device, int(threads))


def _started(point: Point) -> datetime:
    try:
        return datetime.fromisoformat(point.started_at)
    except ValueError:
        return datetime.min


def build(runs: Sequence[Run], phase: str, names: dict[MeasurementKey, str]) -> list[Series]:
    """The runs as series: one per measurement (its key without versions) and machine,
    each in the order its runs started. `names`: what each measurement is called."""
    found: dict[tuple[MeasurementKey, Machine], Series] = {}
    for run in runs:
        point = Point.of(run, phase)
        if point is None:
            continue
        where = machine_of(run)
        series = found.setdefault((run.key, where), Series(run.key, where, names.get(
            run.key, "")))
        series.points.append(point)
    for s in found.values():
        s.points.sort(key=_started)
    return sorted(found.values(), key=lambda s: (s.name, str(s.machine)))


# The test on replicates ------------------------------------------------------------------


class Replicates:
    """A series' replicates on the log scale: each run's level (the median of its
    replicates: one process of three hit by a burst does not move it) and that level's
    sampling variance — the spread between the run's processes, shrunk towards the series'
    typical one (PRIOR_DF), so a run of three processes does not claim to know its own
    spread, and a run whose processes disagree counts less."""

    def __init__(self, points: Sequence[Sequence[float]]):
        self.logs = [np.log(np.asarray(p, dtype=float)) for p in points]
        self.levels = np.array([float(np.median(v)) for v in self.logs])
        k = np.array([len(v) for v in self.logs], dtype=float)
        df = k - 1
        own = np.array([float(np.var(v, ddof=1)) if len(v) > 1 else np.nan
                        for v in self.logs])
        # The typical spread: the median of the runs' own (a mean is what bursts inflate).
        typical = float(np.nanmedian(own)) if np.isfinite(own).any() else 0.0
        shrunk = (PRIOR_DF * typical + df * np.nan_to_num(own)) / (PRIOR_DF + df)
        # A median of k ≥ 3 values varies π/2 times as much as their mean (normal data).
        efficiency = np.where(k >= 3, math.pi / 2, 1.0)
        self.variances = efficiency * shrunk / k

    def shift(self, left: slice, right: slice) -> Shift:
        """Right against left: the random-effects difference of their levels."""
        y = [self.levels[left], self.levels[right]]
        v = [self.variances[left], self.variances[right]]
        n = len(y[0]) + len(y[1])
        if len(y[0]) < 1 or len(y[1]) < 1 or n < 3:
            return Shift(pvalue=1.0)
        tau2 = _between_runs(y, v)
        # No variance known at all (runs of one process, no scatter): equal weights.
        known = all(np.all(vi + tau2 > 0) for vi in v)
        w = [1 / (vi + tau2) if known else np.ones_like(vi) for vi in v]
        means = [float((wi * yi).sum() / wi.sum()) for wi, yi in zip(w, y, strict=True)]
        var = sum(1 / float(wi.sum()) for wi in w)
        # Hartung–Knapp: scale by how far the runs actually scatter about their sides' means
        # (never below the runs' own variances, when those are known).
        q = sum(float((wi * (yi - m) ** 2).sum()) for wi, yi, m in zip(w, y, means, strict=True))
        var *= max(1.0, q / (n - 2)) if known else q / (n - 2)
        d = means[1] - means[0]
        if var <= 0:
            return Shift(pvalue=0.0 if d else 1.0, size=math.expm1(d), low=math.expm1(d),
                         high=math.expm1(d), before_ms=math.exp(means[0]),
                         after_ms=math.exp(means[1]))
        se = math.sqrt(var)
        p = float(2 * sps.t.sf(abs(d) / se, n - 2))
        half = float(sps.t.ppf((1 + CONFIDENCE) / 2, n - 2)) * se
        return Shift(pvalue=p, size=math.expm1(d), low=math.expm1(d - half),
                     high=math.expm1(d + half), before_ms=math.exp(means[0]),
                     after_ms=math.exp(means[1]))


def _between_runs(y: Sequence[np.ndarray], v: Sequence[np.ndarray]) -> float:
    """τ²: the variance of run levels beyond their own, about each side's mean
    (DerSimonian–Laird, the two sides pooled)."""
    q = c = 0.0
    dof = 0
    for yi, vi in zip(y, v, strict=True):
        if len(yi) < 2:
            continue
        w = 1 / np.maximum(vi, 1e-12)
        mean = (w * yi).sum() / w.sum()
        q += float((w * (yi - mean) ** 2).sum())
        c += float(w.sum() - (w ** 2).sum() / w.sum())
        dof += len(yi) - 1
    return max(0.0, (q - dof) / c) if c > 0 else 0.0


class ReplicateTester(SignificanceTester):
    """Otava's significance tester, deciding on the runs' replicates: the detector hands it
    candidate splits of the run levels; it tests the runs on both sides (`Replicates.shift`).
    Otava's own interval bookkeeping (split and merge steps) is reused by handing it the
    runs' positions as the series, so `compare` learns which runs each side holds."""

    def __init__(self, replicates: Replicates, max_pvalue: float):
        super().__init__(max_pvalue)
        self.replicates = replicates
        self.positions = np.arange(len(replicates.levels), dtype=float)

    def change_point(self, candidate: CandidateChangePoint, series, intervals):
        from otava.analysis import TTestSignificanceTester

        if not math.isfinite(candidate.qhat):  # no split leaves MIN_RUNS runs a side
            return ChangePoint.from_candidate(candidate, Shift(pvalue=1.0))
        # Otava's t-test tester knows which slices a candidate splits (or merges); its
        # `compare` is ours, and what it slices are positions, not values.
        return TTestSignificanceTester.change_point(self, candidate, self.positions,
                                                    intervals)

    def compare(self, left, right) -> Shift:
        lo, hi = int(left[0]), int(right[-1]) + 1
        mid = int(right[0])
        return self.replicates.shift(slice(lo, mid), slice(mid, hi))


class SidesAtLeast(PairDistanceCalculator):
    """Otava's E-divisive candidate search, with candidates that leave at least `MIN_RUNS`
    runs on each side of the split."""

    def get_candidate_change_point(self, interval: slice) -> CandidateChangePoint:
        start = 0 if interval.start is None else interval.start
        end = len(self.series) if interval.stop is None else interval.stop
        q = self._get_Q_vals(start, end)
        # q[i, j]: split at τ = start + i + 1 of series[start : start + j + 2].
        i = np.arange(q.shape[0])[:, None]
        j = np.arange(q.shape[1])[None, :]
        fits = (i + 1 >= MIN_RUNS) & (j - i + 1 >= MIN_RUNS) & (end - (start + i + 1) >= MIN_RUNS)
        if not fits.any():
            return CandidateChangePoint(index=start + 1, qhat=-math.inf)
        q = np.where(fits, q, -np.inf)
        a, b = np.unravel_index(np.argmax(q), q.shape)
        return CandidateChangePoint(index=int(a + 1 + start), qhat=float(q[a][b]))


def change_points(replicates: Sequence[Sequence[float]], alpha: float = ALPHA
                  ) -> list[tuple[int, Shift]]:
    """Where the level of a series of runs changes (index of the first run after each), with
    each change's shift between its neighbouring change points."""
    if len(replicates) < 2 * MIN_RUNS:
        return []
    reps = Replicates(replicates)
    tester = ReplicateTester(reps, alpha)
    detector = ChangePointDetector(significance_tester=tester, calculator=SidesAtLeast)
    found = sorted(c.index for c in detector.get_change_points(reps.levels.copy())
                   if math.isfinite(c.qhat))
    # Each change sized between its neighbours, as the final series splits.
    bounds = [0, *found, len(replicates)]
    return [(cp, reps.shift(slice(bounds[n], cp), slice(cp, bounds[n + 2])))
            for n, cp in enumerate(found)]


def detect(series: Series, alpha: float = ALPHA) -> Series:
    """`series` with its changes found."""
    series.changes = [Change(index=i, shift=s, before=series.points[i - 1],
                             after=series.points[i])
                      for i, s in change_points([p.replicates for p in series.points], alpha)]
    return series


# Otava's own method on one number per run: the baseline rnnexp's is measured against. -----


def otava_defaults(values: Sequence[float]) -> list[int]:
    """Apache Otava's change points with its defaults (windows of 50, p ≤ 0.001, no
    minimum magnitude) on one number per run."""
    from otava.analysis import compute_change_points

    points, _ = compute_change_points(list(map(float, values)))
    return sorted(int(c.index) for c in points)

