"""How a configuration is measured across processes: how many, how many samples each, and
when to stop.

The process is the replicate: `bench.processes` processes measure a configuration, each with
its own build and warm-up, and share its `bench.iters` timed samples between them. They take
their samples in interleaved rounds (rnnexp.run.interleave) with every other process of the
window, so drift on the machine hits every process alike. With a precision target
(`bench.precision`) processes are added, up to `bench.max_processes`, until the
between-process interval (stats.between_processes: where a new run's median is expected to
fall) lies within ±precision of its center — or until the spread between the processes shows
that the most processes allowed could not get there (t(k−1)·s·√(1+1/k) at k = max_processes is
wider than the target: stopped = "spread"), or the configuration's drift between its earlier
runs (rnnexp.run.drift) alone is wider than the target (stopped = "drift"), or `bench.budget_s`
runs out. The reported interval then says how precise it got.

A `Configuration` holds one configuration's processes (`Share`: a slot of a worker process,
rnnexp.measure.isolation), their samples and its stopping rule; rnnexp.run.interleave decides
which process hosts it and when each is visited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from rnnexp.config import targets
from rnnexp.config.schema import BenchConfig, Config, Metric
from rnnexp.machine import memory
from rnnexp.machine.environment import Environment
from rnnexp.measure import job
from rnnexp.measure.isolation import Host
from rnnexp.measure.measurer import Finished, Ready
from rnnexp.measure.records import PhaseMemory, ProfileInfo, Samples
from rnnexp.results import stats
from rnnexp.results.result import Interleaving
from rnnexp.run.drift import UNKNOWN, Drift

# Why the measurement stopped.
BY_COUNT = "iters"  # every process ran its share of bench.iters samples
BY_PRECISION = "precision"  # the interval met bench.precision
BY_SPREAD = "spread"  # the spread between processes alone exceeds bench.precision
BY_DRIFT = "drift"  # the drift between runs (rnnexp.run.drift) alone exceeds bench.precision
BY_BUDGET = "budget"  # bench.budget_s ran out


@dataclass
class Measured:
    ready: Ready  # the first process's (it verified the model)
    per_process: list[Samples]
    backend: dict
    stopped: str
    wall_s: float  # from the start of its window to its stop
    setup_s: float = 0.0  # summed over processes
    warmup_s: float = 0.0
    timed_s: float = 0.0
    environment: Optional[Environment] = None  # the machine around the timed samples
    recompiled: str = ""  # what some process compiled while timed ("" if none did)
    profile: Optional[ProfileInfo] = None
    memory: Optional[PhaseMemory] = None
    # Set when the samples were taken in a sweep's interleaved rounds (rnnexp.run.interleave).
    interleaving: Optional[Interleaving] = None
    # bench.metric=instructions: each counting process's samples, in instructions.
    counts: list[Samples] = field(default_factory=list)
    count_s: float = 0.0  # wall seconds of its counting processes, start-up included

    def pooled(self) -> Samples:
        pooled = Samples(block=self.ready.block)
        for s in self.per_process:
            pooled.extend(s)
        return pooled


def _in_workers(isolate: bool, bench: BenchConfig) -> bool:
    """Workers measure a job whose backend isolates, that several processes measure, or
    that another interpreter measures (bench.python)."""
    return isolate or max_processes(bench) > 1 or job.foreign(bench.python) \
        or bench.metric == Metric.instructions  # timed with the ISA pinned


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


def quota(bench: BenchConfig, process: int) -> int:
    """The timed samples process number `process` takes: `bench.iters` shared between the
    most processes the configuration may have (at least one each)."""
    k = max_processes(bench)
    return max(1, bench.iters // k + (process < bench.iters % k))


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
    if all(n >= quota(bench, i) for i, n in enumerate(counts)) and k >= max_processes(bench):
        return BY_COUNT
    return None


def between(per_process: list[Samples], runs_drift: Drift = UNKNOWN) -> dict[str, float]:
    return stats.between_processes([stats.median(s.total_ms) for s in per_process],
                                   drift=runs_drift.spread, drift_runs=runs_drift.runs)


@dataclass
class Share:
    """One process of a configuration: slot `slot` of `host`, the window's worker `worker`."""

    host: Host
    slot: int
    worker: int
    ready: Ready
    samples: Samples = field(default_factory=Samples)


