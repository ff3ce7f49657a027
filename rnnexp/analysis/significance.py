"""Whether a difference between two measurements is real, judged at the unit of replication.

Iterations of one run are not independent draws: they share that minute's machine, and on a
shared machine the level moves by 10–80% between runs. A test over pooled iterations of two
runs calls every such level shift "significant" (pseudo-replication). So:

- Configurations measured **interleaved** (the same rounds, rnnexp.run.interleave) saw the same
  machine round by round: they compare **paired by round**. The speedup is the median over
  rounds of the ratio of their round medians (each side's processes averaged on the log
  scale); its 95% interval and p-value come from a hierarchical bootstrap that resamples
  rounds (paired: both sides keep the same rounds) and each side's processes (Kalibera &
  Jones 2013), so the spread between processes is in it too.
- Runs measured **at different times** (two sweeps, or two jobs that were not interleaved)
  compare **run against run**: each run's level is the geometric mean of its process
  medians, uncertain by its processes' spread (s²/k) and by the configuration's drift between
  runs on this machine (rnnexp.run.drift, d²). Without a known drift the level of a run is not
  known to better than the drift nobody measured: "cannot tell".

Holm's step-down corrects for the number of cells judged at once (scipy has no Holm and
statsmodels would be a heavy dependency for it). A cell is:
- real (faster/slower): significant after correction, its interval excludes 1, and at least
  `min_effect` large;
- "~" (the same): not real, and its interval lies within ±`equivalence` — any difference is
  smaller than that;
- "cannot tell": not real, and the interval is wider than that: this comparison cannot
  resolve a difference of that size here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05  # family-wise error rate over all cells compared at once
CONFIDENCE = 0.95
MIN_EFFECT = 0.03  # differences below 3% are not reported as speedups or slowdowns
RESAMPLES = 4000
SEED = 0  # the bootstrap is seeded: the same measurements always give the same interval
MIN_ROUNDS = 3  # paired rounds needed before the interleaved comparison says anything
SAME, UNDECIDED = "~", "?"
PAIRED, RUNS = "paired by round", "run against run"


@dataclass
class Difference:
    """candidate vs baseline: speedup = baseline ÷ candidate (>1: the candidate is faster)."""

    speedup: float
    low: float  # 95% interval of the speedup (nan when it cannot be formed)
    high: float
    p: float  # two-sided, uncorrected (1.0 when nothing can be said)
    method: str = RUNS
    why_not: str = ""  # why nothing can be said (too few rounds, no drift history, ...)
    p_holm: float = math.nan  # p corrected for every cell compared at once
    real: bool = False  # significant after correction and at least min_effect large
    same: bool = False  # not real, and the interval lies within ±equivalence

    @property
    def slowdown(self) -> float:
        """How much slower the candidate is, as a fraction (0.1 = 10% slower; <0: faster)."""
        return 1 / self.speedup - 1 if self.speedup > 0 else math.inf

    @property
    def half_width(self) -> float:
        """The interval's relative half-width on the log scale (inf when unknown)."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low <= 0:
            return math.inf
        return math.expm1((math.log(self.high) - math.log(self.low)) / 2)

    @property
    def verdict(self) -> str:
        if self.real:
            return "faster" if self.speedup > 1 else "slower"
        return SAME if self.same else UNDECIDED

    def cell(self) -> str:
        """The table cell: a real speedup with its interval, "~", or "cannot tell ±X%"."""
        if self.real:
            return f"{self.speedup:.2f}× ({self.low:.2f}–{self.high:.2f})"
        if self.same:
            return SAME
        if math.isfinite(self.half_width):
            return f"cannot tell ±{100 * self.half_width:.0f}%"
        return "cannot tell"


def _nothing(speedup: float, method: str, why: str) -> Difference:
    return Difference(speedup=speedup, low=math.nan, high=math.nan, p=1.0, method=method,
                      why_not=why)


def _log_matrix(rounds: Sequence[Sequence[Optional[float]]], width: int) -> np.ndarray:
    """`[process][round]` log medians, NaN where missing, padded to `width` rounds."""
    out = np.full((len(rounds), width), np.nan)
    for p, row in enumerate(rounds):
        for r, v in enumerate(row[:width]):
            if v is not None and v > 0:
                out[p, r] = math.log(v)
    return out


