"""Whether a difference between two measurements is real, judged at the unit of replication.

Iterations of one run are not independent draws: they share that minute's machine, and on a
shared machine the level moves by 10–80% between runs. A test over pooled iterations of two
runs calls every such level shift "significant" (pseudo-replication). Nor is one process a
replicate of its configuration: a process carries persistent offsets (placement, allocator
state, what the profiling executor specialised) that no number of its samples averages out.
So the process is the replicate:

- Configurations measured **interleaved** (the same rounds, rnnexp.run.interleave) saw the same
  machine round by round: they compare **paired by round**, with the process as a random
  effect. Each round's level is removed from every process's round medians by a two-way
  median polish (rounds × processes of both sides, Tukey 1977: a burst that hits one visit
  moves one cell, not the fit), which leaves each process one level. The speedup is the ratio
  of the sides' mean process levels; its interval and p-value come from Student's t over the
  processes (the two-stage estimate of a mixed model with a random process effect): over the
  per-process differences when both sides ran in the same worker processes (a block,
  rnnexp.run.blocks: what a process does to both cancels), else Welch's over each side's
  process levels. With one process on a side the spread between processes is unknown: the
  verdict is "cannot tell" unless that spread is known from elsewhere — the configuration's
  drift between its runs on this machine (rnnexp.run.drift), which holds it and more.
- Runs measured **at different times** (two sweeps, or two jobs that were not interleaved)
  compare **run against run**: each run's level is the geometric mean of its process
  medians, uncertain by its processes' spread (s²/k) and by the configuration's drift between
  runs on this machine (rnnexp.run.drift, d²). Without a known drift the level of a run is not
  known to better than the drift nobody measured: "cannot tell".

Either way the levels a comparison stands on are kept with it (`baseline_ms`,
`candidate_ms`): the speedup is their ratio, so a table that shows them agrees with itself.

Holm's step-down corrects for the number of cells judged at once (scipy has no Holm and
statsmodels would be a heavy dependency for it; median polish is in neither). A cell is:
- real (faster/slower): significant after correction, its interval excludes 1, and at least
  `min_effect` large;
- "~" (the same): not real, and its interval lies within ±`equivalence` — any difference is
  smaller than that;
- "cannot tell": not real, and the interval is wider than that: this comparison cannot
  resolve a difference of that size here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as sps

from rnnexp.results.stats import drift_degrees_of_freedom

ALPHA = 0.05  # family-wise error rate over all cells compared at once
CONFIDENCE = 0.95
MIN_EFFECT = 0.03  # differences below 3% are not reported as speedups or slowdowns
MIN_ROUNDS = 3  # paired rounds needed before the interleaved comparison says anything
SAME, UNDECIDED = "~", "?"
PAIRED, RUNS = "paired by round", "run against run"
COUNTS = "instruction counts"
# The relative tolerance of an instruction count (bench.metric=instructions): counts of one
# configuration's processes repeat within it here (docs/benchmarks.md#instruction-counts:
# 0–0.46% between processes, a cheap iteration moving most), so a larger change is the
# code's, not noise's.
COUNT_TOLERANCE = 0.005


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
    # The levels compared (ms): speedup = baseline_ms ÷ candidate_ms, always.
    baseline_ms: float = math.nan
    candidate_ms: float = math.nan
    processes: tuple[int, int] = (0, 0)  # the baseline's and the candidate's
    shared: bool = False  # both measured in the same worker processes, paired by process
    # What the levels are: "ms", or "instructions" (baseline_ms / candidate_ms then hold
    # instructions per iteration).
    unit: str = "ms"
    # For counts, what the time measured beside them says (`calibrate`).
    note: str = ""

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
    def processes_text(self) -> str:
        """How many processes each side had: "3/3", "3/3 shared" (the same workers)."""
        return f"{self.processes[0]}/{self.processes[1]}" + (" shared" if self.shared else "")

    @property
    def verdict(self) -> str:
        if self.real:
            return "faster" if self.speedup > 1 else "slower"
        return SAME if self.same else UNDECIDED

    def cell(self) -> str:
        """The table cell: a real speedup with its interval, "~", or "cannot tell ±X%";
        "(instr)" after a cell judged on instruction counts."""
        if self.unit == "instructions":
            text = f"{self.speedup:.3f}×" if self.real else SAME
            return f"{text} (instr)"
        if self.real:
            return f"{self.speedup:.2f}× ({self.low:.2f}–{self.high:.2f})"
        if self.same:
            return SAME
        if math.isfinite(self.half_width):
            return f"cannot tell ±{100 * self.half_width:.0f}%"
        return "cannot tell"


def _nothing(speedup: float, method: str, why: str, **sides) -> Difference:
    return Difference(speedup=speedup, low=math.nan, high=math.nan, p=1.0, method=method,
                      why_not=why, **sides)


def cannot_tell(d: Difference, why: str) -> Difference:
    """The same levels, nothing said of their difference (e.g. a run timed on a busy
    machine)."""
    return dataclasses.replace(d, low=math.nan, high=math.nan, p=1.0, why_not=why)


def log_matrix(rounds: Sequence[Sequence[Optional[float]]], width: int) -> np.ndarray:
    """`[process][round]` log medians, NaN where missing, padded to `width` rounds."""
    out = np.full((len(rounds), width), np.nan)
    for p, row in enumerate(rounds):
        for r, v in enumerate(row[:width]):
            if v is not None and v > 0:
                out[p, r] = math.log(v)
    return out


def median_polish(table: np.ndarray, sweeps: int = 10
                  ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Tukey's median polish of a two-way table (NaN: missing): (overall, row effects,
    column effects, residuals) with table = overall + row + column + residual, fitted by
    medians."""
    resid = table.copy()
    rows, cols = np.zeros(table.shape[0]), np.zeros(table.shape[1])
    overall = 0.0
    with np.errstate(all="ignore"):
        for _ in range(sweeps):
            r = np.nan_to_num(np.nanmedian(resid, axis=1))
            resid -= r[:, None]
            rows += r
            shift = float(np.median(cols))
            cols -= shift
            overall += shift
            c = np.nan_to_num(np.nanmedian(resid, axis=0))
            resid -= c[None, :]
            cols += c
            shift = float(np.median(rows))
            rows -= shift
            overall += shift
            if not (np.any(np.abs(r) > 1e-12) or np.any(np.abs(c) > 1e-12)):
                break
    return overall, rows, cols, resid


