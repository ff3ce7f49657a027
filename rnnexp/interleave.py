"""A sweep's configurations measured in interleaved rounds, so that the machine's drift hits
every configuration alike (randomized multiple interleaved trials, Abedi & Brecht 2017).

The configurations of a window are each given their processes (fresh workers,
rnnexp.isolation): built, verified and warmed up one after the other. Then rounds of timing
visit every live process of every configuration in a fresh random order each round; each
visit takes about `bench.round_ms` of samples. Every configuration stops by its own rule
(rnnexp.schedule.stop_reason: count, precision, spread, drift or budget) and leaves the
rounds; the others go on. Each sample keeps the number of the round it was taken in, so two
configurations of one window compare paired by round (rnnexp.significance).

A window holds as many configurations as fit: their processes' memory estimates
(rnnexp.memory) within half of what is free, and at most `bench.window` configurations.
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from rnnexp import environment, isolation, job, memory, schedule, stats
from rnnexp.drift import UNKNOWN, Drift
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.measurer import Finished, Ready
from rnnexp.results import Interleaving
from rnnexp.timing import Progress, Samples

# A configuration with a fixed count spreads its samples over at least this many rounds (or
# one sample a round, if it has fewer): paired by round, fewer say little.
MIN_ROUNDS = 10
# Share of the free memory a window's processes may take, by their estimates (which are
# generous already): the rest is left to the machine's other work.
MEMORY_SHARE = 0.5


@dataclass
class _Config:
    """One configuration of the window while it is measured."""

    plan: job.Plan
    drift: Drift = UNKNOWN
    shares: list[isolation.Worker] = field(default_factory=list)
    readies: list[Ready] = field(default_factory=list)
    per_process: list[Samples] = field(default_factory=list)
    timed_s: float = 0.0
    sample_ms: float = 1.0
    failed: Optional[BaseException] = None
    measured: Optional[schedule.Measured] = None
    # Rounds a fixed count is spread over (0: visits sized by bench.round_ms instead).
    rounds: int = 0

    @property
    def bench(self):
        return self.plan.cfg.bench

    @property
    def live(self) -> bool:
        return self.failed is None and self.measured is None

    def add_process(self) -> None:
        worker = isolation.Worker(self.plan, verify_model=not self.shares)
        self.shares.append(worker)
        self.readies.append(worker.setup())
        self.per_process.append(Samples(block=self.readies[0].block))
        self.sample_ms = max(self.readies[0].iteration_ms * self.readies[0].block, 1e-3)

    def visit(self, share: int, index: int) -> None:
        """Round `index`'s samples of one of its processes."""
        have = len(self.per_process[share].forward_ms)
        bench = self.bench
        if self.rounds:  # its share of the count by the end of this round
            n = math.ceil((index + 1) * bench.iters / self.rounds) - have
        else:
            n = max(1, math.ceil(bench.round_ms / self.sample_ms), bench.min_iters - have)
        n = min(bench.iters - have, n)
        if n <= 0:
            return
        done = self.shares[share].round(n, self.readies[0].block)
        self.per_process[share].extend(done.samples.in_round(index))
        self.timed_s += done.seconds

    def close(self) -> None:
        for share in self.shares:
            share.close()


def fixed_count(bench) -> bool:
    """Measured to `bench.iters` samples, with nothing to stop on earlier."""
    return bench.precision is None and bench.budget_s is None


def share_rounds(configs: Sequence[_Config]) -> None:
    """Fixed-count configurations take their samples over the same number of rounds — as
    many as the longest needs at bench.round_ms a visit, MIN_ROUNDS at least — so that they
    stay in the rounds together and pair up over all of them."""
    fixed = [c for c in configs if c.live and fixed_count(c.bench)]
    if not fixed:
        return
    rounds = max(MIN_ROUNDS, *(math.ceil(c.bench.iters * c.sample_ms / c.bench.round_ms)
                               for c in fixed))
    for c in fixed:
        c.rounds = min(rounds, c.bench.iters)


def fits(plans: Sequence[job.Plan], free: Optional[dict[str, int]] = None) -> int:
    """How many of `plans` (in order) one window holds: at most the first plan's
    `bench.window`, and their processes' memory estimates within MEMORY_SHARE of what is free
    (at least one)."""
    limit = max(1, plans[0].cfg.bench.window) if plans else 1
    budget: dict[str, float] = {}
    used: dict[str, float] = {}
    count = 0
    for p in plans[:limit]:
        est = memory.estimate(p.cfg)
        procs = schedule.max_processes(p.cfg.bench)
        on_cpu = p.device.type == "cpu"
        needs = {"host": procs * (est.host_bytes + (est.device_bytes if on_cpu else 0))}
        if not on_cpu:
            needs[str(p.device)] = procs * est.device_bytes
        for where, need in needs.items():
            if where not in budget:
                have = (free or {}).get(where)
                if have is None:
                    have = memory.free_host_bytes() if where == "host" else \
                        memory.free_bytes(p.device)
                budget[where] = math.inf if have is None else MEMORY_SHARE * have
            used[where] = used.get(where, 0.0) + need
        if count and any(used[w] > budget[w] for w in used):
            break
        count += 1
    return max(1, count)


