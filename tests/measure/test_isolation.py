"""Worker processes: forked from a server that imported torch once, one configuration
measured in several of them, and crashes or signals that end them."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from rnnexp.app.config_check import check
from rnnexp.config import schema
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.measure import isolation, job
from rnnexp.run import execution, schedule

schema.register()
SMALL = ["model=lstm", "backend=aten", "device=cpu", "shape=small", "bench=quick"]


def planned(*overrides):
    """SMALL with `overrides` (which replace SMALL's entries for the same key)."""
    given = {o.split("=", 1)[0] for o in overrides}
    (cfg,) = check([*(o for o in SMALL if o.split("=", 1)[0] not in given), *overrides],
                   multirun=False)
    return job.plan(cfg, {"model": "lstm", "backend": "aten"}, list(overrides))


def test_one_process_of_a_plain_backend_runs_in_the_job_process():
    assert schedule.in_job_process(planned())
    assert not schedule.in_job_process(planned("bench.processes=3"))
    assert not schedule.in_job_process(planned("model=jit", "backend=jit"))


def test_several_processes_give_the_between_process_interval():
    result = execution.execute(planned("bench.processes=3", "bench.iters=6"))
    assert result.status == "ok" and result.verification.status == "passed"
    total = result.phases["total"]
    assert total.processes == 3 and len(total.process_medians_ms) == 3
    assert total.between_low_ms <= min(total.process_medians_ms)
    assert total.between_high_ms >= max(total.process_medians_ms)
    # bench.iters is the configuration's: 2 samples in each process.
    assert total.n == 6 and result.timing.timed_iters == 6
    assert result.timing.processes == 3 and result.timing.stopped == "iters"
    assert result.timing.setup_s > 0 and result.timing.timed_s > 0


def test_adaptive_stops_with_a_reason_and_records_its_interval():
    result = execution.execute(planned("bench=adaptive", "bench.budget_s=0", "bench.min_iters=6"))
    # A zero budget stops after the first round of the first three processes at the latest.
    assert result.timing.stopped in ("precision", "spread", "drift", "budget")
    assert result.timing.processes == 3 and result.timing.block >= 1
    assert result.phases["total"].between_low_ms is not None


def set_up(worker: isolation.Worker, slot: int = 0, *overrides: str):
    worker.request("add", slot, planned(*overrides), False)
    return worker.answer()


def test_a_worker_that_dies_is_a_crash_not_a_hang():
    worker = isolation.Worker()
    set_up(worker)
    os.kill(worker.pid, signal.SIGKILL)
    with pytest.raises(JobCrashed, match="worker process"):
        worker.request("round", 0, 2, 1)
        worker.answer()
    worker.close()


def stopped(pid: int) -> bool:
    """The process reaches the stopped state (a signal is delivered asynchronously)."""
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_closing_unfinished_workers_ends_them_stopped_or_not():
    workers = [isolation.Worker() for _ in range(2)]
    for w in workers:
        set_up(w)
    workers[0].park()
    assert stopped(workers[0].pid)
    for w in workers:
        w.close()
    assert not any(w.alive() for w in workers)


def test_one_worker_hosts_several_configurations_and_an_error_ends_only_its_own():
    worker = isolation.Worker()
    try:
        lstm = set_up(worker, 0)
        gru = set_up(worker, 1, "model=gru")
        assert lstm.work.flops_fwd != gru.work.flops_fwd
        with pytest.raises(RnnexpError, match="bench.num_threads"):
            set_up(worker, 2, "bench.num_threads=0")
        for slot in (0, 1):
            worker.request("round", slot, 2, 1)
            assert len(worker.answer().samples.forward_ms) == 2
        worker.request("finish", 1)
        assert worker.answer().backend["name"] == "aten"
        worker.request("round", 1, 1, 1)  # finished: its slot is gone, the worker is not
        with pytest.raises(JobCrashed, match="slot 1"):
            worker.answer()
        worker.request("round", 0, 1, 1)
        assert len(worker.answer().samples.forward_ms) == 1
    finally:
        worker.close()


def test_a_worker_starts_under_a_temporary_folder_too_long_for_a_socket(tmp_path):
    """A cluster job's or a test's TMPDIR can be longer than a Unix socket's path allows; the
    fork server's socket then goes under a short folder and the worker starts."""
    long = tmp_path / ("d" * 60) / ("e" * 60)
    long.mkdir(parents=True)
    code = ("import tempfile\nfrom rnnexp.measure import isolation\n"
            "w = isolation.Worker()\nassert w.alive()\nw.close()\nprint(tempfile.gettempdir())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(long)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(long)  # everything else still goes to TMPDIR


@pytest.fixture
def threads_kept():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_set_up_in_two_steps_builds_on_one_thread_and_warms_up_on_its_own(
        monkeypatch, threads_kept):
    """("build", ...) then ("warm", ...): what workers do where their threads would fill the
    cores (rnnexp.run.blocks.builds_side_by_side). The model is built and verified on one
    intra-op thread, and warmed up and timed on the configuration's."""
    import torch

    seen = []
    build = job.build_workload
    monkeypatch.setattr(job, "build_workload", lambda cfg, spec: (
        seen.append(torch.get_num_threads()), build(cfg, spec))[1])
    host = isolation.Local()
    host.request("build", 0, planned("bench.num_threads=2"), True)
    assert host.answer() is None
    assert seen == [1] and torch.get_num_threads() == 2  # its threads back after the build
    host.request("warm", 0)
    ready = host.answer()
    assert ready.threads == 2 and ready.verification.status == "passed"
    assert ready.setup_s > 0 and ready.verify_s > 0 and ready.warmup_s > 0
    host.request("round", 0, 3, 1)
    assert len(host.answer().samples.forward_ms) == 3
    host.request("warm", 1)  # never built
    with pytest.raises(JobCrashed, match="never set up"):
        host.answer()


@pytest.mark.parametrize("make", [isolation.Local, isolation.Worker], ids=["local", "worker"])
def test_both_hosts_answer_a_request_the_same_way(make):
    """The job's own process and a worker serve requests with one dispatch
    (isolation.serve): an unknown slot is a crash of that configuration, a dropped slot
    is gone, and the host goes on answering."""
    host = make()
    try:
        host.request("warm", 7)
        with pytest.raises(JobCrashed, match="slot 7 of this process was never set up"):
            host.answer()
        host.request("build", 0, planned(), True)
        assert host.answer() is None
        host.request("drop", 0)
        assert host.answer() is None
        host.request("round", 0, 1, 1)
        with pytest.raises(JobCrashed, match="never set up"):
            host.answer()
    finally:
        host.exit()
        host.close()
