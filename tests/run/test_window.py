"""A window driven with fake worker processes: which configurations share a process, who
builds what and verifies, that only the visited worker runs while samples are taken, that
set-up runs side by side where allowed, how errors and dead workers end configurations, and
what a single run (a window of one) records. The fakes answer as workers do, without
torch; the plans are real (planned from composed configs, nothing built)."""

from __future__ import annotations

from multiprocessing import Pipe
from typing import Any, Optional

import pytest

from rnnexp.config.schema import validate
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.measure import job
from rnnexp.measure.measurer import Finished, Ready, Round
from rnnexp.measure.records import Samples, Verification
from rnnexp.models.work import Work
from rnnexp.run import blocks, interleave, schedule
from rnnexp.run.drift import UNKNOWN
from tests.conftest import choices_of, compose_cfg

SMALL = ["device=cpu", "shape=small", "bench=quick", "bench.warmup=0"]


def plan(*overrides: str) -> job.Plan:
    cfg = compose_cfg([*SMALL, *overrides])
    return job.plan(validate(cfg), choices_of(cfg))


class Machine:
    """What the fake workers did, in order, and which of them were running."""

    def __init__(self, fail_add: Optional[dict] = None, die_in_round: Optional[int] = None,
                 interrupt_after: Optional[int] = None):
        self.hosts: list[FakeHost] = []
        self.log: list[tuple] = []
        self.fail_add = fail_add or {}  # (worker, slot) → error raised by its set-up
        self.die_in_round = die_in_round  # worker that dies at its first round
        self.interrupt_after = interrupt_after  # rounds answered before a Ctrl-C
        self.rounds_answered = 0
        self.outstanding: list[str] = []  # the kinds of the requests not yet answered
        self.most_outstanding = 0
        self.most_at_once: dict[str, int] = {}  # by kind of request

    def host(self, python: str, pinned: bool = False) -> FakeHost:
        self.hosts.append(FakeHost(self, len(self.hosts), python))
        return self.hosts[-1]

    def running(self) -> list[int]:
        return [h.number for h in self.hosts if not h.parked and not h.closed]


