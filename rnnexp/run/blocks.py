"""Which configurations of a window may share worker processes, and how many workers set up
at once.

A worker process hosts every configuration of its block: the configurations whose
process-global state is the same — what their backends leave set for the whole process
(`Backend.process_state`: TorchScript's executor and fuser flags), the intra-op threads
(bench.num_threads), malloc's thresholds (bench.malloc), the interpreter (bench.python) and
the device. Each is built once in each worker and visited in a fresh random order every
round, so within a process the comparison is paired, and a block of N configurations
measured in k processes costs k workers, not N × k. A backend whose set-up resets what
others rely on (torch.compile's `dynamo.reset()`) gets workers of its own for each
configuration.

Scripted configurations of one model at different inputs (shape, dtype, grad mode) share
workers too: each scripts a class of its own (rnnexp.models.loops.script), so each has its
own profiling executor and graph specialised on its own inputs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import torch

from rnnexp.config.schema import Metric
from rnnexp.machine import environment
from rnnexp.measure import job
from rnnexp.run import schedule


def key(p: job.Plan, index: int) -> Hashable:
    """The process-global state configuration `index` (of its window) needs."""
    state = p.backend.process_state()
    if state is None:
        return ("own", index)
    python = os.path.abspath(p.cfg.bench.python) if job.foreign(p.cfg.bench.python) else ""
    return (state, p.cfg.bench.num_threads, p.cfg.bench.malloc, python, str(p.device),
            pinned(p))


def pinned(p: job.Plan) -> bool:
    """Its time is measured with the ISA and threads pinned (bench.metric=instructions: the
    counts' calibration), in fresh interpreters (rnnexp.measure.callgrind.PINNED_ENV)."""
    return p.cfg.bench.metric == Metric.instructions


@dataclass
class Block:
    """Configurations (indices of the window's plans) that share `processes` workers: the
    configuration with process count k is in the first k of them."""

    key: Hashable
    members: list[int] = field(default_factory=list)
    processes: int = 1
    python: str = ""  # the interpreter of its workers (bench.python), "" for this one
    pinned: bool = False  # workers with the ISA pinned (bench.metric=instructions)


def blocks(plans: Sequence[job.Plan]) -> list[Block]:
    """The window's blocks, in the order their first configuration comes: each
    configuration joins the block of its key."""
    found: list[Block] = []
    for i, p in enumerate(plans):
        k = key(p, i)
        block = next((b for b in found if b.key == k), None)
        if block is None:
            block = Block(k, python=str(p.cfg.bench.python or ""), pinned=pinned(p))
            found.append(block)
        block.members.append(i)
        block.processes = max(block.processes, p.cfg.bench.processes)
    return found


def threads_of(p: job.Plan) -> int:
    """Cores a worker's set-up keeps busy: its intra-op threads on a CPU; about one for a GPU
    job (scripting, compiling and launching are one Python thread)."""
    if p.device.type != "cpu":
        return 1
    return p.cfg.bench.num_threads or torch.get_num_threads()


def at_once(plans: Sequence[job.Plan], workers: int, cores: int = 0) -> int:
    """How many workers build, verify and warm up side by side: as many as their threads fit
    on the cores. Side by side beyond that, their OpenMP threads spin against each other and
    every set-up takes longer than one after the other (fastrnns' CPU set on two cores, two
    threads a worker: 78 s of set-up two at a time against 22 s one at a time). No core is
    kept for this process: while workers set up it waits on them (and tells the sinks the
    sweep starts, in a thread); fastrnns' CPU set at one thread on two cores took 33–37 s
    with two set-ups at once against 48–50 s one after the other (docs/benchmarks.md).
    Timing is never side by side (rnnexp.run.interleave)."""
    cores = cores or environment.usable_cores()
    per = max((threads_of(p) for p in plans), default=1)
    return max(1, min(workers, cores // per))


def builds_side_by_side(plans: Sequence[job.Plan], workers: int, cores: int = 0) -> int:
    """How many workers build and verify side by side on one intra-op thread each, before
    they warm up `at_once` at a time on their own threads — where that is more than
    `at_once` (their threads would fill the cores). Building and verifying a model are
    mostly one thread's work (scripting, TorchScript's optimisation, small operators);
    warm-up is on the threads it is timed on. 0: not worth splitting; or a backend's build
    depends on the thread count (`Backend.builds_on_one_thread`: inductor compiles its CPU
    kernels for the threads it sees); or a worker runs another environment's rnnexp
    (bench.python), which may predate the two-step set-up (rnnexp.measure.isolation)."""
    cores = cores or environment.usable_cores()
    side_by_side = min(workers, cores)
    if side_by_side <= at_once(plans, workers, cores) or \
            not all(p.backend.builds_on_one_thread and not job.foreign(p.cfg.bench.python)
                    for p in plans):
        return 0
    return side_by_side


def workers_of(plans: Sequence[job.Plan]) -> int:
    """Workers a window starts before any is added for a precision target."""
    return sum(b.processes for b in blocks(plans))


def most_workers(plans: Sequence[job.Plan]) -> int:
    """Workers a window may have alive at once (precision targets add up to max_processes)."""
    return sum(max(schedule.max_processes(plans[i].cfg.bench) for i in b.members)
               for b in blocks(plans))