class Configuration:
    """One configuration while it is measured: its processes, their samples and where its
    stopping rule stands. `rounds`: a fixed count spread over this many rounds (0: each
    visit takes about `round_ms` of samples)."""

    def __init__(self, planned: job.Plan, runs_drift: Drift = UNKNOWN,
                 round_ms: Optional[float] = None):
        self.plan, self.drift = planned, runs_drift
        self.bench: BenchConfig = planned.cfg.bench
        self.round_ms = round_ms or self.bench.round_ms
        self.rounds = 0
        self.shares: list[Share] = []
        self.timed_s = 0.0
        self.stopped: Optional[str] = None
        self.finished: list[Finished] = []

    @property
    def readies(self) -> list[Ready]:
        return [s.ready for s in self.shares]

    @property
    def per_process(self) -> list[Samples]:
        return [s.samples for s in self.shares]

    @property
    def block(self) -> int:
        """One block size for every process: the verifying one's (it warmed up first)."""
        return self.shares[0].ready.block if self.shares else 1

    @property
    def sample_ms(self) -> float:
        """A sample's duration: the median so far, else the first process's warm-up."""
        measured = [s for s in self.per_process if s.forward_ms]
        if measured:
            return max(stats.median(measured[0].total_ms), 1e-3)
        if not self.shares:
            return 1.0
        first = self.shares[0].ready
        return max(first.iteration_ms * first.block, 1e-3)

    def add(self, share: Share) -> None:
        """A process set up (built, verified if first, warmed up); kept in worker order so
        that the verifying process stays first."""
        share.samples = Samples(block=self.block)
        self.shares.append(share)
        self.shares.sort(key=lambda s: (s.ready.verification is None, s.worker))
        for s in self.shares:
            s.samples.block = self.block

    def visit(self, i: int, index: Optional[int] = None, tag: bool = False) -> int:
        """A round's samples of its process `i`: in round `index` its share of the count by
        the round's end, else about `round_ms` of samples; tagged with the round when `tag`.
        How many it took."""
        share, bench = self.shares[i], self.bench
        have, most = len(share.samples.forward_ms), quota(bench, i)
        if self.rounds and index is not None:
            n = math.ceil((index + 1) * most / self.rounds) - have
        else:
            # A round brings a process at least to its minimum: no stop is asked about before
            # every process has it, so a shorter round only adds a round trip.
            n = max(1, math.ceil(self.round_ms / self.sample_ms), bench.min_iters - have)
        n = min(most - have, n)
        if n <= 0:
            return 0
        share.host.request("round", share.slot, n, self.block)
        done = share.host.answer()
        samples = done.samples.in_round(index) if tag and index is not None else done.samples
        share.samples.extend(samples)
        self.timed_s += done.seconds
        return len(samples.forward_ms)

    def after_round(self, elapsed_s: float) -> Optional[str]:
        """Its stopping rule after a round: why it stops (None: it goes on)."""
        self.stopped = stop_reason(self.bench, self.per_process, elapsed_s, self.drift)
        return self.stopped

    def finish(self, share: Share) -> None:
        """A stopped process's last request (still inside its backend's context: what was
        compiled while timed, the profile, peak memory)."""
        share.host.request("finish", share.slot)
        self.finished.append(share.host.answer())

    def wants_process(self) -> bool:
        """Only more processes narrow the between-process interval: one more once every
        process has its minimum, up to the most allowed."""
        counts = [len(s.forward_ms) for s in self.per_process]
        return self.stopped is None and len(self.shares) < max_processes(self.bench) \
            and min(counts) >= min(self.bench.min_iters, self.bench.iters)

    def measured(self, wall_s: float, env: Optional[Environment],
                 interleaving: Optional[Interleaving] = None) -> Measured:
        assert self.stopped is not None and self.finished, "stopped and finished first"
        first = self.finished[0]
        if interleaving is not None:
            interleaving.workers = [s.worker for s in self.shares]
        return Measured(
            ready=self.readies[0], per_process=self.per_process, backend=first.backend,
            stopped=self.stopped, wall_s=wall_s, setup_s=sum(r.setup_s for r in self.readies),
            warmup_s=sum(r.warmup_s for r in self.readies), timed_s=self.timed_s,
            environment=env, profile=first.profile, memory=first.memory,
            interleaving=interleaving,
            recompiled="; ".join(dict.fromkeys(f.recompiled for f in self.finished
                                               if f.recompiled)))