def paired(baseline: Sequence[Sequence[Optional[float]]],
           candidate: Sequence[Sequence[Optional[float]]],
           resamples: int = RESAMPLES, seed: int = SEED) -> Difference:
    """Two configurations of one interleaved window, from their round medians
    (`[process][round]`, PhaseStats.rounds_ms): paired by round, processes resampled too."""
    width = max([len(r) for r in (*baseline, *candidate)] or [0])
    a, b = _log_matrix(baseline, width), _log_matrix(candidate, width)
    both = ~np.all(np.isnan(a), axis=0) & ~np.all(np.isnan(b), axis=0)
    a, b = a[:, both], b[:, both]
    rounds = int(both.sum())
    if rounds == 0:
        return _nothing(math.nan, PAIRED, "no round measured both")
    # The median over rounds of the paired log differences: a round hit by a burst (on a
    # shared machine a visit can take 10× its neighbours) moves it by one rank, not by 10×.
    estimate = float(np.median(np.nanmean(a, axis=0) - np.nanmean(b, axis=0)))
    if rounds < MIN_ROUNDS:
        return _nothing(math.exp(estimate), PAIRED, f"{rounds} paired rounds")
    rng = np.random.default_rng(seed)
    w = rng.multinomial(rounds, np.full(rounds, 1 / rounds), size=resamples)  # rounds
    stat = _weighted_median(_side_means(a, w, rng) - _side_means(b, w, rng), w)
    stat = stat[np.isfinite(stat)]
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(stat, [tail, 1 - tail])
    # The bootstrap's two-sided p-value for "no difference": how often a resample lands on
    # the other side of 0 than the estimate, doubled (at least one resample's worth).
    beyond = np.mean(stat <= 0) if estimate > 0 else np.mean(stat >= 0)
    p = min(1.0, max(2 * beyond, 1 / len(stat)))
    return Difference(speedup=math.exp(estimate), low=math.exp(low), high=math.exp(high),
                      p=float(p), method=PAIRED)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Row by row: the median of `values` (NaN: left out) counted `weights` times each."""
    weights = np.where(np.isnan(values), 0, weights).astype(float)
    values = np.where(np.isnan(values), np.inf, values)
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    cw = np.cumsum(np.take_along_axis(weights, order, axis=1), axis=1)
    half = cw[:, -1:] / 2
    at = np.argmax(cw >= half, axis=1)
    out = v[np.arange(len(v)), at]
    return np.where(cw[:, -1] > 0, out, np.nan)


def _side_means(logs: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[resample][round]: each round's mean over a resample of this side's processes (NaN
    where none of them measured that round)."""
    k = logs.shape[0]
    v = rng.multinomial(k, np.full(k, 1 / k), size=w.shape[0])  # processes per resample
    have = ~np.isnan(logs)
    num = v @ np.where(have, logs, 0.0)
    den = v @ have.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


@dataclass
class Level:
    """One run's level in a phase, as its result records it."""

    process_medians_ms: Sequence[float]  # one per process (one value for one process)
    drift: Optional[float] = None  # σ of the configuration's log medians between runs
    drift_runs: int = 0  # earlier runs that drift comes from

    @property
    def log_center(self) -> float:
        return float(np.mean(np.log(self.process_medians_ms)))

    def parts(self) -> list[tuple[float, int]]:
        """(variance of the log level, its degrees of freedom) by source."""
        k = len(self.process_medians_ms)
        out = []
        if k > 1:
            out.append((float(np.var(np.log(self.process_medians_ms), ddof=1)) / k, k - 1))
        if self.drift is not None and self.drift_runs >= 2:
            out.append((self.drift ** 2, self.drift_runs - 1))
        return out


def between_runs(baseline: Level, candidate: Level) -> Difference:
    """Two runs measured at different times, at the run level: their log levels' difference
    against the spread between processes and the drift between runs (Welch–Satterthwaite
    degrees of freedom)."""
    estimate = baseline.log_center - candidate.log_center
    speedup = math.exp(estimate)
    for side, level in (("baseline", baseline), ("candidate", candidate)):
        if level.drift is None or level.drift_runs < 2:
            return _nothing(speedup, RUNS, f"no drift history for the {side}'s configuration "
                                           "here (5 runs give one), so the level of a run is "
                                           "not known")
    parts = baseline.parts() + candidate.parts()
    var = sum(v for v, _ in parts)
    if var <= 0:
        return _nothing(speedup, RUNS, "no spread known")
    df = var ** 2 / sum(v ** 2 / d for v, d in parts if d > 0)
    se = math.sqrt(var)
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, df)) * se
    p = float(2 * sps.t.sf(abs(estimate) / se, df))
    return Difference(speedup=speedup, low=math.exp(estimate - half),
                      high=math.exp(estimate + half), p=p, method=RUNS)


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


def decide(diffs: Sequence[Difference], min_effect: float = MIN_EFFECT,
           equivalence: Optional[float] = None, alpha: float = ALPHA) -> list[Difference]:
    """Holm-correct `diffs` together and give each its verdict. `equivalence`: the largest
    difference that still counts as "~" (default: `min_effect`)."""
    bound = max(min_effect, equivalence or 0.0)
    for d, p in zip(diffs, holm([d.p for d in diffs]), strict=True):
        d.p_holm = p
        excludes_one = not (d.low <= 1 <= d.high)  # nan bounds: no say
        d.real = p < alpha and excludes_one and abs(d.speedup - 1) >= min_effect
        d.same = not d.real and math.isfinite(d.low) and d.low >= 1 / (1 + bound) \
            and d.high <= 1 + bound
    return list(diffs)
