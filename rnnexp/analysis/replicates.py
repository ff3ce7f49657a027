"""Two sides of a series of runs compared on the runs' replicates (the per-process values):
each run's level and its sampling variance, the drift between runs (τ²), and the shift
between the sides with its interval — the run, not the process, is the unit of replication.
rnnexp.analysis.history explains the method; rnnexp.analysis.change_points proposes the splits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.001  # as Otava's default: a history is read often, and every read is a test
CONFIDENCE = 0.95
MIN_RUNS = 2  # runs needed on each side of a change
PRIOR_DF = 4  # how many degrees of freedom the series' pooled process spread counts for


@dataclass
class Shift:
    """The difference in level between two sides of a series (after vs before)."""

    pvalue: float
    size: float = 0.0  # after ÷ before − 1
    low: float = math.nan  # its 95% interval
    high: float = math.nan
    before_ms: float = math.nan
    after_ms: float = math.nan



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
