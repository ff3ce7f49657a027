"""The between-process interval: what it promises (a new run's median falls inside ~95% of
the time), and the stopping rules built on it."""

import numpy as np
import pytest

from rnnexp.config.schema import BenchConfig
from rnnexp.measure.records import Samples
from rnnexp.results import stats
from rnnexp.run import schedule


def simulated_medians(rng, k, between=0.10, within=0.01, center=10.0):
    """Medians of k processes: each process has its own level (log-normal, `between`
    relative spread) plus a little within-process noise on its median."""
    level = center * np.exp(rng.normal(0.0, between, k))
    return level * np.exp(rng.normal(0.0, within, k))


@pytest.mark.parametrize("k", [3, 5, 10])
def test_a_new_process_lands_inside_about_95_percent_of_the_time(k):
    rng = np.random.default_rng(k)
    trials, inside, inside_ci = 4000, 0, 0
    for _ in range(trials):
        first = simulated_medians(rng, k)
        interval = stats.between_processes(first)
        rerun = simulated_medians(rng, 1)[0]
        inside += interval["low_ms"] <= rerun <= interval["high_ms"]
        # A confidence interval of the center (t·s/√k) is what a rerun must NOT be judged by.
        half = (np.log(interval["high_ms"]) - np.log(interval["center_ms"])) / np.sqrt(1 + k)
        inside_ci += abs(np.log(rerun / interval["center_ms"])) <= half
    assert 0.93 <= inside / trials <= 0.97
    assert inside_ci / trials < 0.85


def test_interval_is_positive_scale_and_undefined_below_three_processes():
    wide = stats.between_processes([1.0, 10.0, 100.0])
    assert 0 < wide["low_ms"] < 1.0 and wide["high_ms"] > 100.0
    two = stats.between_processes([1.0, 1.1])
    assert np.isnan(two["low_ms"]) and stats.relative_half_width(two) == float("inf")
    same = stats.between_processes([2.0, 2.0, 2.0])
    assert same["low_ms"] == pytest.approx(2.0) and stats.relative_half_width(same) == 0.0
    with pytest.raises(ValueError):
        stats.between_processes([])


def samples_at(*levels, n=20, jitter=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return [Samples(forward_ms=list(level * (1 + jitter * rng.standard_normal(n))))
            for level in levels]


def adaptive(**kw):
    base = dict(warmup=0, iters=1000, min_iters=10, precision=0.02, processes=3,
                max_processes=10)
    return BenchConfig(**{**base, **kw})


def test_stops_when_the_interval_meets_the_target():
    assert schedule.stop_reason(adaptive(), samples_at(10.0, 10.01, 9.99), 0.1) == "precision"


def test_stops_when_the_spread_between_processes_rules_the_target_out():
    # 10% between processes: ±1.96·10% can never be ±2%, however many processes.
    assert schedule.stop_reason(adaptive(), samples_at(9.0, 10.0, 11.0), 0.1) == "spread"


def test_goes_on_until_every_process_has_its_minimum_or_the_budget_ends():
    few = [Samples(forward_ms=[10.0] * 3)] * 3
    assert schedule.stop_reason(adaptive(), few, 0.1) is None
    assert schedule.stop_reason(adaptive(budget_s=1.0), few, 2.0) == "budget"
    # Not before the first `processes` have started.
    assert schedule.stop_reason(adaptive(budget_s=1.0), few[:2], 2.0) is None


def test_fixed_counts_stop_on_iters_only():
    # bench.iters is the configuration's count, shared between its processes: 7 + 7 + 6.
    fixed = BenchConfig(warmup=0, iters=20, processes=3)
    assert [schedule.quota(fixed, i) for i in range(3)] == [7, 7, 6]
    full = samples_at(10.0, 10.0, 10.0, n=7)
    assert schedule.stop_reason(fixed, full, 99.0) == "iters"
    short = full[:2] + samples_at(10.0, n=5)
    assert schedule.stop_reason(fixed, short, 99.0) is None
    assert schedule.stop_reason(fixed, full[:2], 99.0) is None  # a process short


def test_one_process_falls_back_to_its_own_median_interval():
    one = adaptive(processes=1, max_processes=1)
    assert schedule.stop_reason(one, [Samples(forward_ms=[5.0] * 20)], 0.1) == "precision"
    assert schedule.stop_reason(one, samples_at(5.0, jitter=0.5), 0.1) is None


def test_between_process_fields_reach_the_result_and_old_results_still_load():
    from rnnexp.models.work import Work
    from rnnexp.results.result import PhaseStats, Result, phase_stats

    per = samples_at(9.0, 10.0, 11.0, n=10)
    pooled = Samples()
    for s in per:
        pooled.extend(s)
    work = Work(1.0, 1.0, 1.0, 1.0, 1)
    fwd = phase_stats(pooled, work, per_process=per)["forward"]
    assert fwd.processes == 3 and fwd.process_medians_ms == pytest.approx([9.0, 10.0, 11.0])
    assert fwd.between_low_ms < 9.0 and fwd.between_high_ms > 11.0
    assert fwd.between_spread == pytest.approx(np.std(np.log([9, 10, 11]), ddof=1))
    assert "between_low_ms" in fwd.metrics() and "process_medians_ms" not in fwd.metrics()
    old = PhaseStats(**{"median_ms": 1.0, "n": 3})  # a results.json without these fields
    assert old.processes == 1 and old.between_low_ms is None
    r = Result.from_json({"choices": {}, "overrides": [], "config": {}, "status": "ok",
                          "phases": {"forward": {"median_ms": 1.0, "n": 1}},
                          "timing": {"clock": "perf_counter", "warmup": 1, "iters": 3}})
    assert r.phases["forward"].processes == 1 and r.timing.block == 1


def test_bench_options_are_checked():
    from rnnexp.errors import ConfigError

    with pytest.raises(ConfigError, match="max_processes"):
        BenchConfig(processes=3, max_processes=2)
    with pytest.raises(ConfigError, match="processes"):
        BenchConfig(processes=0)
    with pytest.raises(ConfigError, match="budget_s"):
        BenchConfig(budget_s=-1.0)


def test_stops_on_spread_when_even_the_most_processes_allowed_could_not_meet_the_target():
    # s ≈ 1.5%: ±1.96·s (2.9%) would already rule ±2% out; at 10 processes t(9)·s·√1.1 is
    # 3.6%. At s ≈ 0.6%, 10 processes could reach ±2% (1.4%) but 4 could not (2.3%).
    assert schedule.stop_reason(adaptive(), samples_at(9.85, 10.0, 10.15), 0.1) == "spread"
    near = samples_at(9.94, 10.0, 10.06)
    assert schedule.stop_reason(adaptive(), near, 0.1) is None
    assert schedule.stop_reason(adaptive(max_processes=4), near, 0.1) == "spread"
