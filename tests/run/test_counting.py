"""Counting processes driven with fakes: how many run at once (cores, memory), that each
configuration gets its processes' counts, and that a failure or an interrupt ends what it
must. The plans are real (planned from composed configs, nothing built or counted)."""

from __future__ import annotations

from multiprocessing import Pipe
from typing import Any, Optional

import pytest

from rnnexp.config.schema import validate
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.measure import job
from rnnexp.measure.records import Samples
from rnnexp.run import counting
from tests.conftest import choices_of, compose_cfg


def plan(*overrides: str) -> job.Plan:
    cfg = compose_cfg(["device=cpu", "shape=small", "bench=quick", "bench.metric=instructions",
                       *overrides])
    return job.plan(validate(cfg), choices_of(cfg))


class Counters:
    """The fake counting processes started, and how many were alive at once."""

    def __init__(self, fail: Optional[dict[int, BaseException]] = None,
                 die: Optional[int] = None):
        self.started: list[FakeCounter] = []
        self.fail = fail or {}  # slot → what its set-up raises
        self.die = die  # slot whose process dies without a word while counting
        self.most_alive = 0

    def start(self, p: job.Plan) -> FakeCounter:
        self.started.append(FakeCounter(self))
        alive = sum(not c.closed for c in self.started)
        self.most_alive = max(self.most_alive, alive)
        return self.started[-1]


class FakeCounter:
    """A counting worker: answers its set-up, then counts of 100 × (slot + 1) instructions."""

    def __init__(self, counters: Counters):
        self.counters = counters
        self.connection, self._ready = Pipe(duplex=False)
        self.closed = self.dead = False
        self.slot: Optional[int] = None
        self._answer: Any = None

    def request(self, kind: str, slot: int, *args: Any) -> None:
        self.slot = slot
        if kind == "add":
            self._answer = self.counters.fail.get(slot, "ready")
        elif slot == self.counters.die:
            self.dead = True
            return  # no answer ever comes
        else:
            level = 100.0 * (slot + 1)
            self._answer = type("Round", (), {"samples": Samples([level] * args[0],
                                                                 [2 * level] * args[0])})
        self._ready.send_bytes(b".")

    def answer(self) -> Any:
        if self.dead:
            raise JobCrashed("the worker process exited with code -9 before reporting a result")
        self.connection.recv_bytes()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    def alive(self) -> bool:
        return not self.dead

    def close(self) -> None:
        self.closed = True


def test_each_configuration_is_counted_in_its_processes_as_many_at_once_as_allowed():
    plans = {0: plan("bench.count_processes=2"), 3: plan("bench.count_processes=3",
                                                         "bench.count_iters=4")}
    counters = Counters()
    counted = counting.count(plans, start=counters.start, together=2)
    assert len(counters.started) == 5 and counters.most_alive == 2
    assert all(c.closed for c in counters.started)
    assert [len(s) for s in (counted.samples[0], counted.samples[3])] == [2, 3]
    assert counted.samples[3][0].forward_ms == [400.0] * 4  # its own count_iters, its own level
    assert not counted.failed and set(counted.seconds) == {0, 3}


def test_one_at_a_time_when_only_one_is_allowed():
    counters = Counters()
    counting.count({0: plan("bench.count_processes=3")}, start=counters.start, together=1)
    assert counters.most_alive == 1 and len(counters.started) == 3


def test_a_failed_count_fails_its_configuration_only_and_starts_no_more_of_it():
    plans = {0: plan("bench.count_processes=3"), 1: plan("bench.count_processes=2")}
    counters = Counters(fail={0: RnnexpError("verification failed")})
    counted = counting.count(plans, start=counters.start, together=1)
    assert str(counted.failed[0]) == "verification failed" and 0 not in counted.samples
    assert len(counted.samples[1]) == 2
    assert [c.slot for c in counters.started] == [0, 1, 1]  # 0's other two never started
    assert all(c.closed for c in counters.started)


def test_a_configuration_failing_in_processes_that_answer_together_fails_once():
    """Both processes of one configuration answer in the same wait and the first fails: the
    other ends with it, and the rest goes on."""
    plans = {0: plan("bench.count_processes=2"), 1: plan()}
    counters = Counters(fail={0: RnnexpError("verification failed")})
    counted = counting.count(plans, start=counters.start, together=3)
    assert set(counted.failed) == {0} and 0 not in counted.samples
    assert len(counted.samples[1]) == 1 and all(c.closed for c in counters.started)


def test_a_counting_process_that_dies_fails_its_configuration():
    counters = Counters(die=1)
    counted = counting.count({0: plan(), 1: plan()}, start=counters.start, together=2)
    assert isinstance(counted.failed[1], JobCrashed) and len(counted.samples[0]) == 1
    assert all(c.closed for c in counters.started)


def test_an_interrupt_ends_every_counting_process():
    counters = Counters(fail={1: KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        counting.count({0: plan("bench.count_processes=2"), 1: plan()}, start=counters.start,
                       together=3)
    assert len(counters.started) == 3 and all(c.closed for c in counters.started)


def test_cores_and_memory_bound_how_many_count_at_once():
    plans = {0: plan(), 1: plan("shape=default")}
    largest = counting.need_bytes(plans[1])
    assert largest > counting.need_bytes(plans[0]) > counting.BASE_BYTES
    assert counting.at_once(plans, cores=16, free=100 * largest) == 16
    assert counting.at_once(plans, cores=16, free=3 * largest + 1) == 3
    assert counting.at_once(plans, cores=2, free=largest // 2) == 1  # always one
