"""The drift between runs: each valid run's medians go into the configuration's history, the
spread of its earlier runs is added to the between-process interval, so that a rerun minutes
later still lands inside it."""

import json

import numpy as np
import pytest
import torch

from rnnexp.config.schema import BenchConfig
from rnnexp.machine import environment
from rnnexp.measure.records import Samples
from rnnexp.results import cache, stats
from rnnexp.results.identity import MeasurementKey
from rnnexp.run import drift, schedule
from rnnexp.run.drift import Drift

CPU = torch.device("cpu")
KEY = drift.history_key(MeasurementKey.of_config(
    {"model": {"name": "x"}, "seed": 0, "sinks": ["json"],
     "bench": {"iters": 100, "backward": True}}, "2.x", "abc"), "test cpu", 1)


def test_a_history_is_one_measurement_on_one_machine():
    config = {"model": {"name": "x"}, "shape": {"hidden_size": 64}, "sinks": ["json"],
              "bench": {"iters": 100, "processes": 3, "backward": True}}
    key = MeasurementKey.of_config(config, "2.13", "abc")
    rerun = MeasurementKey.of_config({**config, "bench": {**config["bench"], "iters": 20}},
                                     "2.13", "abc")
    assert drift.history_key(rerun, "cpu", 2) == drift.history_key(key, "cpu", 2)
    for other in (drift.history_key(key, "gpu", 2), drift.history_key(key, "cpu", 1),
                  drift.history_key(key.without_versions(), "cpu", 2)):
        assert other != drift.history_key(key, "cpu", 2)


def histories(rng, levels: float, runs: int = 12, noise: float = 0.005) -> list[float]:
    """Medians of `runs` reruns: each at its own level (log-normal, σ `levels`), with a
    little noise of its own."""
    return list(10.0 * np.exp(rng.normal(0.0, levels, runs) + rng.normal(0.0, noise, runs)))


def test_planted_drift_between_runs_is_found_and_a_stable_series_reports_none(
        roofline_cache):
    rng = np.random.default_rng(1)
    t0 = 4_000_000.0
    stable, moving = (drift.history_key(MeasurementKey.of_config({"seed": s}, "2.x", "c"),
                                        "planted cpu", 1) for s in (1, 2))
    for key, levels in ((stable, 0.0), (moving, 0.15)):
        for i, ms in enumerate(histories(rng, levels)):
            drift.record(key, {"total": ms}, now=t0 + i)
    calm, drifting = (drift.earlier(k, now=t0 + 60) for k in (stable, moving))
    assert calm.source == drifting.source == "own" and calm.runs == drifting.runs == 12
    assert calm.spread < 0.02  # the noise alone: nothing between runs
    assert 0.07 < drifting.spread < 0.3  # the planted 15%, found
    for found, flagged in ((calm, False), (drifting, True)):
        env = environment.Environment(cores=2, torch_threads=1, drift=found.spread,
                                      drift_runs=found.runs)
        environment.assess(env, {}, CPU)
        assert (environment.DRIFTING in env.flags) == flagged


def test_estimate_needs_enough_recent_runs_and_is_a_robust_spread_of_their_logs():
    now = 1_000_000.0
    levels = [2.0, 2.2, 1.8, 2.1]
    runs = [{"at": now - 60 * i, "total": ms, "forward": ms / 2} for i, ms in enumerate(levels)]
    assert not drift.estimate(runs, now).known and drift.estimate(runs, now).runs == 4
    old = {"at": now - drift.WINDOW_S - 1, "total": 50.0}  # a day old: left out
    found = drift.estimate([old, *runs, {"at": now, "total": 1.9}], now)
    assert found.runs == 5 and found.hours == pytest.approx(3 / 60)
    assert 0.03 < found.spread < 0.15  # levels ±10% apart
    assert "forward" not in found.spreads  # only four runs had a forward median
    # One rerun hit by a burst moves the standard deviation, hardly the robust spread.
    burst = drift.estimate([*runs, {"at": now, "total": 1.9}, {"at": now, "total": 4.0}], now)
    assert burst.spread < 1.5 * found.spread
    assert np.log([*levels, 1.9, 4.0]).std(ddof=1) > 3 * found.spread
    assert not drift.estimate([], now).known


