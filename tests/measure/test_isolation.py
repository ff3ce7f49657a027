"""Worker processes: forked from a server that imported torch once, one configuration
measured in several of them, and crashes or signals that end them."""

import os
import signal

import pytest

from rnnexp.app.config_check import check
from rnnexp.config import schema
from rnnexp.errors import JobCrashed
from rnnexp.measure import isolation, job
from rnnexp.run import execution, schedule

schema.register()
SMALL = ["model=lstm", "backend=aten", "device=cpu", "shape=small", "bench=quick"]


def planned(*overrides):
    (cfg,) = check([*SMALL, *overrides], multirun=False)
    return job.plan(cfg, {"model": "lstm", "backend": "aten"}, list(overrides))


def test_one_process_of_a_plain_backend_runs_in_the_job_process():
    assert schedule.in_job_process(planned())
    assert not schedule.in_job_process(planned("bench.processes=3"))
    assert not schedule.in_job_process(planned("model=jit", "backend=jit"))


def test_several_processes_give_the_between_process_interval():
    result = execution.execute(planned("bench.processes=3", "bench.iters=4"))
    assert result.status == "ok" and result.verification.status == "passed"
    total = result.phases["total"]
    assert total.processes == 3 and len(total.process_medians_ms) == 3
    assert total.between_low_ms <= min(total.process_medians_ms)
    assert total.between_high_ms >= max(total.process_medians_ms)
    assert total.n == 12 and result.timing.timed_iters == 12  # 4 samples in each process
    assert result.timing.processes == 3 and result.timing.stopped == "iters"
    assert result.timing.setup_s > 0 and result.timing.timed_s > 0


def test_adaptive_stops_with_a_reason_and_records_its_interval():
    result = execution.execute(planned("bench=adaptive", "bench.budget_s=0", "bench.min_iters=6"))
    # A zero budget stops after the first round of the first three processes at the latest.
    assert result.timing.stopped in ("precision", "spread", "drift", "budget")
    assert result.timing.processes == 3 and result.timing.block >= 1
    assert result.phases["total"].between_low_ms is not None


def test_a_worker_that_dies_is_a_crash_not_a_hang():
    worker = isolation.Worker(planned(), verify_model=False)
    worker.setup()
    os.kill(worker._proc.pid, signal.SIGKILL)
    with pytest.raises(JobCrashed, match="worker process"):
        worker.round(2, 1)
    worker.close()


def test_closing_unfinished_workers_ends_them():
    workers = [isolation.Worker(planned(), verify_model=False) for _ in range(2)]
    for w in workers:
        w.setup()
    for w in workers:
        w.close()
    assert not any(w._proc.is_alive() for w in workers)