class FakeHost:
    """A worker: answers set-up, rounds and finish for its slots; samples are 1 ms × the
    slot's number + 1, so each configuration has its own level."""

    def __init__(self, machine: Machine, number: int, python: str):
        self.machine, self.number, self.python = machine, number, python
        self.slots: dict[int, bool] = {}  # slot → verified here
        self.parked = self.closed = self.dead = False
        self.connection, self._ready = Pipe(duplex=False)
        self._answer: Any = None
        self._kind = ""

    def request(self, kind: str, slot: int, *args: Any) -> None:
        m = self.machine
        m.log.append((kind, self.number, slot))
        assert not self.parked, f"worker {self.number} asked while stopped"
        if self.dead:
            raise JobCrashed("the worker process exited with code -9 before reporting")
        m.outstanding.append(kind)
        m.most_outstanding = max(m.most_outstanding, len(m.outstanding))
        m.most_at_once[kind] = max(m.most_at_once.get(kind, 0), m.outstanding.count(kind))
        self._kind = kind
        if kind in ("add", "build"):
            planned, verify = args
            error = m.fail_add.get((self.number, slot))
            self.slots[slot] = verify
            self._answer = error or (self.ready(verify) if kind == "add" else None)
        elif kind == "warm":
            assert slot in self.slots, f"worker {self.number} warms slot {slot} unbuilt"
            self._answer = self.ready(self.slots[slot])
        elif kind == "round":
            n = args[0]
            if m.die_in_round == self.number:
                self.dead = True
                self._answer = JobCrashed("the worker process exited with code -11")
            elif m.interrupt_after is not None and m.rounds_answered >= m.interrupt_after:
                self._answer = KeyboardInterrupt()
            else:
                assert m.running() == [self.number], "another worker runs while one is timed"
                level = float(slot + 1)
                self._answer = Round(Samples([level] * n, [2 * level] * n), n * 1e-3)
                m.rounds_answered += 1
        elif kind == "finish":
            self._answer = Finished(backend={"name": "fake", "verified": self.slots[slot]})
        else:  # drop
            self._answer = None
        self._ready.send_bytes(b".")

    @staticmethod
    def ready(verified: bool) -> Ready:
        return Ready(work=Work(1, 1.0, 1.0, 1.0, 1.0), no_backward_reason="",
                     verification=Verification("passed") if verified else None, block=1,
                     iteration_ms=1.0, threads=1, clock="perf_counter", malloc="system",
                     setup_s=0.1)

    def answer(self) -> Any:
        self.connection.recv_bytes()
        self.machine.outstanding.remove(self._kind)
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    def alive(self) -> bool:
        return not self.dead

    def park(self) -> None:
        self.parked = True

    def unpark(self) -> None:
        self.parked = False

    def exit(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def measure(plans: list[job.Plan], machine: Machine, window: Optional[str] = "w/0",
            seed: int = 1):
    w = interleave.Window(plans, [UNKNOWN] * len(plans), window, list(range(len(plans))),
                          seed, host=machine.host)
    ended = w.measure()
    assert ended.interrupt is None
    return w, ended.outcomes


def test_compatible_configurations_share_workers_each_built_once_there():
    plans = [plan("model=lstm", "backend=aten", "bench.processes=2", f"seed={s}")
             for s in range(3)]
    machine = Machine()
    _, measured = measure(plans, machine)
    assert len(machine.hosts) == 2  # 3 configurations × 2 processes in 2 workers
    adds = [(w, slot) for kind, w, slot in machine.log if kind in ("add", "build")]
    assert sorted(adds) == [(w, s) for w in range(2) for s in range(3)]
    assert all(h.slots == {s: h.number == 0 for s in range(3)} for h in machine.hosts)
    for m in measured:
        assert isinstance(m, schedule.Measured) and m.stopped == schedule.BY_COUNT
        assert m.interleaving.workers == [0, 1] and m.interleaving.window == "w/0"
        assert m.ready.verification.status == "passed"  # the verifying process first
        assert sum(len(s.forward_ms) for s in m.per_process) == plans[0].cfg.bench.iters
        assert all(s.rounds for s in m.per_process)  # tagged: paired by round


def test_every_round_visits_each_worker_once_and_its_configurations_in_a_fresh_order():
    plans = [plan("model=lstm", "backend=aten", "bench.processes=2", "bench.iters=40",
                  f"seed={s}") for s in range(4)]
    machine = Machine()
    w, _ = measure(plans, machine)
    rounds = [(h, slot) for kind, h, slot in machine.log if kind == "round"]
    per_round = [rounds[i:i + 8] for i in range(0, len(rounds), 8)]
    assert len(per_round) == w.index >= interleave.MIN_ROUNDS
    orders = set()
    for visits in per_round:
        hosts = [h for h, _ in visits]
        assert sorted(hosts) == [0] * 4 + [1] * 4
        assert hosts in ([0] * 4 + [1] * 4, [1] * 4 + [0] * 4)  # a worker's visits together
        orders.add(tuple(slot for _, slot in visits))
    assert len(orders) > 1


def test_incompatible_configurations_get_workers_of_their_own():
    plans = [plan("model=jit", "backend=jit", "backend.executor=simple", "bench.processes=2"),
             plan("model=jit", "backend=jit", "backend.executor=profiling",
                  "bench.processes=2"),
             plan("model=lstm", "backend=aten", "bench.processes=2")]
    # The unfused profiling executor is what a vendor backend scripts loops under.
    assert members(plans) == [[0], [1, 2]]
    machine = Machine()
    _, measured = measure(plans, machine)
    assert len(machine.hosts) == 4
    assert measured[0].interleaving.workers == [0, 1]
    assert measured[1].interleaving.workers == measured[2].interleaving.workers == [2, 3]


def members(plans: list[job.Plan]) -> list[list[int]]:
    return [b.members for b in blocks.blocks(plans)]


def test_threads_and_malloc_keep_processes_apart_and_a_scripted_model_s_inputs_do_not():
    base = ["model=jit", "backend=aten"]
    assert members([plan(*base), plan(*base, "seed=1")]) == [[0, 1]]
    assert members([plan(*base), plan(*base, "bench.num_threads=1")]) == [[0], [1]]
    # malloc's thresholds are the process's, and cannot be unpinned once pinned.
    assert members([plan(*base), plan(*base, "bench.malloc=system")]) == [[0], [1]]
    # One scripted model at two input shapes or grad modes: each scripts a class of its own
    # (the next test), so they share workers and are compared within them.
    assert members([plan(*base), plan(*base, "shape.hidden_size=40")]) == [[0, 1]]
    assert members([plan(*base), plan(*base, "bench.backward=false")]) == [[0, 1]]
    assert members([plan(*base), plan("model=jit_premul", "backend=aten"),
                    plan("model=lstm", "backend=aten", "shape.hidden_size=40")]) == [[0, 1, 2]]


def test_one_scripted_model_at_two_shapes_in_one_process_runs_a_graph_of_its_own_each():
    """Two instances of one scripted class would share one profiling executor: the second
    shape would run through the first one's specialised graph (its guards failing) instead
    of a graph of its own. Each configuration scripts a class of its own."""
    import torch

    from rnnexp.backends.scripting import scripted_module

    plans = [plan("model=jit", "backend=jit", "shape=small", f"shape.seq_len={n}",
                  "bench.backward=false") for n in (5, 7)]
    built = [p.backend.prepare(job.build_workload(p.cfg, p.spec)) for p in plans]
    types = [scripted_module(w)._c._type() for w in built]
    assert types[0] != types[1]
    for _ in range(3):  # alternating, as a worker visits its configurations
        for own, workload in zip(types, built, strict=True):
            with torch.no_grad():
                workload.run_forward()
            graph = torch.jit.last_executed_optimized_graph()
            assert next(graph.inputs()).type() == own  # its own executor's graph ran


def test_set_up_runs_side_by_side_as_the_cores_allow(monkeypatch):
    plans = [plan("model=lstm", "backend=aten", "bench.processes=3", f"seed={s}")
             for s in range(2)]
    monkeypatch.setattr(blocks, "at_once", lambda plans, workers, cores=0: 3)
    machine = Machine()
    measure(plans, machine)
    assert machine.most_outstanding == 3  # three workers building at once
    assert {kind for kind, _, _ in machine.log} == {"add", "round", "finish"}


def test_workers_whose_threads_fill_the_cores_build_side_by_side_then_warm_up_alone(
        monkeypatch):
    """Two threads a worker on two cores: one set-up at a time, but building and verifying
    are one thread's work — so the three workers build on a thread each, two at once, and
    then warm up one at a time on their own threads."""
    monkeypatch.setattr(blocks.environment, "usable_cores", lambda: 2)
    monkeypatch.setattr(blocks.torch, "get_num_threads", lambda: 2)
    plans = [plan("model=lstm", "backend=aten", "bench.processes=3", f"seed={s}")
             for s in range(2)]
    machine = Machine()
    _, measured = measure(plans, machine)
    kinds = [kind for kind, _, _ in machine.log]
    assert kinds.count("build") == kinds.count("warm") == 6 and "add" not in kinds
    assert max(i for i, k in enumerate(kinds) if k == "build") < kinds.index("warm")
    assert machine.most_at_once == {"build": 2, "warm": 1, "round": 1, "finish": 1}
    for m in measured:  # each configuration verified in its first process, timed in three
        assert isinstance(m, schedule.Measured) and m.interleaving.workers == [0, 1, 2]
        assert m.ready.verification.status == "passed"


def test_how_many_build_side_by_side(monkeypatch):
    monkeypatch.setattr(blocks.torch, "get_num_threads", lambda: 2)
    cpu = plan("model=lstm", "backend=aten")
    assert blocks.builds_side_by_side([cpu], workers=5, cores=2) == 2  # a thread each
    assert blocks.builds_side_by_side([cpu], workers=5, cores=16) == 0  # warm-ups fit too
    assert blocks.builds_side_by_side([cpu], workers=1, cores=2) == 0  # one worker
    one = plan("model=lstm", "backend=aten", "bench.num_threads=1")
    assert blocks.builds_side_by_side([one], workers=5, cores=2) == 0  # set up side by side
    # inductor compiles its CPU kernels for the threads it sees: built on its own threads.
    compiled = plan("model=jit", "backend=inductor")
    assert not compiled.backend.builds_on_one_thread
    assert blocks.builds_side_by_side([cpu, compiled], workers=5, cores=2) == 0
    # Another environment's rnnexp may not know the two-step set-up: whole set-ups there.
    other = plan("model=lstm", "backend=aten")
    other.cfg.bench.python = "/elsewhere/.venv/bin/python"  # planned there, not probed here
    assert blocks.builds_side_by_side([cpu, other], workers=5, cores=2) == 0


def test_how_many_set_up_at_once(monkeypatch):
    monkeypatch.setattr(blocks.torch, "get_num_threads", lambda: 2)  # the default on 2 cores
    cpu, gpu_like = plan("model=lstm", "backend=aten"), plan("bench.num_threads=1")
    assert blocks.at_once([cpu], workers=4, cores=2) == 1  # every core to each worker
    two = plan("model=lstm", "backend=aten", "bench.num_threads=2")
    assert blocks.at_once([two], workers=4, cores=5) == 2  # two threads each: two fit
    assert blocks.at_once([gpu_like], workers=4, cores=2) == 2  # a thread each: one a core
    assert blocks.at_once([gpu_like], workers=4, cores=16) == 4
    assert blocks.at_once([gpu_like], workers=40, cores=16) == 16
    assert blocks.at_once([gpu_like, cpu], workers=4, cores=2) == 1  # the most threads


@pytest.mark.parametrize("cores", [16, 2])  # whole set-ups; built on a thread, then warmed
def test_an_error_ends_its_configuration_alone_and_frees_its_other_processes(monkeypatch,
                                                                             cores):
    monkeypatch.setattr(blocks.environment, "usable_cores", lambda: cores)
    monkeypatch.setattr(blocks.torch, "get_num_threads", lambda: 2)
    plans = [plan("model=lstm", "backend=aten", "bench.processes=2", f"seed={s}")
             for s in range(2)]
    machine = Machine(fail_add={(1, 0): RnnexpError("planted")})
    _, (failed, ok) = measure(plans, machine)
    assert isinstance(failed, RnnexpError) and str(failed) == "planted"
    assert isinstance(ok, schedule.Measured) and ok.interleaving.workers == [0, 1]
    assert ("drop", 0, 0) in machine.log  # its process in worker 0 is freed, warm or not
    assert not any(kind in ("warm", "round") and slot == 0 for kind, _, slot in machine.log)
    assert ("build" in {kind for kind, _, _ in machine.log}) == (cores == 2)


def test_a_worker_that_dies_ends_every_configuration_it_hosted():
    plans = [plan("model=lstm", "backend=aten", "bench.processes=2", f"seed={s}")
             for s in range(2)] + [plan("model=jit", "backend=jit", "backend.executor=simple",
                                       "bench.processes=2")]
    machine = Machine(die_in_round=0)
    _, measured = measure(plans, machine)
    assert all(isinstance(m, JobCrashed) for m in measured[:2])
    assert any("worker process died while measuring another" in str(m) for m in measured[:2])
    assert isinstance(measured[2], schedule.Measured)  # in workers of its own


def test_an_interrupt_keeps_what_finished_before_it():
    short = plan("model=lstm", "backend=aten", "bench.iters=2")
    long = plan("model=lstm", "backend=aten", "bench.iters=1000", "seed=1")
    machine = Machine(interrupt_after=10)
    w = interleave.Window([short, long], [UNKNOWN] * 2, "w/0", [7, 8], 1, host=machine.host)
    ended = w.measure()
    assert isinstance(ended.interrupt, KeyboardInterrupt)
    assert isinstance(ended.outcomes[0], schedule.Measured) and ended.outcomes[1] is None
    with pytest.raises(KeyboardInterrupt):
        ended.raise_interrupt()
    assert all(h.closed for h in machine.hosts)


def test_a_single_run_is_a_window_of_one_with_no_interleaving_record():
    lone = plan("model=lstm", "backend=aten", "bench.processes=2")
    machine = Machine()
    _, (m,) = measure([lone], machine, window=None)
    assert m.interleaving is None and len(m.per_process) == 2
    assert not any(s.rounds for s in m.per_process)
    assert [kind for kind, _, _ in machine.log].count("finish") == 2


def test_contention_that_starts_during_the_rounds_is_seen_round_by_round():
    """A CPU hog started by the third round (after the look before timing) is in the
    machine's account of the rounds: the job is flagged busy while timing. (A busy machine
    here flags it too: what is asserted is that the rounds were watched, each of them.)"""
    import subprocess
    import sys
    import time

    from rnnexp.machine import environment

    hogs: list[subprocess.Popen] = []

    class Hogging(Machine):
        def host(self, python: str, pinned: bool = False) -> FakeHost:
            host = super().host(python)
            answer = host.answer

            def answer_and_start_hogs():
                if self.rounds_answered == 3 and not hogs:
                    hogs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"])
                                for _ in range(2))
                time.sleep(0.03)  # a round lasts as a real one would, not microseconds
                return answer()

            host.answer = answer_and_start_hogs
            return host

    machine = Hogging()
    slow = plan("model=lstm", "backend=aten", "bench.iters=60", "bench.round_ms=100")
    try:
        w, (m,) = measure([slow], machine)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    after = m.environment.after
    assert after.rounds == w.index and after.busy_rounds >= 1 and after.peak_cores > 0
    environment.assess(m.environment, {}, slow.device)
    assert environment.BUSY in m.environment.flags


