"""Runs compared apart stand on a drift estimated from a few earlier runs by their median
absolute deviation (rnnexp.run.drift.robust_spread): identical work must still be called
different in about α of the pairs, however young the history — simulated end to end, the
history's estimate included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnexp.analysis import significance
from rnnexp.analysis.significance import Level
from rnnexp.results import stats
from rnnexp.run import drift

LEVEL_DRIFT, PROCESS_SPREAD, PROCESSES = 0.05, 0.01, 5


def run(rng: np.random.Generator) -> np.ndarray:
    """One run's process medians: the run's level drawn from the drift, each process its
    own offset around it."""
    return 10.0 * np.exp(rng.normal(0, LEVEL_DRIFT) + rng.normal(0, PROCESS_SPREAD, PROCESSES))


@pytest.mark.parametrize("runs", [5, 12])
def test_a_a_pairs_apart_are_called_different_in_about_alpha_with_a_young_history(runs):
    rng = np.random.default_rng(runs)
    trials, flagged = 800, 0
    for _ in range(trials):
        history = [math.exp(float(np.log(run(rng)).mean())) for _ in range(runs)]
        sigma = drift.robust_spread(np.log(history))
        a, b = (Level(process_medians_ms=run(rng).tolist(), drift=sigma, drift_runs=runs)
                for _ in range(2))
        (d,) = significance.decide([significance.between_runs(a, b)], min_effect=0.0)
        flagged += bool(d.real)
    # The standard deviation's n − 1 degrees of freedom for a MAD, and the sides' one
    # history counted twice, flagged 20% of these at 5 runs and 12% at 12.
    assert flagged <= trials * significance.ALPHA + 3 * math.sqrt(trials * 0.05 * 0.95)


def test_a_drift_from_few_runs_widens_the_interval_more_than_one_from_many():
    few, many = (stats.drift_half_width(0.05, n) for n in (5, 200))
    assert few > 2 * many  # a MAD of 5 runs says little: ~1.5 degrees of freedom
    assert many == pytest.approx(stats.t_quantile(0.975, 0.37 * 199) * math.sqrt(2) * 0.05)


def test_the_sides_share_one_drift_estimate_so_its_degrees_of_freedom_count_once():
    a = Level(process_medians_ms=[10.0, 10.1, 9.9], drift=0.05, drift_runs=12)
    b = Level(process_medians_ms=[10.5, 10.6, 10.4], drift=0.05, drift_runs=12)
    d = significance.between_runs(a, b)
    parts = [*a.processes_part(), *b.processes_part(),
             (2 * 0.05 ** 2, stats.drift_degrees_of_freedom(12))]
    var = sum(v for v, _ in parts)
    df = var ** 2 / sum(v ** 2 / n for v, n in parts)
    half = float(np.log(d.high / d.low)) / 2
    assert half == pytest.approx(stats.t_quantile(0.975, df) * math.sqrt(var))