def test_runs_are_recorded_and_read_back_per_measurement(roofline_cache):
    t0 = 2_000_000.0
    assert drift.earlier(KEY, now=t0) == drift.UNKNOWN
    levels = [10.0, 11.0, 9.0, 10.5, 9.5]
    for i, ms in enumerate(levels):
        drift.record(KEY, {"forward": ms / 2, "total": ms, "backward": None}, now=t0 + i)
    found = drift.earlier(KEY, now=t0 + 10)
    assert found.runs == 5 and 0.03 < found.spread < 0.15  # levels ±10% apart
    assert found.source == "own" and set(found.spreads) == {"forward", "total"}
    other = {**KEY, "threads": 2}
    assert drift.earlier(other, now=t0 + 10).runs == 0
    history = json.loads(drift.history_path(KEY).read_text())
    assert [r["total"] for r in history["runs"]] == levels
    drift.history_path(KEY).write_text("{not json")  # a corrupt history starts again
    assert drift.earlier(KEY, now=t0 + 10).runs == 0
    drift.record(KEY, {"total": 10.0}, now=t0 + 20)
    assert drift.earlier(KEY, now=t0 + 30).runs == 1


def test_an_unwritable_cache_loses_only_the_record(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocked))  # a file where a folder goes
    drift.record(KEY, {"total": 1.0})
    assert drift.earlier(KEY) == drift.UNKNOWN


def simulated_run(rng, k, level_drift, between=0.02):
    """Medians of k processes of one run: the run's level (moving between runs by
    `level_drift`), each process its own spread around it."""
    level = 10.0 * np.exp(rng.normal(0.0, level_drift))
    return level * np.exp(rng.normal(0.0, between, k))


def test_with_the_drift_a_rerun_at_another_level_lands_inside_about_95_percent():
    rng = np.random.default_rng(0)
    level_drift, k, n = 0.08, 3, 20
    trials, inside, inside_without = 3000, 0, 0
    for _ in range(trials):
        earlier = [np.exp(np.log(simulated_run(rng, k, level_drift)).mean()) for _ in range(n)]
        spread = float(np.log(earlier).std(ddof=1))
        first = simulated_run(rng, k, level_drift)
        rerun = simulated_run(rng, 1, level_drift)[0]
        with_drift = stats.between_processes(first, drift=spread, drift_runs=n)
        without = stats.between_processes(first)
        inside += with_drift["low_ms"] <= rerun <= with_drift["high_ms"]
        inside_without += without["low_ms"] <= rerun <= without["high_ms"]
    assert 0.93 <= inside / trials <= 0.99
    assert inside_without / trials < 0.6  # what the A/A bench saw before drift was in


def test_drift_widens_the_interval_and_an_unknown_drift_leaves_it_alone():
    medians = [9.9, 10.0, 10.1]
    plain = stats.between_processes(medians)
    assert stats.between_processes(medians, drift=None, drift_runs=0) == plain
    wide = stats.between_processes(medians, drift=0.05, drift_runs=20)
    assert wide["drift_half"] == pytest.approx(
        stats.t_quantile(0.975, stats.drift_degrees_of_freedom(20)) * np.sqrt(2) * 0.05)
    half = np.log(wide["high_ms"] / wide["center_ms"])
    assert half == pytest.approx(np.hypot(np.log(plain["high_ms"] / plain["center_ms"]),
                                          wide["drift_half"]))
    assert stats.prediction_floor(wide, 10) > wide["drift_half"]


def adaptive(**kw):
    return BenchConfig(**{**dict(warmup=0, iters=1000, min_iters=10, precision=0.02,
                                 processes=3, max_processes=10), **kw})


def test_adaptive_stops_on_drift_when_the_reruns_alone_rule_the_target_out():
    close = [Samples(forward_ms=[level] * 20) for level in (9.99, 10.0, 10.01)]
    assert schedule.stop_reason(adaptive(), close, 0.1) == "precision"
    calm, moving = Drift({"total": 0.001}, 30, 2.0), Drift({"total": 0.05}, 30, 2.0)
    assert schedule.stop_reason(adaptive(), close, 0.1, calm) == "precision"
    assert schedule.stop_reason(adaptive(), close, 0.1, moving) == "drift"
    assert schedule.stop_reason(adaptive(), close, 0.1, Drift({}, 2, 0.1)) == "precision"