@pytest.mark.parametrize("look, busy", [
    (dict(other_cores=0.2, rounds=8, busy_rounds=3, peak_cores=1.6), True),  # 3 of 8 rounds
    (dict(other_cores=0.2, rounds=8, busy_rounds=1, peak_cores=1.6), False),  # one burst
    (dict(other_cores=0.6, rounds=8, busy_rounds=1), True),  # on average
    (dict(other_cores=0.1, rounds=8, run_queue=1.5), True),  # waiting for a core
])
def test_busy_while_timing_is_decided_over_the_rounds(look, busy):
    from rnnexp.machine.environment import BUSY, Environment, Look, assess

    env = Environment(cores=2, torch_threads=1, after=Look(**look))
    assess(env, {}, plan().device)
    assert (BUSY in env.flags) == busy
    if busy:
        assert "while timing" in env.warnings[0] and "rounds" in env.warnings[0]


def test_counting_starts_once_the_timing_workers_are_closed():
    """bench.metric=instructions: the counting processes come after the timed rounds, with
    the memory the timing workers held given back."""
    from tests.run.test_counting import Counters

    machine, counters = Machine(), Counters()
    open_when_counting = []

    def counter(p):
        open_when_counting.append(sum(not h.closed for h in machine.hosts))
        return counters.start(p)

    plans = [plan("model=lstm", "backend=aten", "bench.metric=instructions", f"seed={s}")
             for s in range(2)]
    w = interleave.Window(plans, [UNKNOWN] * 2, "w/0", [0, 1], 1, host=machine.host,
                          counter=counter)
    ended = w.measure()
    assert ended.interrupt is None and machine.hosts
    assert open_when_counting == [0, 0]
    assert all(m.counts and len(m.counts) == 1 for m in ended.outcomes)
