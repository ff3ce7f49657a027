"""A window of configurations measured in interleaved rounds, so that the machine's drift hits
every configuration alike (randomized multiple interleaved trials, Abedi & Brecht 2017). A
single run is a window of one.

Set-up: the window's configurations are put in blocks (rnnexp.run.blocks): configurations
whose process-global state is the same share worker processes (rnnexp.measure.isolation),
each built once per worker; every configuration gets `bench.processes` processes. Workers
build, verify (the first process of each configuration) and warm up side by side where the
cores allow (rnnexp.run.blocks.at_once), one after the other where they do not; where their
threads fill the cores they first build and verify side by side on one thread each
(rnnexp.run.blocks.builds_side_by_side), then warm up one after the other on their threads.

Timing, never side by side: each round visits the workers in a fresh random order, and in
each worker its configurations in a fresh random order; each visit takes that
configuration's share of the samples. Only the visited worker runs: the others are stopped
(`Host.park`) until their turn. Every configuration stops by its own rule
(rnnexp.run.schedule.stop_reason: count, precision, spread, drift or budget) and leaves the
rounds; the others go on. Each sample of a sweep's window keeps the number of its round, and
each process the number of its worker, so configurations of one window compare paired by
round and, in a shared worker, by process (rnnexp.analysis.significance).

Around the rounds, one envelope for a window of any size: what the sweep's process did while
the workers set up finished (rnnexp.run.overlap), the machine looked at over the set-up (and
waited for under bench.quiet), other processes' use of it watched after every
round (rnnexp.machine.environment.Watch), NVML read while the rounds run.

A sweep's window holds as many configurations as fit: their workers' memory estimates
(rnnexp.machine.memory) within half of what is free, and at most `bench.window`
configurations.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Callable, Optional, Sequence

from rnnexp.errors import Interrupted, JobCrashed, RnnexpError
from rnnexp.machine import environment, memory
from rnnexp.machine.environment import Environment
from rnnexp.measure import isolation, job
from rnnexp.measure.measurer import Ready
from rnnexp.measure.records import Samples
from rnnexp.measure.timing import Progress
from rnnexp.results.result import Interleaving
from rnnexp.run import blocks, counting, overlap, schedule
from rnnexp.run.drift import UNKNOWN, Drift

# A configuration with a fixed count spreads its samples over at least this many rounds (or
# one sample a round, if it has fewer): paired by round, fewer say little.
MIN_ROUNDS = 10
# Rounds of a lone process with a fixed count: long enough that a round's request and its
# young-generation collection cost nothing, short enough for a live progress bar.
SOLO_ROUND_MS = 500.0
# Share of the free memory a window's processes may take, by their estimates (which are
# generous already): the rest is left to the machine's other work.
MEMORY_SHARE = 0.5


def share_rounds(configs: Sequence[schedule.Configuration]) -> None:
    """Fixed-count configurations take their samples over the same number of rounds — as
    many as the longest needs at its round_ms a visit, MIN_ROUNDS at least — so that they
    stay in the rounds together and pair up over all of them."""
    fixed = [c for c in configs if schedule.fixed_count(c.bench)]
    if not fixed:
        return
    need = [math.ceil(schedule.quota(c.bench, 0) * c.sample_ms / c.round_ms) for c in fixed]
    rounds = max(MIN_ROUNDS, *need)
    for c in fixed:
        c.rounds = min(rounds, schedule.quota(c.bench, 0))


def needs(plans: Sequence[job.Plan]) -> dict[str, float]:
    """What a window's workers hold at once, by place ("host", or the device): each
    configuration's model in each of its processes, its reference once, and on a GPU a
    context per worker."""
    used: dict[str, float] = {}
    for block in blocks.blocks(plans):
        workers = max(schedule.max_processes(plans[i].cfg.bench) for i in block.members)
        for i in block.members:
            p = plans[i]
            one = memory.estimate(p.cfg, varlen=job.varlen(p.cfg))
            est = memory.Estimate(schedule.max_processes(p.cfg.bench) * one.device_bytes,
                                  one.host_bytes)
            for place, need in memory.needs(est, p.device).items():
                where = place if place == "host" else str(p.device)  # several GPUs: each own
                used[where] = used.get(where, 0.0) + need
        p = plans[block.members[0]]
        if p.device.type == "cuda":
            used[str(p.device)] = used.get(str(p.device), 0.0) + workers * memory.CONTEXT_BYTES
    return used


def fits(plans: Sequence[job.Plan], free: Optional[dict[str, int]] = None) -> int:
    """How many of `plans` (in order) one window holds: at most the first plan's
    `bench.window`, and what their workers hold alive at once (`needs`) within MEMORY_SHARE
    of what is free (at least one). `free` overrides what is free ({"host": bytes,
    "<device>": bytes}) for tests of the decision."""
    limit = max(1, plans[0].cfg.bench.window) if plans else 1
    budget: dict[str, float] = {}
    count = 0
    for n in range(1, min(limit, len(plans)) + 1):
        used = needs(plans[:n])
        for where in used:
            if where not in budget:
                have = (free or {}).get(where)
                if have is None:
                    have = memory.free_host_bytes() if where == "host" else \
                        memory.free_bytes(plans[n - 1].device)
                budget[where] = math.inf if have is None else MEMORY_SHARE * have
        if n > 1 and any(used[w] > budget[w] for w in used):
            break
        count = n
    return max(1, count)


class Envelope:
    """What is read of the machine around a window's timed rounds: over the set-up (from
    construction to `settle`), whether it is quiet enough to start (bench.quiet), then other
    processes' use of it after every round, and NVML while the rounds run."""

    def __init__(self, first: job.Plan):
        self.plan = first
        self.set_up = environment.snapshot()
        self.gpu = environment.GpuSampler(first.device)
        self.env: Optional[Environment] = None
        self.watch: Optional[environment.Watch] = None
        self._timed: Optional[environment.Snapshot] = None

    def settle(self, ready: Optional[Ready], progress: Optional[Progress]) -> Environment:
        """Right before the first timed sample: the look over the set-up, waited for or
        refused as bench.quiet says. A set-up shorter than a look's window extends back to
        the previous window's last look rather than sleeping the rest of the window."""
        overlap.finish()  # what this process did while the workers set up (a sweep's start)
        bench = self.plan.cfg.bench
        env = environment.machine(self.plan.plat.cpu_name)
        env.quiet = bench.quiet.value
        # The measuring processes' threads and malloc thresholds, not this one's.
        env.torch_threads, env.malloc = (ready.threads, ready.malloc) if ready else (0, "")
        env.before, env.waited_s = environment.settle(
            bench.quiet.value, bench.quiet_timeout_s, progress,
            first=environment.look_since(self.set_up, earlier=environment.last_look()))
        self.env = env
        self._timed = environment.snapshot()
        self.watch = environment.Watch()
        self.gpu.start()  # NVML is read while the rounds run
        return env

    def after_round(self) -> None:
        if self.watch is not None:
            self.watch.tick()

    def close(self) -> None:
        """After the last round: what others did while the rounds ran."""
        if self.env is None or self.watch is None or self._timed is None:
            return
        self.env.gpu = self.gpu.stop()
        # The busiest processes by name: those seen at both ends (a short window is read
        # together with the set-up); how much others used: the machine's own account.
        top = environment.look_since(self._timed, earlier=self.set_up)
        self.env.after = self.watch.look(top)

    def stop(self) -> None:
        self.gpu.stop()  # a no-op once stopped: ends the sampling thread after an error