def test_the_result_records_the_drift_its_interval_includes_and_a_drift_is_flagged():
    from rnnexp.models.work import Work
    from rnnexp.results.result import phase_stats

    per = [Samples(forward_ms=[level] * 10) for level in (9.9, 10.0, 10.1)]
    pooled = Samples()
    for s in per:
        pooled.extend(s)
    work = Work(1.0, 1.0, 1.0, 1.0, 1)
    plain = phase_stats(pooled, work, per_process=per)["forward"]
    drifting = phase_stats(pooled, work, per_process=per, drift={"forward": 0.06},
                           drift_runs=12)["forward"]
    assert plain.between_drift is None and drifting.between_drift == 0.06
    assert drifting.between_high_ms > plain.between_high_ms
    assert "between_drift" in drifting.metrics()
    env = environment.Environment(cores=2, torch_threads=1, drift=0.06, drift_runs=12,
                                  drift_hours=3.0, drift_from="own")
    environment.assess(env, {}, CPU)
    assert env.flags == [environment.DRIFTING] and "±6%" in env.warning_line()
    calm = environment.Environment(cores=2, torch_threads=1, drift=0.01, drift_runs=12)
    environment.assess(calm, {}, CPU)
    assert calm.flags == []
    # Older results.json files (no drift fields) still load.
    assert environment.Environment.from_json({"cores": 2}).drift is None


def test_jobs_join_their_history_and_a_later_run_includes_its_drift(roofline_cache):
    from rnnexp.app.config_check import check
    from rnnexp.config import schema
    from rnnexp.measure import job
    from rnnexp.run import execution

    schema.register()
    base = ["model=lstm", "backend=aten", "device=cpu", "shape=small", "bench=quick",
            "bench.num_threads=1"]

    def run(*overrides):
        seed = [] if any(o.startswith("seed=") for o in overrides) else ["seed=7"]
        (cfg,) = check([*base, *seed, *overrides], multirun=False)
        return execution.execute(job.plan(cfg, {"model": "lstm", "backend": "aten"},
                                    list(overrides)))

    off = run("bench.drift=false").environment
    assert off.drift is None and off.drift_runs == 0 and off.drift_from == ""
    first = run()
    assert first.environment.drift_from != "own"  # bench.drift=false left no record
    earlier = [first, *(run("bench.iters=5") for _ in range(5))]  # reruns: measured longer
    # Runs on a machine flagged busy stay out of the history.
    kept = sum(environment.BUSY not in r.environment.flags for r in earlier)
    later = run("bench.processes=3")
    if kept >= drift.MIN_RUNS:
        assert later.environment.drift_runs == kept and later.environment.drift is not None
        assert later.phases["total"].between_drift == pytest.approx(later.environment.drift)
    # What is measured differs: another history, which borrows from the others here.
    drift.POOLED.clear()
    other = run("seed=8").environment
    assert other.drift_from.startswith("pooled" if kept >= drift.MIN_RUNS else "")
    if kept >= drift.MIN_RUNS:
        assert later.environment.drift_from == "own" and other.drift_runs >= kept


def test_a_configuration_without_runs_borrows_the_pooled_drift_of_the_others_here(
        roofline_cache):
    now = 3_000_000.0
    drift.POOLED.clear()
    machine = {"device_name": "pool cpu", "threads": 3, "torch_version": "2.x"}
    keys = [{**machine, "config": {"seed": i}, "commit": "c"} for i in range(3)]
    first, second = [10.0, 11.0, 9.0, 10.5, 9.5], [5.0, 5.1, 4.9, 5.0, 5.2, 4.8]
    for key, levels in zip(keys, (first, second, [7.0, 7.0]), strict=True):
        for i, ms in enumerate(levels):
            drift.record(key, {"total": ms}, now=now + i)
    elsewhere = {**keys[0], "threads": 4}  # another thread count: not pooled
    for i, ms in enumerate([1.0, 2.0, 4.0, 8.0, 16.0]):
        drift.record(elsewhere, {"total": ms}, now=now + i)
    own = drift.earlier(keys[0], now=now + 10)
    assert own.source == "own" and own.runs == 5
    new = {**machine, "config": {"seed": 99}, "commit": "c"}
    borrowed = drift.earlier(new, now=now + 10)
    # Between the two configurations' own drifts; the other thread count's (levels that
    # double) left out.
    s1, s2 = (drift.earlier(k, now=now + 10).spread for k in keys[:2])
    assert min(s1, s2) < borrowed.spread < max(s1, s2)
    assert borrowed.spread < drift.earlier(elsewhere, now=now + 10).spread / 2
    assert borrowed.runs == 10 and borrowed.source == "pooled from 2 configurations"
    assert set(borrowed.spreads) == set(drift.PHASES)
    drift.POOLED.clear()
    lonely = {"device_name": "other cpu", "threads": 3, "torch_version": "2.x", "config": {},
              "commit": "c"}
    assert drift.earlier(lonely, now=now + 10) == drift.UNKNOWN
