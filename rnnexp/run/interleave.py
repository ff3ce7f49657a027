"""A sweep's configurations measured in interleaved rounds, so that the machine's drift hits
every configuration alike (randomized multiple interleaved trials, Abedi & Brecht 2017).

The configurations of a window are each given their processes (fresh workers,
rnnexp.measure.isolation): built, verified and warmed up one after the other. Then rounds of timing
visit every live process of every configuration in a fresh random order each round; each
visit takes about `bench.round_ms` of samples. Every configuration stops by its own rule
(rnnexp.run.schedule.stop_reason: count, precision, spread, drift or budget) and leaves the
rounds; the others go on. Each sample keeps the number of the round it was taken in, so two
configurations of one window compare paired by round (rnnexp.analysis.significance).

A window holds as many configurations as fit: their processes' memory estimates
(rnnexp.machine.memory) within half of what is free, and at most `bench.window` configurations.
"""

from __future__ import annotations

import copy
import math
import random
import time
from typing import Callable, Optional, Sequence

from rnnexp.errors import Interrupted, JobCrashed, RnnexpError
from rnnexp.machine import environment, memory
from rnnexp.measure import job
from rnnexp.measure.timing import Progress
from rnnexp.results.result import Interleaving
from rnnexp.run import schedule
from rnnexp.run.drift import Drift

# A configuration with a fixed count spreads its samples over at least this many rounds (or
# one sample a round, if it has fewer): paired by round, fewer say little.
MIN_ROUNDS = 10
# Share of the free memory a window's processes may take, by their estimates (which are
# generous already): the rest is left to the machine's other work.
MEMORY_SHARE = 0.5


def share_rounds(configs: Sequence[schedule.Configuration]) -> None:
    """Fixed-count configurations take their samples over the same number of rounds — as
    many as the longest needs at bench.round_ms a visit, MIN_ROUNDS at least — so that they
    stay in the rounds together and pair up over all of them."""
    fixed = [c for c in configs if schedule.fixed_count(c.bench)]
    if not fixed:
        return
    rounds = max(MIN_ROUNDS, *(math.ceil(c.bench.iters * c.sample_ms / c.bench.round_ms)
                               for c in fixed))
    for c in fixed:
        c.rounds = min(rounds, c.bench.iters)


def fits(plans: Sequence[job.Plan], free: Optional[dict[str, int]] = None) -> int:
    """How many of `plans` (in order) one window holds: at most the first plan's
    `bench.window`, and what their processes hold alive at once (rnnexp.machine.memory.concurrent)
    within MEMORY_SHARE of what is free (at least one). `free` overrides what is free
    ({"host": bytes, "<device>": bytes}) for tests of the decision."""
    limit = max(1, plans[0].cfg.bench.window) if plans else 1
    budget: dict[str, float] = {}
    used: dict[str, float] = {}
    count = 0
    for p in plans[:limit]:
        est = memory.concurrent(p.cfg, p.device, varlen=job.varlen(p.cfg),
                                processes=schedule.max_processes(p.cfg.bench))
        for place, need in memory.needs(est, p.device).items():
            where = place if place == "host" else str(p.device)  # several GPUs: each its own
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
    configs = [schedule.Configuration(p, d) for p, d in zip(plans, drifts, strict=True)]
    failed: dict[int, BaseException] = {}
    ended: dict[int, float] = {}  # seconds from the window's start to each one's stop
    rng = random.Random(seed)
    t0 = time.perf_counter()

    def live(i: int) -> bool:
        return i not in failed and configs[i].stopped is None

    def guard(i: int, work: Callable[[], object]) -> None:
        """An error ends that configuration alone."""
        try:
            work()
        except RnnexpError as err:
            failed[i] = err
        except Exception as err:  # one configuration's crash, recorded for it alone
            failed[i] = JobCrashed(memory.crash_line(configs[i].plan.cfg.shape, err))
        else:
            if configs[i].stopped is not None and i not in ended:
                ended[i] = time.perf_counter() - t0
            return
        configs[i].close()

    set_up = environment.snapshot()
    gpu = environment.GpuSampler(plans[0].device)
    index, env = 0, None

    def finished() -> dict[int, schedule.Measured]:
        """Job number → Measured, of the configurations that stopped by their own rule."""
        record = Interleaving(window=window, jobs=list(jobs), rounds=index, seed=seed)
        return {jobs[i]: configs[i].measured(ended[i], copy.deepcopy(env), copy.copy(record))
                for i in ended if i not in failed}

    try:
        _phase(progress, f"{len(configs)} configurations: build, verify, warm up",
               sum(c.bench.processes for c in configs))
        for i, c in enumerate(configs):
            for _ in range(c.bench.processes):
                guard(i, c.add_process)
                if progress:
                    progress.advance()
        share_rounds([c for i, c in enumerate(configs) if live(i)])
        bench = plans[0].cfg.bench
        env = environment.machine(plans[0].plat.cpu_name)
        env.quiet = bench.quiet.value
        ready = next((c.readies[0] for i, c in enumerate(configs) if live(i)), None)
        env.torch_threads = ready.threads if ready else 0
        env.before, env.waited_s = environment.settle(
            bench.quiet.value, bench.quiet_timeout_s, progress,
            first=environment.look_since(set_up, earlier=environment.last_look()))
        timed = environment.snapshot()
        gpu.start()  # NVML is read while the rounds run
        _phase(progress, "interleaved rounds", None)
        while any(live(i) for i in range(len(configs))):
            visits = [(i, s) for i, c in enumerate(configs) if live(i)
                      for s in range(len(c.shares))]
            rng.shuffle(visits)  # a fresh random order every round
            for i, s in visits:
                if live(i):
                    guard(i, lambda i=i, s=s, r=index: configs[i].visit(s, r))
            for i, c in enumerate(configs):
                if live(i):
                    guard(i, lambda c=c: _after_round(c))
            index += 1
            if progress:
                progress.advance()
        env.gpu = gpu.stop()
        env.after = environment.look_since(timed, earlier=set_up)
    except (KeyboardInterrupt, Interrupted) as err:
        # What finished before the signal is a measurement: it goes with the error.
        err.finished = finished() if env is not None else {}  # type: ignore[union-attr]
        raise
    finally:
        gpu.stop()
        for c in configs:
            c.close()
    done = finished()
    return [failed[i] if i in failed else done[jobs[i]] for i in range(len(configs))]


def _after_round(c: schedule.Configuration) -> None:
    """The configuration's own stopping rule (its budget counts its own timed seconds), and
    one more process while it asks for one."""
    c.after_round(c.timed_s)
    if c.wants_process():
        c.add_process()


def _phase(progress: Optional[Progress], name: str, total: Optional[int]) -> None:
    if progress:
        progress.phase(name, total)
