"""Whether a difference between two sets of timing samples is real: the ratio of their medians
with a bootstrap 95% interval, a Mann-Whitney U rank test, and Holm's correction for the
number of comparisons made at once (scipy does the statistics; Holm's step-down is a few
lines, scipy has no Holm and statsmodels would be a heavy dependency for it).

A difference counts only if it is significant after correction, its interval excludes 1, and
it is at least `min_effect` large; anything else is "~" (no difference shown), so noise is
never presented as a speedup.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05  # family-wise error rate over all cells compared at once
CONFIDENCE = 0.95
MIN_EFFECT = 0.03  # differences below 3% are not reported as speedups or slowdowns
RESAMPLES = 2000
SEED = 0  # the bootstrap is seeded: the same samples always give the same interval
SAME = "~"


@dataclass
class Difference:
    """candidate vs baseline: speedup = median(baseline) / median(candidate), >1 is faster."""

    speedup: float
    low: float  # 95% bootstrap interval of the speedup (nan when it cannot be formed)
    high: float
    p: float  # Mann-Whitney U, two-sided
    p_holm: float = math.nan  # p corrected for every cell compared at once
    real: bool = False  # significant after correction and at least min_effect large

    @property
    def slowdown(self) -> float:
        """How much slower the candidate is, as a fraction (0.1 = 10% slower; <0: faster)."""
        return 1 / self.speedup - 1 if self.speedup > 0 else math.inf

    @property
    def verdict(self) -> str:
        if not self.real:
            return SAME
        return "faster" if self.speedup > 1 else "slower"

    def cell(self) -> str:
        """The table cell: "~", or the speedup with its interval, e.g. 1.23× (1.10–1.35)."""
        if not self.real:
            return SAME
        interval = f" ({self.low:.2f}–{self.high:.2f})" if math.isfinite(self.low) else ""
        return f"{self.speedup:.2f}×{interval}"


def _median_ratio(baseline, candidate, axis=-1):
    return np.median(baseline, axis=axis) / np.median(candidate, axis=axis)


def speedup_interval(baseline: Sequence[float], candidate: Sequence[float],
                     confidence: float = CONFIDENCE, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap of the ratio of medians, each sample resampled on its own."""
    a, b = np.asarray(baseline, float), np.asarray(candidate, float)
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny sample's degenerate resamples
        res = sps.bootstrap((a, b), _median_ratio, paired=False, vectorized=True,
                            n_resamples=RESAMPLES, confidence_level=confidence,
                            method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def difference(baseline: Sequence[float], candidate: Sequence[float]) -> Difference:
    """Speedup, its interval and the rank test of one cell (uncorrected)."""
    a, b = np.asarray(baseline, float), np.asarray(candidate, float)
    speedup = float(np.median(a) / np.median(b))
    low, high = speedup_interval(a, b)
    p = float(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return Difference(speedup=speedup, low=low, high=high, p=p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def judge(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
          min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> list[Difference]:
    """Every (baseline, candidate) pair compared, Holm-corrected across all of them."""
    diffs = [difference(a, b) for a, b in pairs]
    for d, p in zip(diffs, holm([d.p for d in diffs]), strict=True):
        d.p_holm = p
        # The interval must agree: the U test asks whether one side tends to be larger, the
        # interval whether the medians differ; a cell shows a speedup only if both say so.
        excludes_one = not (d.low <= 1 <= d.high)  # nan bounds (too few samples): no say
        d.real = p < alpha and excludes_one and abs(d.speedup - 1) >= min_effect
    return diffs
