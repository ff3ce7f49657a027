"""The machine's drift between runs: probed into a history, estimated from it, and added to
the between-process interval so that a rerun minutes later still lands inside it."""

import json

import numpy as np
import pytest
import torch

from rnnexp import drift, environment, schedule, stats
from rnnexp.drift import Drift
from rnnexp.schema import BenchConfig
from rnnexp.timing import Samples

CPU = torch.device("cpu")


def test_estimate_needs_enough_recent_probes_and_is_the_spread_of_their_logs():
    now = 1_000_000.0
    probes = [{"at": now - 60 * i, "ms": ms} for i, ms in enumerate([2.0, 2.2, 1.8, 2.1])]
    few = drift.estimate(probes, now)
    assert not few.known and few.probes == 4
    old = {"at": now - drift.WINDOW_S - 1, "ms": 50.0}  # a day old: left out
    busy = {"at": now - 1, "ms": 56.0, "busy": "machine busy: ..."}  # measured the others
    enough = drift.estimate([old, *probes, busy, {"at": now, "ms": 2.4}], now)
    assert enough.probes == 5 and enough.hours == pytest.approx(3 / 60)
    assert enough.spread == pytest.approx(np.std(np.log([2.0, 2.2, 1.8, 2.1, 2.4]), ddof=1))
    assert not drift.estimate([], now).known


def test_observe_probes_at_most_once_a_minute_into_a_history_per_device(roofline_cache):
    t0 = 2_000_000.0
    first = drift.observe(CPU, "test cpu", 1, now=t0)
    assert first.probes == 1 and not first.known
    assert drift.observe(CPU, "test cpu", 1, now=t0 + 30).probes == 1  # not due yet
    assert drift.observe(CPU, "test cpu", 1, probe=False, now=t0 + 90).probes == 1
    assert drift.observe(CPU, "test cpu", 1, now=t0 + 90).probes == 2
    key = drift.roofline.Key.of(CPU, "test cpu", "float32", 1)
    history = json.loads(drift.history_path(key).read_text())
    assert [p["at"] for p in history["probes"]] == [t0, t0 + 90]
    assert all(p["ms"] > 0 for p in history["probes"])
    # Another thread count is another history; a corrupt file starts a new one.
    assert drift.observe(CPU, "test cpu", 2, probe=False, now=t0).probes == 0
    drift.history_path(key).write_text("{not json")
    assert drift.observe(CPU, "test cpu", 1, now=t0 + 200).probes == 1


