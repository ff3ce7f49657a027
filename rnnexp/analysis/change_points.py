"""Change points of a series of runs: Apache Otava's E-divisive detector proposes where the
run levels split, and each candidate is tested on the replicates of both sides
(rnnexp.analysis.replicates). Otava is an optional dependency (`pip install rnnexp[history]`);
rnnexp.analysis.history imports this module only when it looks for changes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from otava.change_point_divisive.base import CandidateChangePoint, ChangePoint, SignificanceTester
from otava.change_point_divisive.calculator import PairDistanceCalculator
from otava.change_point_divisive.detector import ChangePointDetector

from rnnexp.analysis.replicates import ALPHA, MIN_RUNS, Replicates, Shift


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



# Otava's own method on one number per run: the baseline rnnexp's is measured against. -----


def otava_defaults(values: Sequence[float]) -> list[int]:
    """Apache Otava's change points with its defaults (windows of 50, p ≤ 0.001, no
    minimum magnitude) on one number per run."""
    from otava.analysis import compute_change_points

    points, _ = compute_change_points(list(map(float, values)))
    return sorted(int(c.index) for c in points)