@dataclass
class Ended:
    """How a window ended: per job (in the window's order) its Measured, the error that
    stopped it, or None — still measuring when `interrupt` came. `interrupt`: the
    KeyboardInterrupt, Interrupted or scheduler's Killed that cut the window short; the
    caller records what finished, then raises it (`raise_interrupt`)."""

    outcomes: list[schedule.Measured | BaseException | None]
    interrupt: Optional[BaseException] = None

    def raise_interrupt(self) -> None:
        if self.interrupt is not None:
            raise self.interrupt


class Window:
    """`plans` measured together; see the module's docstring. `window`: its id in a sweep
    (samples are then tagged with their rounds and results say what they shared), None for a
    single run. `host`: makes a worker for an interpreter (bench.python, "" for this one);
    by default an isolation.Worker, or the job's own process (isolation.Local) for a lone
    configuration that needs no other."""

    def __init__(self, plans: Sequence[job.Plan], drifts: Sequence[Drift],
                 window: Optional[str], jobs: Sequence[int], seed: int,
                 progress: Optional[Progress] = None,
                 host: Optional[Callable[[str], isolation.Host]] = None,
                 counter: Callable[[job.Plan], isolation.Host] = counting.counting_worker):
        self.plans, self.window, self.jobs, self.seed = list(plans), window, list(jobs), seed
        self.progress = progress
        lone = len(plans) == 1 and schedule.max_processes(plans[0].cfg.bench) == 1 \
            and schedule.fixed_count(plans[0].cfg.bench)
        # A lone process with a fixed count has no one to take turns with: its rounds only
        # pace the progress bar.
        round_ms = SOLO_ROUND_MS if lone else None
        self.configs = [schedule.Configuration(p, d, round_ms=round_ms)
                        for p, d in zip(plans, drifts, strict=True)]
        self.blocks = blocks.blocks(plans)
        local = window is None and len(plans) == 1 and schedule.in_job_process(plans[0])
        self.make_host = host or (lambda python, pinned=False: isolation.Local() if local
                                  else isolation.Worker(python or None, pinned=pinned))
        self.make_counter = counter
        self.counts: dict[int, list[Samples]] = {}  # bench.metric=instructions
        self.count_s: dict[int, float] = {}  # wall seconds its counting processes took
        self.hosts: list[isolation.Host] = []
        self.parking = False  # set once timing starts: only the visited worker runs
        self.awake: set[int] = set()
        self.failed: dict[int, BaseException] = {}
        self.to_drop: list[tuple[int, int]] = []  # failed configurations' (worker, slot)s
        self.built: dict[int, list[int]] = {}  # configuration → workers it is built in, cold
        self.ended: dict[int, float] = {}  # seconds from the start to each one's stop
        self.rng = random.Random(seed)
        self.index = 0
        self.t0 = time.perf_counter()
        self.envelope: Optional[Envelope] = None

    # --- what each configuration goes through ---------------------------------------------

    def live(self, i: int) -> bool:
        return i not in self.failed and self.configs[i].stopped is None

    def guard(self, i: int, work: Callable[[], object], host: int = -1) -> None:
        """An error ends that configuration alone; a worker that died ends every
        configuration it hosted."""
        try:
            work()
        except RnnexpError as err:
            self.fail(i, err)
            if host >= 0 and isinstance(err, JobCrashed) and not self.hosts[host].alive():
                for j in self.hosted(host):
                    self.fail(j, JobCrashed(f"its worker process died while measuring "
                                            f"another configuration ({err})"))
        except Exception as err:  # one configuration's crash, recorded for it alone
            self.fail(i, JobCrashed(memory.crash_line(self.plans[i].cfg.shape, err)))

    def fail(self, i: int, err: BaseException) -> None:
        if i in self.failed or i in self.ended:
            return
        self.failed[i] = err
        self.to_drop.extend((s.worker, i) for s in self.configs[i].shares)
        self.to_drop.extend((w, i) for w in self.built.pop(i, []))

    def drop_failed(self) -> None:
        """What failed configurations hold in shared workers is freed (between requests:
        never while a worker is answering another)."""
        while self.to_drop:
            worker, slot = self.to_drop.pop()
            if self.hosts[worker].alive():
                self._call(worker, lambda h=self.hosts[worker], s=slot: self._drop(h, s))

    @staticmethod
    def _drop(host: isolation.Host, slot: int) -> None:
        try:
            host.request("drop", slot)
            host.answer()
        except RnnexpError:
            pass

    def hosted(self, worker: int) -> list[int]:
        """The live configurations with a process in worker `worker`."""
        return [i for i, c in enumerate(self.configs)
                if self.live(i) and any(s.worker == worker for s in c.shares)]

    def _call(self, worker: int, work: Callable[[], object]) -> None:
        """`work` with worker `worker` running; once timing started, stopped again
        afterwards (unless an outer call woke it)."""
        if not self.parking or worker in self.awake:
            work()
            return
        host = self.hosts[worker]
        host.unpark()
        self.awake.add(worker)
        try:
            work()
        finally:
            self.awake.discard(worker)
            host.park()

    # --- set-up ---------------------------------------------------------------------------

    def new_host(self, block: blocks.Block) -> int:
        self.hosts.append(self.make_host(block.python, pinned=True) if block.pinned
                          else self.make_host(block.python))
        return len(self.hosts) - 1

    def set_up(self) -> None:
        """Every block's workers, each configuration in the first `bench.processes` of its
        block's; as many workers set up at once as the cores allow."""
        tasks: dict[int, deque] = {}
        for block in self.blocks:
            for position in range(block.processes):
                w = self.new_host(block)
                tasks[w] = deque((i, position == 0) for i in block.members
                                 if position < self.plans[i].cfg.bench.processes)
        total = sum(len(t) for t in tasks.values())
        what = (f"{len(self.configs)} configuration{'s' * (len(self.configs) > 1)} in "
                f"{len(self.hosts)} process{'es' * (len(self.hosts) > 1)}")
        at_once = blocks.at_once(self.plans, len(self.hosts))
        side_by_side = blocks.builds_side_by_side(self.plans, len(self.hosts))
        if not side_by_side:
            self._phase(f"{what}: build, verify, warm up", total)
            self.run_tasks(tasks, at_once, "add")
            return
        self._phase(f"{what}: build, verify ({side_by_side} at once, a thread each)", total)
        self.run_tasks({w: deque(t) for w, t in tasks.items()}, side_by_side, "build")
        self._phase(f"{what}: warm up", total)
        self.run_tasks(tasks, at_once, "warm")

    def run_tasks(self, tasks: dict[int, deque], at_once: int, kind: str) -> None:
        """Each worker's configurations one after the other, `at_once` workers side by side;
        `kind`: "add" (build, verify, warm up), "build" (build, verify) or "warm" (warm up
        what was built)."""
        active: dict[int, int] = {}  # worker → configuration it is setting up
        waiting = deque(w for w, t in tasks.items() if t)
        while waiting or active:
            while waiting and len(active) < at_once:
                w = waiting.popleft()
                started = self._start_next(w, tasks[w], kind)
                if started is not None:
                    active[w] = started
                elif tasks[w]:
                    waiting.append(w)
            for w in self._answered(active):
                i = active.pop(w)
                self.guard(i, lambda w=w, i=i: self._set_up(w, i, kind), host=w)
                if self.progress:
                    self.progress.advance()
                if tasks[w]:
                    waiting.append(w)

    def _set_up(self, w: int, i: int, kind: str) -> None:
        """Worker `w`'s answer for configuration `i`: ready to be timed (a share of it),
        or built; freed again if the configuration failed elsewhere meanwhile."""
        answer = self.hosts[w].answer()
        if i in self.failed:
            self.to_drop.append((w, i))
        elif kind == "build":
            self.built.setdefault(i, []).append(w)
        else:
            self.configs[i].add(schedule.Share(self.hosts[w], i, w, answer))
            if w in self.built.get(i, []):
                self.built[i].remove(w)

    def _start_next(self, w: int, todo: deque, kind: str) -> Optional[int]:
        """Ask worker `w` for its next configuration that has not failed."""
        while todo:
            i, verify = todo.popleft()
            if i not in self.failed:
                message = (kind, i) if kind == "warm" else (kind, i, self.plans[i], verify)
                self.guard(i, lambda message=message: self.hosts[w].request(*message),
                           host=w)
                if i not in self.failed:
                    return i
            if self.progress:
                self.progress.advance()
        return None

    def _answered(self, active: dict[int, int]) -> list[int]:
        """Workers of `active` whose answer is ready (waiting a second at most)."""
        conns = {getattr(self.hosts[w], "connection", None): w for w in active}
        if None in conns:  # the job's own process answers at once
            return list(active)
        ready = wait(list(conns), timeout=1.0)
        dead = [w for w in active if not self.hosts[w].alive()]
        return sorted({conns[c] for c in ready} | set(dead))  # a dead one answers its error

    # --- timing ---------------------------------------------------------------------------

    def park_all(self) -> None:
        """From now on only the worker asked runs."""
        self.parking = True
        for host in self.hosts:
            host.park()

    def rounds(self) -> None:
        """Rounds until every configuration stopped (or failed)."""
        self._phase("timed samples", sum(c.bench.iters for i, c in enumerate(self.configs)
                                         if self.live(i)))
        while any(self.live(i) for i in range(len(self.configs))):
            order = [w for w in range(len(self.hosts)) if self.hosted(w)]
            self.rng.shuffle(order)  # a fresh random order every round
            for w in order:
                self._call(w, lambda w=w: self.visit_worker(w))
            assert self.envelope is not None
            self.envelope.after_round()
            for i in range(len(self.configs)):
                if self.live(i):
                    self.guard(i, lambda i=i: self.after_round(i))
            self.drop_failed()
            self.index += 1

    def visit_worker(self, w: int) -> None:
        visits = [(i, s) for i in self.hosted(w)
                  for s, share in enumerate(self.configs[i].shares) if share.worker == w]
        self.rng.shuffle(visits)
        tag = self.window is not None
        for i, s in visits:
            if self.live(i):
                self.guard(i, lambda i=i, s=s: self._advance(
                    self.configs[i].visit(s, self.index, tag)), host=w)

    def _advance(self, n: int) -> None:
        if self.progress:
            for _ in range(n):
                self.progress.advance()

    def after_round(self, i: int) -> None:
        """Its stopping rule — its budget counts its own timed seconds — then its processes
        finish, or it gets one more process while it asks for one."""
        c = self.configs[i]
        if c.after_round(c.timed_s):
            for share in c.shares:
                self._call(share.worker, lambda share=share: c.finish(share))
            self.ended[i] = time.perf_counter() - self.t0
        elif c.wants_process():
            self.add_process(i)

    def add_process(self, i: int) -> None:
        """One more process for a configuration with a precision target: a worker of its
        own block's kind, set up while the others wait."""
        block = next(b for b in self.blocks if i in b.members)
        w = self.new_host(block)
        host = self.hosts[w]

        def set_up() -> None:
            host.request("add", i, self.plans[i], False)
            self.configs[i].add(schedule.Share(host, i, w, host.answer()))

        self._call(w, set_up)
        if self.envelope is not None and self.envelope.watch is not None:
            self.envelope.watch.refresh()

    # --- instruction counts ---------------------------------------------------------------
    def count(self) -> None:
        """bench.metric=instructions: after the timed rounds, each such configuration counted
        in `bench.count_processes` processes of its own under Callgrind, as many at once as
        cores and memory allow (rnnexp.run.counting). A count that fails fails its
        configuration: the metric asked for is missing."""
        todo = {i: self.plans[i] for i in sorted(self.ended) if i not in self.failed
                and blocks.pinned(self.plans[i])}
        if not todo:
            return
        self._phase("instruction counts under Callgrind",
                    sum(p.cfg.bench.count_processes for p in todo.values()))
        counted = counting.count(todo, self.progress, start=self.make_counter)
        self.counts.update(counted.samples)
        self.count_s.update(counted.seconds)
        self.failed.update(counted.failed)

    # --- the whole window -----------------------------------------------------------------

    def measure(self) -> Ended:
        self.envelope = Envelope(self.plans[0])
        try:
            self.set_up()
            self.drop_failed()
            self.park_all()
            share_rounds([c for i, c in enumerate(self.configs) if self.live(i)])
            ready = next((c.readies[0] for i, c in enumerate(self.configs) if self.live(i)),
                         None)
            self.envelope.settle(ready, self.progress)
            self.rounds()
            self.envelope.close()
            self.close()  # the timing workers' memory is the counting processes' to use
            self.count()
        except (KeyboardInterrupt, Interrupted) as err:
            # What finished before the signal is a measurement: it is returned with it.
            done = self.finished()
            return Ended([done.get(job) for job in self.jobs], interrupt=err)
        finally:
            self.envelope.stop()
            self.close()
        done = self.finished()
        return Ended([self.failed[i] if i in self.failed else done[self.jobs[i]]
                      for i in range(len(self.configs))])

    def finished(self) -> dict[int, schedule.Measured]:
        """Job number → Measured, of the configurations that stopped by their own rule."""
        env = self.envelope.env if self.envelope else None
        if env is None:
            return {}
        record = Interleaving(window=self.window, jobs=list(self.jobs), rounds=self.index,
                              seed=self.seed) if self.window is not None else None
        done = {self.jobs[i]: self.configs[i].measured(self.ended[i], copy.deepcopy(env),
                                                        copy.deepcopy(record))
                for i in self.ended if i not in self.failed}
        for i, counted in self.counts.items():
            if self.jobs[i] in done:
                done[self.jobs[i]].counts = counted
                done[self.jobs[i]].count_s = self.count_s.get(i, 0.0)
        return done

    def close(self) -> None:
        """End every worker (once: a closed window has none)."""
        hosts, self.hosts = self.hosts, []
        for host in hosts:  # asked together, then each waited for
            host.exit()
        for host in hosts:
            host.close()

    def _phase(self, name: str, total: Optional[int]) -> None:
        if self.progress:
            self.progress.phase(name, total)  # type: ignore[arg-type]


def measure_window(plans: Sequence[job.Plan], drifts: Sequence[Drift], window: Optional[str],
                   jobs: Sequence[int], seed: int, progress: Optional[Progress] = None
                   ) -> Ended:
    """Measure `plans` together in interleaved rounds; for each, its Measured or the error
    that stopped it (RnnexpError / JobCrashed, one line). `window`: the window's id in a
    sweep, recorded with its `jobs` (their job numbers) in each Measured; None for a single
    run. An interrupt (KeyboardInterrupt, Interrupted, a scheduler's Killed) ends the window
    and comes back in `Ended.interrupt`, with what stopped before it."""
    return Window(plans, drifts, window, jobs, seed, progress).measure()


def measure(planned: job.Plan, progress: Optional[Progress] = None,
            runs_drift: Drift = UNKNOWN) -> schedule.Measured:
    """One configuration alone: a window of one. `runs_drift`: its drift between its
    earlier runs, for the stopping rule. Raises what stopped it."""
    ended = measure_window([planned], [runs_drift], None, [0],
                           int(time.time_ns() % (1 << 31)), progress)
    ended.raise_interrupt()
    (outcome,) = ended.outcomes
    if isinstance(outcome, BaseException):
        raise outcome
    assert outcome is not None
    return outcome
