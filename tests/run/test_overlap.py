"""Work of a sweep's process that overlaps its workers' set-up (rnnexp.run.overlap): finished
where it is asked for, its error raised there, and always finished before a window's first
timed sample."""

from __future__ import annotations

import threading
import time

import pytest

from rnnexp.run import overlap
from tests.run.test_window import FakeHost, Machine, measure, plan


def test_finish_waits_for_the_work_and_raises_its_error_in_the_callers_thread():
    release, done = threading.Event(), []

    def work() -> None:
        release.wait(5)
        done.append(threading.current_thread().name)

    overlap.start(work, name="sweep-start")
    assert overlap.pending() and not done
    release.set()
    overlap.finish()
    assert done == ["sweep-start"] and not overlap.pending()

    def broken() -> None:
        raise OSError("store unwritable")

    overlap.start(broken)
    with pytest.raises(OSError, match="store unwritable"):
        overlap.finish()
    assert not overlap.pending()
    overlap.finish()  # nothing left: a no-op


def test_a_sweep_ending_for_another_reason_finishes_the_work_without_its_error():
    overlap.start(lambda: (_ for _ in ()).throw(ValueError("late")))
    overlap.finish(raise_errors=False)
    assert not overlap.pending()


def test_a_window_finishes_the_work_before_its_first_timed_sample():
    release = threading.Event()

    class Releasing(Machine):
        def host(self, python: str) -> FakeHost:  # the work goes on once set-up started
            made = super().host(python)
            request = made.request

            def asked(kind: str, *args) -> None:
                request(kind, *args)
                release.set()

            made.request = asked  # type: ignore[method-assign]
            return made

    machine = Releasing()

    def work() -> None:
        release.wait(30)
        time.sleep(0.3)  # still running when the workers are ready
        machine.log.append(("work done", -1, -1))

    overlap.start(work)
    try:
        measure([plan("model=lstm", "backend=aten", f"seed={s}") for s in range(2)], machine)
    finally:
        release.set()
        overlap.finish(raise_errors=False)
    kinds = [kind for kind, _, _ in machine.log]
    assert kinds.index("add") < kinds.index("work done") < kinds.index("round")