def test_an_unwritable_cache_leaves_the_drift_unknown(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(drift.roofline.CACHE_ENV, str(blocked))  # a file where a folder goes
    assert drift.observe(CPU, "test cpu", 1) == Drift(None, 0, 0.0)


def simulated_run(rng, k, level_drift, between=0.02):
    """Medians of k processes of one run: the machine's level of that run (moving between
    runs by `level_drift`), each process its own spread around it."""
    level = 10.0 * np.exp(rng.normal(0.0, level_drift))
    return level * np.exp(rng.normal(0.0, between, k))


def test_with_the_drift_a_rerun_at_another_machine_level_lands_inside_about_95_percent():
    rng = np.random.default_rng(0)
    level_drift, k, n = 0.08, 3, 30
    trials, inside, inside_without = 3000, 0, 0
    for _ in range(trials):
        # The probes see the machine's level at n other times (with a little noise of their own).
        probes = 2.0 * np.exp(rng.normal(0.0, level_drift, n) + rng.normal(0.0, 0.01, n))
        spread = float(np.log(probes).std(ddof=1))
        first = simulated_run(rng, k, level_drift)
        rerun = simulated_run(rng, 1, level_drift)[0]
        with_drift = stats.between_processes(first, drift=spread, drift_probes=n)
        without = stats.between_processes(first)
        inside += with_drift["low_ms"] <= rerun <= with_drift["high_ms"]
        inside_without += without["low_ms"] <= rerun <= without["high_ms"]
    assert 0.93 <= inside / trials <= 0.985
    assert inside_without / trials < 0.6  # what the A/A bench saw before drift was in


def test_drift_widens_the_interval_and_an_unknown_drift_leaves_it_alone():
    medians = [9.9, 10.0, 10.1]
    plain = stats.between_processes(medians)
    assert stats.between_processes(medians, drift=None, drift_probes=0) == plain
    wide = stats.between_processes(medians, drift=0.05, drift_probes=20)
    assert wide["drift_half"] == pytest.approx(stats.t_quantile(0.975, 19) * np.sqrt(2) * 0.05)
    half = np.log(wide["high_ms"] / wide["center_ms"])
    assert half == pytest.approx(np.hypot(np.log(plain["high_ms"] / plain["center_ms"]),
                                          wide["drift_half"]))
    assert stats.prediction_floor(wide, 10) > wide["drift_half"]


def adaptive(**kw):
    return BenchConfig(**{**dict(warmup=0, iters=1000, min_iters=10, precision=0.02,
                                 processes=3, max_processes=10), **kw})


def test_adaptive_stops_on_drift_when_the_machine_alone_rules_the_target_out():
    close = [Samples(forward_ms=[level] * 20) for level in (9.99, 10.0, 10.01)]
    assert schedule.stop_reason(adaptive(), close, 0.1) == "precision"
    assert schedule.stop_reason(adaptive(), close, 0.1, Drift(0.001, 30, 2.0)) == "precision"
    assert schedule.stop_reason(adaptive(), close, 0.1, Drift(0.05, 30, 2.0)) == "drift"
    assert schedule.stop_reason(adaptive(), close, 0.1, Drift(None, 3, 0.1)) == "precision"


def test_the_result_records_the_drift_its_interval_includes_and_a_drifting_machine_is_flagged():
    from rnnexp.results import phase_stats
    from rnnexp.workload import Work

    per = [Samples(forward_ms=[level] * 10) for level in (9.9, 10.0, 10.1)]
    pooled = Samples()
    for s in per:
        pooled.extend(s)
    work = Work(1.0, 1.0, 1.0, 1.0, 1)
    plain = phase_stats(pooled, work, per_process=per)["forward"]
    drifting = phase_stats(pooled, work, per_process=per, drift=0.06, drift_probes=12)["forward"]
    assert plain.between_drift is None and drifting.between_drift == 0.06
    assert drifting.between_high_ms > plain.between_high_ms
    assert "between_drift" in drifting.metrics()
    env = environment.Environment(cores=2, torch_threads=1, drift=0.06, drift_probes=12,
                                  drift_hours=3.0)
    environment.assess(env, {}, CPU)
    assert env.flags == [environment.DRIFTING] and "±6%" in env.warning_line()
    calm = environment.Environment(cores=2, torch_threads=1, drift=0.01, drift_probes=12)
    environment.assess(calm, {}, CPU)
    assert calm.flags == []
    # Older results.json files (no drift fields) still load.
    assert environment.Environment.from_json({"cores": 2}).drift is None


def test_a_job_probes_after_its_processes_and_records_the_drift_or_leaves_it_out(capsys):
    from rnnexp import job, schema
    from rnnexp.config_check import check

    schema.register()
    base = ["model=lstm", "backend=aten", "device=cpu", "shape=small", "bench=quick"]

    def run(*overrides):
        (cfg,) = check([*base, *overrides], multirun=False)
        return job.execute(job.plan(cfg, {"model": "lstm", "backend": "aten"},
                                    list(overrides)))

    key = drift.roofline.Key.of(CPU, run().device_name, "float32", 1)
    probed = run("bench.num_threads=1")
    assert probed.environment.drift_probes >= 1
    assert drift._load(drift.history_path(key), key)  # the probe went into the history
    off = run("bench.num_threads=1", "bench.drift=false")
    assert off.environment.drift is None and off.environment.drift_probes == 0


def test_the_command_prints_the_drift_and_refuses_bad_input_in_one_line(capsys):
    assert drift.main(["--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "drift " in out and "latest probe" in out and "history:" in out
    for bad, field in ((["--threads", "0"], "--threads"), (["--watch", "-1"], "--watch"),
                       (["--device", "tpu"], "--device")):
        with pytest.raises(SystemExit) as exit_info:
            drift.main(bad)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {field}")


def test_a_probe_beside_a_cpu_hog_is_kept_as_busy_and_left_out(tmp_path):
    import subprocess
    import sys

    from tests.test_environment import cpu_hogs

    env = {**__import__("os").environ, drift.roofline.CACHE_ENV: str(tmp_path)}
    with cpu_hogs():  # siblings of the probing process, not its children
        proc = subprocess.run([sys.executable, "-m", "rnnexp.drift", "--threads", "1"],
                              capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "left out: machine busy" in proc.stdout and "0 of 5 probes" in proc.stdout
    (path,) = (tmp_path / "drift").glob("*.json")
    (entry,) = json.loads(path.read_text())["probes"]
    assert entry["busy"].startswith("machine busy")