def measure_window(plans: Sequence[job.Plan], drifts: Sequence[Drift], window: str,
                   jobs: Sequence[int], seed: int, progress: Optional[Progress] = None
                   ) -> list[schedule.Measured | BaseException]:
    """Measure `plans` in interleaved rounds; for each, its Measured or the error that
    stopped it (RnnexpError / JobCrashed, one line). `jobs`: their job numbers, recorded
    with the window's id in each Measured."""
    configs = [_Config(p, d) for p, d in zip(plans, drifts, strict=True)]
    rng = random.Random(seed)
    record = Interleaving(window=window, jobs=list(jobs), seed=seed)
    t0 = time.perf_counter()
    set_up = environment.snapshot()
    try:
        _phase(progress, f"{len(configs)} configurations: build, verify, warm up",
               sum(c.bench.processes for c in configs))
        for c in configs:
            _guard(c, lambda c=c: [_step(c.add_process, progress)
                                   for _ in range(c.bench.processes)])
        live = [c for c in configs if c.live]
        share_rounds(live)
        env = environment.machine(plans[0].plat.cpu_name)
        bench = plans[0].cfg.bench
        env.quiet = bench.quiet.value
        if live:
            env.torch_threads = live[0].readies[0].threads
        env.before, env.waited_s = environment.settle(
            bench.quiet.value, bench.quiet_timeout_s, progress,
            first=environment.look_since(set_up, earlier=environment.last_look()))
        timed = environment.snapshot()
        _phase(progress, "interleaved rounds", None)
        index = 0
        while any(c.live for c in configs):
            visits = [(c, s) for c in configs if c.live for s in range(len(c.shares))]
            rng.shuffle(visits)
            for c, s in visits:
                if c.live:
                    _guard(c, lambda c=c, s=s, i=index: c.visit(s, i))
            for c in configs:
                if c.live:
                    _guard(c, lambda c=c, i=index: _after_round(c, i, record, t0))
            index += 1
            if progress:
                progress.advance()
        after = environment.look_since(timed, earlier=set_up)
        for c in configs:
            if c.measured is not None:
                m = c.measured
                m.environment = copy.deepcopy(env)
                m.environment.after = after
                m.environment.gpu = environment.gpu_state(c.plan.device)
                m.interleaving.rounds = index
    finally:
        for c in configs:
            c.close()
    return [c.measured if c.measured is not None else c.failed for c in configs]


def _after_round(c: _Config, index: int, record: Interleaving, t0: float) -> None:
    """The configuration's own stopping rule after a round; more processes while it asks for
    them; on stopping, its processes finish and its Measured is kept."""
    measured = [s for s in c.per_process if s.forward_ms]
    if measured:
        c.sample_ms = max(stats.median(measured[0].total_ms), 1e-3)
    stopped = schedule.stop_reason(c.bench, c.per_process, c.timed_s, c.drift)
    if stopped is None:
        counts = [len(s.forward_ms) for s in c.per_process]
        if len(c.shares) < schedule.max_processes(c.bench) and \
                min(counts) >= min(c.bench.min_iters, c.bench.iters):
            c.add_process()
        return
    finished: list[Finished] = [share.finish() for share in c.shares]
    c.measured = schedule.Measured(
        ready=c.readies[0], per_process=c.per_process, backend=finished[0].backend,
        stopped=stopped, wall_s=time.perf_counter() - t0,
        setup_s=sum(r.setup_s for r in c.readies), warmup_s=sum(r.warmup_s for r in c.readies),
        timed_s=c.timed_s, profile=finished[0].profile,
        recompiled="; ".join(dict.fromkeys(f.recompiled for f in finished if f.recompiled)),
        interleaving=copy.copy(record))


def _guard(c: _Config, work) -> None:
    """Run `work` for one configuration; an error ends that configuration alone."""
    try:
        work()
    except RnnexpError as err:
        c.failed = err
        c.close()
    except Exception as err:  # one configuration's crash, recorded for it alone
        c.failed = JobCrashed(memory.crash_line(c.plan.cfg.shape, err))
        c.close()


def _step(work, progress: Optional[Progress]) -> None:
    work()
    if progress:
        progress.advance()


def _phase(progress: Optional[Progress], name: str, total: Optional[int]) -> None:
    if progress:
        progress.phase(name, total)
