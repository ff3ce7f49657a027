"""The noisy-machine guard, with real CPU hogs beside real runs: the busy machine is named in
one warning line and recorded (results.json, MLflow), `bench.quiet` waits or refuses.
Nothing here asserts a timing."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest
import torch
from mlflow.tracking import MlflowClient

from rnnexp.machine import environment
from rnnexp.machine.environment import BUSY, HIGH_SPREAD, OVERSUBSCRIBED, Environment, Look
from rnnexp.results.result import Result
from tests import fake_pynvml
from tests.conftest import TINY, load_results

RUN = [*TINY, "model=lstm", "backend=aten", "device=cpu"]


def hogs_for_busy() -> int:
    """The fewest spinning processes whose use exceeds the busy threshold here (one on a
    small machine): each more only burns the CPU the run beside it needs to start."""
    return int(environment.busy_cores(environment.usable_cores())) + 1


@contextmanager
def cpu_hogs(n: int | None = None):
    """n processes spinning on the CPU (default: enough to make this machine busy)."""
    n = hogs_for_busy() if n is None else n
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def warning_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("warning: timings may not")]


@pytest.mark.slow
def test_a_run_beside_a_cpu_hog_warns_in_one_line_and_records_why(run_cli, tmp_path):
    with cpu_hogs():
        proc = run_cli(*RUN)
    assert proc.returncode == 0, proc.stderr
    (line,) = warning_lines(proc.stderr)
    assert "machine busy: other processes used" in line
    env = load_results(tmp_path / "run")["environment"]
    assert BUSY in env["flags"] and env["quiet"] == "warn"
    assert env["before"]["other_cores"] >= environment.BUSY_CORES
    assert env["after"]["other_cores"] >= environment.BUSY_CORES
    assert env["cores"] >= 1 and env["torch_threads"] >= 1 and len(env["before"]["load_avg"]) == 3
    assert all(t.split("[")[0] and "%" in t for t in env["before"]["top"])
    # The MLflow run carries the flags and why, for filtering in the UI.
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rnnexp").experiment_id])
    assert BUSY in run.data.tags["env.flags"].split(",")
    assert run.data.tags["env.warning"] == line.removeprefix("warning: ")
    assert run.data.metrics["env/other_cores_before"] >= environment.BUSY_CORES
    assert run.data.params["env.cores"] == str(env["cores"])


def test_a_look_counts_other_processes_and_leaves_out_the_jobs_own():
    with cpu_hogs(1) as (hog,):
        name = f"[{hog.pid}]"
        # Seen from elsewhere, the spinning process uses a good share of a core (it competes
        # with whatever else runs here, so no more is asserted)...
        usage = dict((label, pct) for pct, label in environment.cpu_by_process(0.5, set()))
        (pct,) = [pct for label, pct in usage.items() if label.endswith(name)]
        assert pct >= 5
        # ...but it is this process's child, so a look from here does not count it.
        assert name not in " ".join(environment.look(0.5).top)


def test_the_run_queue_leaves_out_the_jobs_own_runnable_threads():
    """A worker's threads still spinning when a round ends are this job's, not contention."""
    me = {os.getpid()}
    with cpu_hogs(1) as (hog,):
        spinning = {hog.pid}
        # A busy loop is always runnable (running or waiting for a core); this reader too.
        assert environment.running_threads(spinning) == 1
        assert environment.running_threads(me | spinning) >= 2
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        assert environment.running_threads({sleeper.pid}) == 0
    finally:
        sleeper.kill()
        sleeper.wait()
    assert environment.running_threads({2**22 + 7}) == 0  # gone: nothing, no error


def test_quiet_refuse_declines_before_timing_in_one_line(run_cli, tmp_path):
    with cpu_hogs():
        proc = run_cli(*RUN, "bench.quiet=refuse")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: bench.quiet=refuse: machine busy"), proc.stderr
    assert "Traceback" not in proc.stderr and "timed" not in proc.stdout
    assert not (tmp_path / "run" / "results.json").exists()


def test_quiet_wait_waits_then_declines_while_the_machine_stays_busy(run_cli, tmp_path):
    with cpu_hogs():
        proc = run_cli(*RUN, "bench.quiet=wait", "bench.quiet_timeout_s=3")
    assert proc.returncode == 2
    assert "waiting for a quiet machine" in proc.stdout  # the progress bar
    assert "bench.quiet=wait: still busy after" in proc.stderr.strip().splitlines()[-1]


def test_more_torch_threads_than_cores_is_flagged(run_cli, tmp_path):
    threads = environment.usable_cores() + 2
    proc = run_cli(*RUN, f"bench.num_threads={threads}", "sinks=[json,console]")
    assert proc.returncode == 0, proc.stderr
    env = load_results(tmp_path / "run")["environment"]
    assert OVERSUBSCRIBED in env["flags"] and env["torch_threads"] == threads
    assert f"{threads} torch threads on {env['cores']} cores" in " ".join(env["warnings"])
    assert len(warning_lines(proc.stderr)) == 1


def test_the_spread_of_a_few_samples_is_not_judged():
    from rnnexp.results.result import PhaseStats

    few = PhaseStats(median_ms=1.0, iqr_ms=0.5, n=3)
    many = PhaseStats(median_ms=1.0, iqr_ms=0.5, n=environment.SPREAD_MIN_SAMPLES)
    assert environment.spreads_of({"forward": few, "backward": many}) == {"backward": 0.5}


def test_spread_above_torch_benchmark_threshold_is_flagged():
    env = Environment(cores=8, torch_threads=1)
    environment.assess(env, {"forward": 0.05, "backward": environment.IQR_WARN * 2},
                       torch.device("cpu"))
    assert env.flags == [HIGH_SPREAD] and "backward IQR 20% of median" in env.warnings[0]
    quiet = Environment(cores=8, torch_threads=1, before=Look((0.1, 0.1, 0.1), 0.1, []))
    environment.assess(quiet, {"forward": 0.05}, torch.device("cpu"))
    assert quiet.flags == [] and quiet.warning_line() == ""


def test_the_spread_threshold_is_torch_benchmarks():
    """Kept as a number so that results load without torch; torch's own (a private name,
    torch/utils/benchmark/utils/common.py) is read here, where it may be."""
    from torch.utils.benchmark.utils import common

    assert environment.IQR_WARN == common._IQR_WARN_THRESHOLD


def test_results_without_an_environment_record_still_load(tmp_path):
    r = Result(choices={}, overrides=[], config={}, status="ok")
    assert Result.load(r.save(tmp_path)).environment is None
    r.environment = Environment(cores=2, before=Look((1.0, 2.0, 3.0), 1.5, ["x[1] 90%"]),
                                flags=[BUSY], warnings=["machine busy"])
    assert Result.load(r.save(tmp_path)).environment == r.environment


def test_a_short_look_extends_back_to_the_last_one_instead_of_sleeping(monkeypatch):
    import dataclasses

    from rnnexp.machine import environment

    environment.look_since(environment.snapshot())  # a first look: long enough by itself
    previous = environment.last_look()
    assert previous is not None and environment.last_look(max_age_s=-1) is None
    slept = []
    monkeypatch.setattr(environment.time, "sleep", slept.append)
    # As in a sweep: the previous job's last look ended a while ago (its sinks, the next
    # job's plan); the CPU times it read are what they were.
    a_while_ago = dataclasses.replace(previous, at=previous.at - 1.0)
    seen = environment.look_since(environment.snapshot(), earlier=a_while_ago)
    assert slept == [] and seen.load_avg  # the window began at the previous look
    environment.look_since(environment.snapshot())  # nothing earlier: it waits its window
    assert len(slept) == 1 and 0 < slept[0] <= environment.MIN_LOOK_S
    assert environment.last_look() is not previous


# --- NVML on a simulated NVIDIA GPU (a fake pynvml as strict as the real one is dangerous) --

GPU0 = torch.device("cuda", 0)


@pytest.fixture
def nvml(monkeypatch):
    fake = fake_pynvml.make()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: fake_pynvml.Props())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return fake


def test_nvml_finds_the_gpu_by_a_bus_id_string_not_the_int_torch_holds(nvml):
    state = environment.gpu_state(GPU0)
    assert "error" not in state, state  # an int bus id would have crashed the process
    assert nvml.handles == ["0000:1b:00.0"]
    assert state["sm_clock_mhz"] == fake_pynvml.IDLE["sm"] and state["throttle_reasons"]


def test_nvml_is_read_while_the_timed_rounds_run(nvml):
    sampler = environment.GpuSampler(GPU0, interval_s=0.001).start()
    nvml.state = fake_pynvml.BUSY_THROTTLED  # the timed rounds: clocks throttled by heat
    assert nvml.read_while_busy.wait(timeout=10)
    nvml.state = fake_pynvml.IDLE  # timing over, work drained: idle again before stop()
    state = sampler.stop()
    assert "HwThermalSlowdown" in state["throttle_reasons"]
    assert state["sm_clock_mhz"] == fake_pynvml.IDLE["sm"]  # the lowest read
    assert state["temperature_c"] == fake_pynvml.BUSY_THROTTLED["temp"]
    env = Environment(cores=8, torch_threads=1, gpu=state)
    environment.assess(env, {}, GPU0)
    assert environment.GPU_THROTTLED in env.flags


class ScriptedWatch(environment.Watch):
    """A watch reading scripted machine counters: (seconds since start, CPU seconds the whole
    machine spent, CPU seconds this job spent)."""

    def __init__(self, reads):
        self._script = iter(reads)
        super().__init__()

    def _read(self):
        at, machine, ours = next(self._script)
        return at, machine, {os.getpid(): ours}


def test_rounds_of_a_few_milliseconds_are_judged_over_a_tenth_of_a_second():
    """One 10 ms tick of others' CPU time inside a 5 ms round reads as two cores; judged over
    the 0.1 s ending at each round it is a tenth of one, and rounds no read 0.1 s earlier
    precedes are never busy."""
    reads = [(0.0, 0.0, 0.0)] + [(0.005 * i, 0.005 * i + (0.01 if i >= 2 else 0.0), 0.005 * i)
                                 for i in range(1, 61)]
    watch = ScriptedWatch(reads)
    for _ in range(60):
        watch.tick()
    seen = watch.look()
    assert seen.rounds == 60 and seen.busy_rounds == 0 and seen.peak_cores < 0.5
    # (the run queue read is the real machine's: left out of the decision here)
    assert not environment.busy_reason(dataclasses.replace(seen, run_queue=0.0), 2)


def test_contention_through_short_rounds_is_still_counted_round_by_round():
    """Another process using a whole core from 0.1 s on, through rounds of 5 ms: every round
    whose tenth of a second it fills counts busy."""
    reads = [(0.0, 0.0, 0.0)] + [(0.005 * i, 0.005 * i + max(0.0, 0.005 * i - 0.1),
                                  0.005 * i) for i in range(1, 121)]
    watch = ScriptedWatch(reads)
    for _ in range(120):
        watch.tick()
    seen = watch.look()
    assert seen.rounds == 120 and seen.busy_rounds >= 60 and seen.peak_cores > 0.9
    assert environment.busy_reason(dataclasses.replace(seen, run_queue=0.0), 2)