@dataclass
class Side:
    """One side of a paired comparison: its round medians `[process][round]`
    (PhaseStats.rounds_ms), the worker process each process was (Interleaving.workers; a
    number both sides have is one process), and the spread between its processes where it
    is known from elsewhere (σ of the log level, from `spread_runs` runs)."""

    rounds_ms: Sequence[Sequence[Optional[float]]]
    workers: Sequence[int] = ()
    spread: Optional[float] = None
    spread_runs: int = 0


def _side(rounds: Side | Sequence[Sequence[Optional[float]]]) -> Side:
    return rounds if isinstance(rounds, Side) else Side(rounds)


def shared(base: Side, cand: Side) -> bool:
    """Both sides measured in the same worker processes (a block, rnnexp.run.blocks)."""
    return len(base.workers) == len(base.rounds_ms) == len(cand.rounds_ms) \
        and sorted(base.workers) == sorted(cand.workers)


def process_levels(a: np.ndarray, b: np.ndarray, same: list[tuple[int, int]]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each process's log level on each side, with the rounds' levels removed by median
    polish, and the residuals. In processes both sides share (`same`: pairs of rows), a
    process's visits of one round are back to back: each process is polished on its own,
    its round by round level removed. Otherwise the rounds' common level is removed across
    every process of both sides."""
    if same:
        fits = [median_polish(np.stack([a[i], b[j]], axis=1)) for i, j in same]
        la = np.array([o + c[0] for o, _, c, _ in fits])
        lb = np.array([o + c[1] for o, _, c, _ in fits])
        return la, lb, np.concatenate([f[3].ravel() for f in fits])
    overall, _, levels, resid = median_polish(np.concatenate([a, b]).T)
    return overall + levels[:a.shape[0]], overall + levels[a.shape[0]:], resid.ravel()


def paired(baseline: Side | Sequence[Sequence[Optional[float]]],
           candidate: Side | Sequence[Sequence[Optional[float]]]) -> Difference:
    """Two configurations of one interleaved window: paired by round (and by process where
    they shared their processes), the process as the replicate (see the module's
    docstring)."""
    base, cand = _side(baseline), _side(candidate)
    width = max([len(r) for r in (*base.rounds_ms, *cand.rounds_ms)] or [0])
    a, b = log_matrix(base.rounds_ms, width), log_matrix(cand.rounds_ms, width)
    both = ~np.all(np.isnan(a), axis=0) & ~np.all(np.isnan(b), axis=0)
    a, b = a[:, both], b[:, both]
    rounds, ka, kb = int(both.sum()), a.shape[0], b.shape[0]
    if rounds == 0:
        return _nothing(math.nan, PAIRED, "no round measured both")
    together = shared(base, cand)
    same = list(zip(np.argsort(base.workers), np.argsort(cand.workers), strict=True)) \
        if together else []
    la, lb, resid = process_levels(a, b, same)
    estimate = float(la.mean() - lb.mean())
    sides = dict(baseline_ms=math.exp(la.mean()), candidate_ms=math.exp(lb.mean()),
                 processes=(ka, kb), shared=together)
    if rounds < MIN_ROUNDS:
        return _nothing(math.exp(estimate), PAIRED, f"{rounds} paired rounds", **sides)
    if together and ka >= 2:  # the same processes: their differences are the replicates
        var, df = float(np.var(la - lb, ddof=1)) / ka, ka - 1
    elif ka >= 2 and kb >= 2:  # processes of their own: Welch over the process levels
        va, vb = float(np.var(la, ddof=1)) / ka, float(np.var(lb, ddof=1)) / kb
        var = va + vb
        df = var ** 2 / (va ** 2 / (ka - 1) + vb ** 2 / (kb - 1)) if var > 0 else 0.0
    elif base.spread is not None and cand.spread is not None \
            and min(base.spread_runs, cand.spread_runs) >= 2:
        # A process's level is only known as well as the spread between processes known
        # from elsewhere (the drift between runs holds it), plus its own rounds' noise.
        known = base.spread ** 2 / ka + cand.spread ** 2 / kb
        noise = _within(resid, rounds)
        var = known + noise
        df = drift_df(base.spread_runs, cand.spread_runs)
    else:
        return _nothing(math.exp(estimate), PAIRED,
                        "one process a side and no spread between processes known "
                        "(bench.processes ≥ 2, or a drift history)", **sides)
    return _t_difference(estimate, var, df, PAIRED, **sides)


def _within(resid: np.ndarray, rounds: int) -> float:
    """The variance of the difference of two process levels from their own rounds' noise:
    twice that of a median of `rounds` residuals (π/2 · σ²/R, σ from their median absolute
    deviation)."""
    resid = resid[np.isfinite(resid)]
    if resid.size == 0:
        return 0.0
    sigma = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    return 2 * math.pi / 2 * sigma ** 2 / max(1, rounds)


def _t_difference(estimate: float, var: float, df: float, method: str, **sides) -> Difference:
    """A log difference with its variance and degrees of freedom: its t interval and p."""
    speedup = math.exp(estimate)
    if not var > 0 or not df > 0:
        return _nothing(speedup, method, "no spread between processes", **sides)
    se = math.sqrt(var)
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, df)) * se
    p = float(2 * sps.t.sf(abs(estimate) / se, df))
    return Difference(speedup=speedup, low=math.exp(estimate - half),
                      high=math.exp(estimate + half), p=p, method=method, **sides)


@dataclass
class Level:
    """One run's level in a phase, as its result records it."""

    process_medians_ms: Sequence[float]  # one per process (one value for one process)
    drift: Optional[float] = None  # σ of the configuration's log medians between runs
    drift_runs: int = 0  # earlier runs that drift comes from

    @property
    def log_center(self) -> float:
        return float(np.mean(np.log(self.process_medians_ms)))

    def processes_part(self) -> list[tuple[float, float]]:
        """(variance of the log level from its processes' spread, its degrees of freedom),
        if it has more than one process."""
        k = len(self.process_medians_ms)
        if k < 2:
            return []
        return [(float(np.var(np.log(self.process_medians_ms), ddof=1)) / k, k - 1)]

    def shared_parts(self) -> list[tuple[float, float]]:
        """(variance, degrees of freedom) of what is known from elsewhere, an estimate the
        other side's level usually shares: the drift between runs. Only for a level whose
        drift is known (between_runs says "cannot tell" before asking otherwise)."""
        assert self.drift is not None, "a level with no drift shares no estimate"
        return [(self.drift ** 2, drift_degrees_of_freedom(self.drift_runs))]


def drift_df(*runs: int) -> float:
    """Degrees of freedom of the drift in a comparison whose sides' drifts come from these
    many runs. The two sides' drifts are usually one estimate (the same configuration's
    history, or the machine's pooled one): counted as independent, their degrees of freedom
    would add up and claim twice what one history knows. So the fewer of them."""
    return drift_degrees_of_freedom(min(runs))


def between_runs(baseline: Level, candidate: Level) -> Difference:
    """Two runs measured at different times, at the run level: their log levels' difference
    against the spread between processes and the drift between runs (Welch–Satterthwaite
    degrees of freedom)."""
    estimate = baseline.log_center - candidate.log_center
    sides = dict(baseline_ms=math.exp(baseline.log_center),
                 candidate_ms=math.exp(candidate.log_center),
                 processes=(len(baseline.process_medians_ms),
                            len(candidate.process_medians_ms)))
    for side, level in (("baseline", baseline), ("candidate", candidate)):
        if level.drift is None or level.drift_runs < 2:
            return _nothing(math.exp(estimate), RUNS,
                            f"no drift history for the {side}'s configuration here (5 runs "
                            "give one), so the level of a run is not known", **sides)
    parts = [*baseline.processes_part(), *candidate.processes_part()]
    for (vb, db), (vc, dc) in zip(baseline.shared_parts(), candidate.shared_parts(),
                                  strict=True):
        parts.append((vb + vc, min(db, dc)))  # one estimate both sides share: counted once
    var = sum(v for v, _ in parts)
    df = var ** 2 / sum(v ** 2 / d for v, d in parts if d > 0) if var > 0 else 0.0
    return _t_difference(estimate, var, df, RUNS, **sides)


def _relative_range(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / float(np.median(values)) if len(values) > 1 else 0.0


def counts(baseline: Sequence[float], candidate: Sequence[float],
           tolerance: float = COUNT_TOLERANCE) -> Difference:
    """Two configurations' instruction counts per iteration (each process's median). A count
    is not a draw from noise to be tested: its interval is the count's tolerance — the
    measured floor, or the range each side's processes span, whichever is wider — around
    the ratio of the medians, and the difference is real when that interval excludes 1."""
    b, c = float(np.median(baseline)), float(np.median(candidate))
    tol = max(tolerance, _relative_range(baseline), _relative_range(candidate))
    speedup = b / c
    low, high = speedup / (1 + tol), speedup * (1 + tol)
    real = not low <= 1 <= high
    return Difference(speedup=speedup, low=low, high=high, p=0.0 if real else 1.0,
                      method=COUNTS, p_holm=0.0 if real else 1.0, real=real, same=not real,
                      baseline_ms=b, candidate_ms=c,
                      processes=(len(baseline), len(candidate)), unit="instructions")


def calibrate(count: Difference, time: Optional[Difference]) -> Difference:
    """A count's cell against the time measured beside it (both decided): where the time
    moved for certain and its interval excludes the count's ratio, the count is no proxy for
    this cell (memory-bound code, a cache or frequency effect) and the time's verdict
    stands, saying so; otherwise the count's, saying what the time said."""
    if time is None:
        return dataclasses.replace(count, note="no time to calibrate against")
    moved = f"time {time.speedup:.3f}× ({time.low:.3f}–{time.high:.3f})" \
        if math.isfinite(time.low) else "time cannot tell"
    if time.real and not time.low <= count.speedup <= time.high:
        return dataclasses.replace(time, note=f"counts disagree: instructions "
                                   f"{count.speedup:.3f}×, {moved}; judged by time")
    agrees = "time agrees" if math.isfinite(time.low) and \
        time.low <= count.speedup <= time.high else moved
    return dataclasses.replace(count, note=agrees)


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
