"""How a configuration is measured across processes: how many, in which order, and when to
stop.

`bench.processes` fresh processes measure one configuration, each with its own build and
warm-up. Their timed samples are taken in interleaved rounds (process 1 runs a round of
about `bench.round_ms`, then process 2, ..., then process 1 again), so drift on the machine
hits every process alike. With a precision target (`bench.precision`) the scheduler adds
processes, up to `bench.max_processes`, until the between-process interval
(stats.between_processes: where a new run's median is expected to fall) lies within
±precision of its center — or until the spread between the processes shows that the most
processes allowed could not get there (t(k−1)·s·√(1+1/k) at k = max_processes is wider than
the target: stopped = "spread"), or the configuration's drift between its earlier runs
(rnnexp.run.drift) alone is wider than the target (stopped = "drift"), or `bench.budget_s` runs
out. The reported interval then says how precise it got. One process of a
backend that needs no isolation runs in the job's own process; every other process is a
worker (rnnexp.measure.isolation).

A `Configuration` holds one configuration's processes, samples and stopping rule; `measure`
runs one alone, rnnexp.run.interleave runs a sweep's configurations together in shared rounds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Protocol

from rnnexp.config import targets
from rnnexp.config.schema import BenchConfig, Config
from rnnexp.machine import environment, memory
from rnnexp.machine.environment import Environment
from rnnexp.measure import isolation, job
from rnnexp.measure.measurer import Finished, Measurer, Ready, Round
from rnnexp.measure.phase_memory import PhaseMemory
from rnnexp.measure.profiling import ProfileInfo
from rnnexp.measure.timing import Progress, Samples
from rnnexp.results import stats
from rnnexp.results.result import Interleaving
from rnnexp.run.drift import UNKNOWN, Drift

# Why the measurement stopped.
BY_COUNT = "iters"  # every process ran bench.iters samples
BY_PRECISION = "precision"  # the interval met bench.precision
BY_SPREAD = "spread"  # the spread between processes alone exceeds bench.precision
BY_DRIFT = "drift"  # the drift between runs (rnnexp.run.drift) alone exceeds bench.precision
BY_BUDGET = "budget"  # bench.budget_s ran out
# Rounds of a lone process with a fixed count: long enough that a round's request and its
# young-generation collection cost nothing, short enough for a live progress bar.
SOLO_ROUND_MS = 500.0


class Share(Protocol):
    """A process measuring its share: rnnexp.measure.measurer.Measurer or isolation.Worker."""

    def setup(self) -> Ready: ...

    def round(self, n: int, block: int) -> Round: ...

    def finish(self) -> Finished: ...

    def close(self) -> None: ...


@dataclass
class Measured:
    ready: Ready  # the first process's (it verified the model)
    per_process: list[Samples]
    backend: dict
    stopped: str
    wall_s: float  # from the first process's start to the last one's end
    setup_s: float = 0.0  # summed over processes
    warmup_s: float = 0.0
    timed_s: float = 0.0
    environment: Optional[Environment] = None  # the machine around the timed samples
    recompiled: str = ""  # what some process compiled while timed ("" if none did)
    profile: Optional[ProfileInfo] = None
    memory: Optional[PhaseMemory] = None
    # Set when the samples were taken in a sweep's interleaved rounds (rnnexp.run.interleave).
    interleaving: Optional[Interleaving] = None

    def pooled(self) -> Samples:
        pooled = Samples(block=self.ready.block)
        for s in self.per_process:
            pooled.extend(s)
        return pooled


def _in_workers(isolate: bool, bench: BenchConfig) -> bool:
    """Workers measure a job whose backend isolates, that several processes measure, or
    that another interpreter measures (bench.python)."""
    return isolate or max_processes(bench) > 1 or job.foreign(bench.python)


def in_job_process(planned: job.Plan) -> bool:
    return not _in_workers(planned.backend.isolate, planned.cfg.bench)


def uses_workers(cfg: Config) -> bool:
    """`in_job_process`'s answer from the config alone, before any plan (to start the fork
    server early)."""
    backend = targets.resolve("backend", targets.target_of(cfg.backend))
    return _in_workers(bool(getattr(backend, "isolate", False)), cfg.bench)


def max_processes(bench: BenchConfig) -> int:
    """The most processes that measure a configuration (all alive until it is done)."""
    return memory.processes_at_once(bench)


def fixed_count(bench: BenchConfig) -> bool:
    """Measured to `bench.iters` samples, with nothing to stop on earlier."""
    return bench.precision is None and bench.budget_s is None


def stop_reason(bench: BenchConfig, per_process: list[Samples], elapsed_s: float,
                runs_drift: Drift = UNKNOWN) -> Optional[str]:
    """Whether to stop after a round, and why (None: go on)."""
    counts = [len(s.forward_ms) for s in per_process]
    k = len(per_process)
    enough = k >= bench.processes and min(counts) >= bench.min_iters
    if bench.precision is not None and enough:
        if k == 1:  # one process: only its own median's interval can be asked about
            if stats.precise_enough(per_process[0].total_ms, bench.precision):
                return BY_PRECISION
        else:
            interval = between(per_process, runs_drift)
            if stats.relative_half_width(interval) <= bench.precision:
                return BY_PRECISION
            if interval["drift_half"] > bench.precision:  # no measuring here narrows that
                return BY_DRIFT
            # At the spread measured so far, even the most processes allowed would leave an
            # interval wider than the target: measuring longer would only cost time.
            if stats.prediction_floor(interval, max_processes(bench)) > bench.precision:
                return BY_SPREAD
    if bench.budget_s is not None and elapsed_s >= bench.budget_s and min(counts) >= 1 \
            and k >= bench.processes:
        return BY_BUDGET
    if min(counts) >= bench.iters and k >= max_processes(bench):
        return BY_COUNT
    return None


def between(per_process: list[Samples], runs_drift: Drift = UNKNOWN) -> dict[str, float]:
    return stats.between_processes([stats.median(s.total_ms) for s in per_process],
                                   drift=runs_drift.spread, drift_runs=runs_drift.runs)


class Configuration:
    """One configuration while it is measured: its processes, their samples and where its
    stopping rule stands. `measure` measures one alone; rnnexp.run.interleave several in shared
    rounds. `rounds`: a fixed count spread over this many rounds (0: each visit takes about
    `round_ms` of samples)."""

    def __init__(self, planned: job.Plan, runs_drift: Drift = UNKNOWN, *,
                 in_workers: bool = True, round_ms: Optional[float] = None):
        self.plan, self.drift, self.in_workers = planned, runs_drift, in_workers
        self.bench: BenchConfig = planned.cfg.bench
        self.round_ms = round_ms or self.bench.round_ms
        self.rounds = 0
        self.shares: list[Share] = []
        self.readies: list[Ready] = []
        self.per_process: list[Samples] = []
        self.timed_s = 0.0
        self.sample_ms = 1.0
        self.stopped: Optional[str] = None
        self.finished: list[Finished] = []

    def add_process(self) -> None:
        """One more process: built, verified (the first only) and warmed up."""
        verify_model = not self.shares
        share: Share = isolation.Worker(self.plan, verify_model=verify_model) \
            if self.in_workers else Measurer(self.plan, verify_model=verify_model)
        self.shares.append(share)
        self.readies.append(share.setup())
        self.per_process.append(Samples(block=self.readies[0].block))
        self.sample_ms = max(self.readies[0].iteration_ms * self.readies[0].block, 1e-3)

    def visit(self, share: int, index: Optional[int] = None) -> int:
        """A round's samples of one of its processes (tagged with interleaved round
        `index`, if any); how many it took."""
        bench, have = self.bench, len(self.per_process[share].forward_ms)
        if self.rounds and index is not None:  # its share of the count by this round's end
            n = math.ceil((index + 1) * bench.iters / self.rounds) - have
        else:
            # A round brings a process at least to its minimum: no stop is asked about before
            # every process has it, so a shorter round only adds a round trip.
            n = max(1, math.ceil(self.round_ms / self.sample_ms), bench.min_iters - have)
        n = min(bench.iters - have, n)
        if n <= 0:
            return 0
        done = self.shares[share].round(n, self.readies[0].block)  # one block size for all
        samples = done.samples if index is None else done.samples.in_round(index)
        self.per_process[share].extend(samples)
        self.timed_s += done.seconds
        return len(samples.forward_ms)

    def after_round(self, elapsed_s: float) -> None:
        """Its stopping rule, after a round; once stopped, its processes finish (still inside
        their backend's context: what was compiled while timed, the profile)."""
        measured = [s for s in self.per_process if s.forward_ms]
        if measured:
            self.sample_ms = max(stats.median(measured[0].total_ms), 1e-3)
        self.stopped = stop_reason(self.bench, self.per_process, elapsed_s, self.drift)
        if self.stopped:
            self.finished = [share.finish() for share in self.shares]

    def wants_process(self) -> bool:
        """Only more processes narrow the between-process interval: one more once every
        process has its minimum, up to the most allowed."""
        counts = [len(s.forward_ms) for s in self.per_process]
        return self.stopped is None and len(self.shares) < max_processes(self.bench) \
            and min(counts) >= min(self.bench.min_iters, self.bench.iters)

    def measured(self, wall_s: float, env: Optional[Environment],
                 interleaving: Optional[Interleaving] = None) -> Measured:
        assert self.stopped is not None, "after_round() said stop first"
        first = self.finished[0]
        return Measured(
            ready=self.readies[0], per_process=self.per_process, backend=first.backend,
            stopped=self.stopped, wall_s=wall_s, setup_s=sum(r.setup_s for r in self.readies),
            warmup_s=sum(r.warmup_s for r in self.readies), timed_s=self.timed_s,
            environment=env, profile=first.profile, memory=first.memory,
            interleaving=interleaving,
            recompiled="; ".join(dict.fromkeys(f.recompiled for f in self.finished
                                               if f.recompiled)))

    def close(self) -> None:
        for share in self.shares:
            share.close()


def measure(planned: job.Plan, progress: Optional[Progress] = None,
            runs_drift: Drift = UNKNOWN) -> Measured:
    """One configuration alone: its processes take turns in rounds until it stops.
    `runs_drift`: the configuration's drift between its earlier runs, for the stopping
    rule."""
    bench = planned.cfg.bench
    # One process with nothing to stop on early has no one to take turns with: its rounds
    # only pace the progress bar.
    alone = max_processes(bench) == 1 and fixed_count(bench)
    c = Configuration(planned, runs_drift, in_workers=not in_job_process(planned),
                      round_ms=max(bench.round_ms, SOLO_ROUND_MS) if alone else None)
    t0 = time.perf_counter()
    # What other processes do is read over the set-up (build, verify, warm-up: up to right
    # before timing; waited for, or refused, as bench.quiet says) and over the timed samples.
    set_up = environment.snapshot()
    gpu = environment.GpuSampler(planned.device)
    try:
        _add(c, bench.processes, progress)
        env = environment.machine(planned.plat.cpu_name)
        env.quiet = bench.quiet.value
        env.torch_threads = c.readies[0].threads  # the measuring process's, not this one's
        # A set-up shorter than a look's window extends back to the previous job's last look
        # (in a sweep) rather than sleeping the rest of the window (~0.05 s a small job).
        env.before, env.waited_s = environment.settle(
            bench.quiet.value, bench.quiet_timeout_s, progress,
            first=environment.look_since(set_up, earlier=environment.last_look()))
        timed = environment.snapshot()
        gpu.start()  # NVML is read while the rounds run
        if progress:
            progress.phase("timed", bench.iters * max_processes(bench))
        while c.stopped is None:
            for share in range(len(c.shares)):
                for _ in range(c.visit(share)):
                    if progress:
                        progress.advance()
            c.after_round(time.perf_counter() - t0)
            if c.wants_process():
                _add(c, 1, progress)
        env.gpu = gpu.stop()
        # Timed samples shorter than a look's shortest window are read with the set-up.
        env.after = environment.look_since(timed, earlier=set_up)
    finally:
        gpu.stop()  # a no-op once stopped: ends the sampling thread after an error
        c.close()
    return c.measured(time.perf_counter() - t0, env)


def _add(c: Configuration, count: int, progress: Optional[Progress]) -> None:
    """Start `count` more processes, one after the other, each once the previous one is
    warm: every process uses all the threads it is given, and side by side their builds,
    verification and warm-ups (OpenMP threads spinning on busy cores) took several times as
    long as one after the other."""
    first = len(c.shares)
    names = f"{first + 1}" if count == 1 else f"{first + 1}–{first + count}"
    _phase(progress, f"process {names} build" + (" + verify" if first == 0 else ""))
    for _ in range(count):
        c.add_process()
    _phase(progress, None)


def _phase(progress: Optional[Progress], name: Optional[str]) -> None:
    """A one-step progress phase around work that is not timed samples."""
    if progress is None:
        return
    if name is None:
        progress.advance()
    else:
        progress.phase(name, 1)
