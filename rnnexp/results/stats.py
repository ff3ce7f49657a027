"""Summary statistics and rates of per-iteration samples (numpy does the arithmetic).

Distribution quantiles come from scipy.special, not scipy.stats: every run summarises its
samples, and importing scipy.stats costs about 0.35 s of each run's start-up."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from scipy import special

CONFIDENCE = 0.95


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    """Median and spread of samples in milliseconds."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples to summarize")
    p10, p25, p50, p75, p90 = np.percentile(a, [10, 25, 50, 75, 90])
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {
        "median_ms": float(p50),
        "iqr_ms": float(p75 - p25),
        "mean_ms": mean,
        "std_ms": std,
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "p10_ms": float(p10),
        "p90_ms": float(p90),
        "cv": std / mean if mean else float("nan"),
        "n": int(a.size),
        **dict(zip(("median_ci_low_ms", "median_ci_high_ms"), median_ci(a), strict=True)),
    }


def quartiles(samples_ms: Sequence[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles, as `summarize` takes them for the IQR."""
    q1, q3 = np.percentile(np.asarray(samples_ms, dtype=np.float64), [25, 75])
    return float(q1), float(q3)


def median(samples_ms: Sequence[float]) -> float:
    return float(np.median(np.asarray(samples_ms, dtype=np.float64)))


def median_ci(samples_ms: Sequence[float], confidence: float = CONFIDENCE
              ) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from binomial order statistics
    (the interval of scipy.stats.quantile_test(p=0.5)); (nan, nan) when there are too few
    samples for one."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = int(x.size)
    if n == 0:
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2
    k = np.arange(n + 1)
    # Lowest order statistic: the binomial(n, ½) quantile at the tail, less one; highest: the
    # smallest k whose upper tail probability is at most the tail.
    low_index = int(np.searchsorted(special.bdtr(k, n, 0.5), tail, side="left")) - 1
    high_index = int(np.argmax(special.bdtrc(k, n, 0.5) <= tail))
    low = float(x[low_index]) if low_index >= 0 else float("nan")
    high = float(x[high_index]) if high_index < n else float("nan")
    return low, high


def round_medians(per_process: Sequence[Sequence[float]],
                  rounds: Sequence[Sequence[int]]) -> list[list[Optional[float]]]:
    """`[process][round]`: the median of each process's samples taken in each interleaved
    round (None where it took none), rounds 0 .. the last any process took a sample in."""
    last = max((max(r) for r in rounds if len(r)), default=-1)
    out: list[list[Optional[float]]] = []
    for values, tags in zip(per_process, rounds, strict=True):
        by_round: dict[int, list[float]] = {}
        for v, r in zip(values, tags, strict=True):
            by_round.setdefault(r, []).append(v)
        out.append([median(by_round[r]) if r in by_round else None for r in range(last + 1)])
    return out


def precise_enough(samples_ms: Sequence[float], relative: float) -> bool:
    """True once the median's confidence interval lies within ±relative of the median."""
    low, high = median_ci(samples_ms)
    median = float(np.median(samples_ms))
    if not (np.isfinite(low) and np.isfinite(high)) or median <= 0:
        return False
    return max(median - low, high - median) <= relative * median


def rates(median_ms: float, *, tokens: int, flops: float, nbytes: float) -> dict[str, float]:
    """Throughput at the median time: tokens/s, GFLOP/s, GB/s."""
    seconds = median_ms / 1e3
    if seconds <= 0:
        return {"tokens_per_s": float("nan"), "gflops": float("nan"), "gbps": float("nan")}
    return {
        "tokens_per_s": tokens / seconds,
        "gflops": flops / seconds / 1e9,
        "gbps": nbytes / seconds / 1e9,
    }


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (scipy.stats.t.ppf)."""
    return float(special.stdtrit(df, p))


# The median absolute deviation's Gaussian efficiency (Rousseeuw & Croux 1993): a σ from n
# values' MAD is about as uncertain as a standard deviation of 0.37 · (n − 1) degrees of
# freedom. The drift between runs is such a σ (rnnexp.run.drift.robust_spread).
MAD_EFFICIENCY = 0.37


def drift_degrees_of_freedom(runs: float) -> float:
    """Degrees of freedom of a drift estimated from `runs` earlier runs (for a pooled
    drift: its pooled degrees of freedom + 1). Taken as the standard deviation's n − 1, a
    drift from a young history made intervals too narrow: simulated A/A pairs of runs
    were called different 19–20% of the time at 5 runs, 9–12% at 12 (α = 5%); with these
    (and the sides' one drift counted once), 5.4% and 5.1%
    (tests/analysis/test_drift_calibration.py)."""
    return MAD_EFFICIENCY * (runs - 1)


def prediction_half_width(spread: float, processes: int,
                          confidence: float = CONFIDENCE) -> float:
    """t(k−1, (1+confidence)/2) · s · √(1 + 1/k): the half-width, in logs, of the interval
    for a new process's median from k processes whose log medians spread by s."""
    return t_quantile((1 + confidence) / 2, processes - 1) * spread \
        * float(np.sqrt(1 + 1 / processes))


def drift_half_width(drift: Optional[float], runs: int,
                     confidence: float = CONFIDENCE) -> float:
    """t(ν, (1+confidence)/2) · √2 · d: how far apart, in logs, the medians of two runs can
    be when a configuration's median moves between runs with relative spread d, estimated
    from n earlier runs (rnnexp.run.drift; ν = drift_degrees_of_freedom(n)). √2: this run
    and the rerun each drew a level. 0 when the drift is unknown."""
    if drift is None or not np.isfinite(drift) or runs < 2:
        return 0.0
    return t_quantile((1 + confidence) / 2, drift_degrees_of_freedom(runs)) \
        * float(np.sqrt(2)) * drift


def between_processes(process_medians_ms: Sequence[float], confidence: float = CONFIDENCE,
                      drift: Optional[float] = None, drift_runs: int = 0
                      ) -> dict[str, float]:
    """Where the median of a new run in a fresh process is expected to fall: a prediction
    interval from the medians m_1..m_k of k independent processes (each with its own
    warm-up), on the log scale because times are positive and their spread is relative:

        exp(mean(log m) ± t(k−1, (1+confidence)/2) · s · √(1 + 1/k)),  s = std(log m)

    Unlike a confidence interval of the median it does not shrink with more samples per
    process: the spread between processes (memory layout, thread placement, the host) is in
    it. With the drift between runs (`drift` from `drift_runs` earlier runs), its half-width
    (drift_half_width) is added in quadrature: the processes of one job share the machine's
    state of those seconds, a rerun minutes later may not. center_ms is the
    geometric mean of the medians; spread is s (≈ their relative spread); drift_half the
    drift's part. NaN bounds below 3 processes (two medians say little about a third)."""
    m = np.asarray(process_medians_ms, dtype=np.float64)
    k = int(m.size)
    if k == 0:
        raise ValueError("no process medians")
    logs = np.log(np.maximum(m, 1e-12))
    center = float(np.exp(logs.mean()))
    drift_half = drift_half_width(drift, drift_runs, confidence)
    if k < 3:
        return {"center_ms": center, "low_ms": float("nan"), "high_ms": float("nan"),
                "spread": float("nan"), "k": k, "drift_half": drift_half}
    s = float(logs.std(ddof=1))
    half = float(np.hypot(prediction_half_width(s, k, confidence), drift_half))
    return {"center_ms": center, "low_ms": center * float(np.exp(-half)),
            "high_ms": center * float(np.exp(half)), "spread": s, "k": k,
            "drift_half": drift_half}


def relative_half_width(interval: dict[str, float]) -> float:
    """Half the interval's width over its center (inf when undefined)."""
    low, high, center = interval["low_ms"], interval["high_ms"], interval["center_ms"]
    if not (np.isfinite(low) and np.isfinite(high)) or center <= 0:
        return float("inf")
    return (high - low) / 2 / center


def prediction_floor(interval: dict[str, float], processes: Optional[int] = None,
                     confidence: float = CONFIDENCE) -> float:
    """The relative half-width the between-process interval would have with `processes`
    processes at the spread measured so far, t(k−1) · s · √(1 + 1/k) — with no limit
    (None), z · s — and the drift between runs: no amount of measuring gets below it."""
    spread, drift_half = interval["spread"], interval.get("drift_half", 0.0)
    if not np.isfinite(spread):
        return drift_half
    if processes is None:
        within = float(special.ndtri((1 + confidence) / 2)) * spread
    else:
        within = prediction_half_width(spread, processes, confidence)
    return float(np.hypot(within, drift_half))
