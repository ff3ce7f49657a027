"""Instruction counts of a window's configurations (bench.metric=instructions), after its
timed rounds: each configuration counted in `bench.count_processes` processes of its own under
Callgrind (rnnexp.measure.callgrind), as many of them at once as the cores and the memory
allow.

Counts need neither a quiet machine nor interleaving — a count does not depend on what else
runs — so nothing waits for a core of its own: a counting process is single-threaded and
runs 10–30× slower than natively, and counting processes side by side divide the wall by
their number. The window's timing workers are done by then (counting starts after the timed
rounds). Memory bounds the number: a counting process holds the interpreter and torch, what
Valgrind translated, and — with the allocator's per-thread cache pinned for deterministic
counts — the freed chunks of every iteration it runs: at the default shape a counting
process of `jit` peaked at 7.9 GB over its 3 warm-up and 2 counted iterations, ~4× the
model's estimated peak an iteration."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Mapping, Optional

from rnnexp.errors import RnnexpError
from rnnexp.machine import memory, placement
from rnnexp.measure import callgrind, isolation, job
from rnnexp.measure.records import Samples
from rnnexp.measure.timing import Progress

# What a counting process holds besides its iterations: the interpreter, torch and what
# Valgrind translated (~0.6 GiB measured at the default shape before the first iteration).
BASE_BYTES = 1 << 30
# An iteration's freed chunks stay in the pinned per-thread cache: a counting process grows by
# about four times the model's estimated peak an iteration (7.9 GB measured for `jit` at the
# default shape after 5 iterations, against an estimated peak of 0.38 GB).
GROWTH_PER_ITERATION = 4


def need_bytes(plan: job.Plan) -> int:
    """The memory one counting process of `plan` holds at its peak (it builds no reference:
    counting workers do not verify)."""
    iterations = min(plan.cfg.bench.warmup, callgrind.WARMUP) + plan.cfg.bench.count_iters
    return BASE_BYTES + GROWTH_PER_ITERATION * iterations * memory.estimate(plan.cfg).device_bytes


def at_once(plans: Mapping[int, job.Plan], cores: Optional[int] = None,
            free: Optional[int] = None) -> int:
    """How many counting processes run together: one a usable core, as many as the free
    memory holds at the largest one's peak; at least one."""
    if not plans:
        return 1
    cores = placement.visible_cores() if cores is None else cores
    free = memory.free_host_bytes() if free is None else free
    largest = max(need_bytes(p) for p in plans.values())
    return max(1, min(cores, free // largest))


def counting_worker(plan: job.Plan) -> isolation.Host:
    return isolation.Worker(plan.cfg.bench.python or None, counting=True)


@dataclass
class _Process:
    """One counting process, through its two requests: set up (build, warm up
    uninstrumented; counting workers do not verify), then the counted iterations."""

    slot: int
    plan: job.Plan
    host: Any
    started: float = field(default_factory=time.perf_counter)
    counting: bool = False

    def begin(self) -> None:
        self.host.request("add", self.slot, self.plan, False)

    def step(self) -> Optional[Samples]:
        """Read the answer that is ready; the counts once the last one came."""
        answer = self.host.answer()
        if self.counting:
            return answer.samples
        self.counting = True
        self.host.request("round", self.slot, self.plan.cfg.bench.count_iters, 1)
        return None


@dataclass
class Counted:
    samples: dict[int, list[Samples]] = field(default_factory=dict)  # slot → per process
    seconds: dict[int, float] = field(default_factory=dict)  # its processes' wall, summed
    failed: dict[int, RnnexpError] = field(default_factory=dict)


def count(plans: Mapping[int, job.Plan], progress: Optional[Progress] = None,
          start: Callable[[job.Plan], Any] = counting_worker,
          together: Optional[int] = None) -> Counted:
    """Count each configuration of `plans` (slot → plan) in its `bench.count_processes`
    processes, `together` (default: `at_once`) at a time. A process that fails fails its
    configuration — the metric asked for is missing — and its other processes are not
    started. An interrupt ends every counting process before it leaves."""
    counted = Counted()
    todo = deque((slot, p) for slot, p in plans.items() for _ in range(p.cfg.bench.count_processes))
    together = together or at_once(plans)
    running: dict[Any, _Process] = {}  # by the connection its answers come on
    try:
        while todo or running:
            while todo and len(running) < together:
                slot, p = todo.popleft()
                if slot not in counted.failed:
                    proc = _Process(slot, p, start(p))
                    running[proc.host.connection] = proc
                    _attempt(proc, counted, running, proc.begin)
            if not running:
                continue
            ready = wait(list(running), timeout=1.0)
            # A process that died sends nothing: asking it for its answer says so.
            for conn in ready or [c for c, pr in running.items() if not pr.host.alive()]:
                proc = running.get(conn)
                if proc is None:  # ended with another process of its failed configuration
                    continue
                samples = _attempt(proc, counted, running, proc.step)
                if samples is not None:
                    counted.samples.setdefault(proc.slot, []).append(samples)
                    _end(proc, counted, running)
                    if progress:
                        progress.advance()
    finally:
        for proc in running.values():
            proc.host.close()
    return counted


def _attempt(proc: _Process, counted: Counted, running: dict, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except RnnexpError as err:
        counted.failed[proc.slot] = err
        counted.samples.pop(proc.slot, None)
        for other in [pr for pr in running.values() if pr.slot == proc.slot]:
            _end(other, counted, running)  # its configuration has failed: no count is of use
        return None


def _end(proc: _Process, counted: Counted, running: dict) -> None:
    counted.seconds[proc.slot] = counted.seconds.get(proc.slot, 0.0) + \
        time.perf_counter() - proc.started
    running.pop(proc.host.connection, None)
    proc.host.close()
