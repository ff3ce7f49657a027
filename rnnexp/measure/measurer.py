"""One process's share of a job: build and prepare the model, verify it (the first process
only: every process builds the same weights from the same seed), warm up, then time samples
in rounds as the scheduler asks. It runs in the job's own process or in a worker process
(rnnexp.measure.isolation) beside the measurers of other configurations whose process-global
state is the same; either way the scheduler (rnnexp.run.schedule) talks to it the same way.

The backend's context (its flags, the current device) is entered around each call, not held
between them: measurers that share a process take turns, each under its own flags. What was
compiled while timed is asked after each round, while this measurer's own run is still the
process's last one (TorchScript's last optimised graph is per process, not per module).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from rnnexp.machine import malloc
from rnnexp.machine.platform import Platform
from rnnexp.measure import callgrind, job, phase_memory, profiling
from rnnexp.measure.records import PhaseMemory, ProfileInfo, Samples, Verification
from rnnexp.measure.timing import Timer, block_for, clock_for
from rnnexp.measure.verify import verify
from rnnexp.models.compile_cost import CompileCost
from rnnexp.models.work import Work


@dataclass
class Ready:
    """What a measurer reports once it is warm."""

    work: Work
    no_backward_reason: str
    verification: Optional[Verification]
    block: int
    iteration_ms: float  # one warm-up iteration (wall), for sizing rounds
    threads: int
    clock: str
    malloc: str  # this process's malloc thresholds (bench.malloc, rnnexp.machine.malloc)
    # Seconds spent: building, scripting/compiling and the backend's untimed first runs;
    # verification; warm-up.
    setup_s: float = 0.0
    verify_s: float = 0.0
    warmup_s: float = 0.0
    # The interpreter's platform, when a worker ran under another one than the job's
    # (bench.python): its torch and device versions are the measurement's.
    platform: Optional[Platform] = None
    # That interpreter's rnnexp checkout (HEAD, "-dirty"; "" outside git), for the same
    # reason: the code measured is the worker's, not the launcher's.
    git_commit: Optional[str] = None
    # This process's start-up: build, compile, untimed calls (steady_ms comes from the
    # timed samples later).
    start: Optional[CompileCost] = None


@dataclass
class Round:
    samples: Samples
    seconds: float  # wall time of the round's timed iterations (marks included)


@dataclass
class Finished:
    backend: dict[str, Any] = field(default_factory=dict)
    # What was compiled inside the timed samples, in a line ("" if nothing: the kernel was
    # timed, not its compilation).
    recompiled: str = ""
    profile: Optional[ProfileInfo] = None  # the first process's, with bench.profile
    memory: Optional[PhaseMemory] = None  # the first process's, with bench.memory


@dataclass
class _Built:
    """What `Measurer.build` leaves for `Measurer.warm`."""

    workload: Any
    verification: Optional[Verification]
    malloc: str  # the malloc thresholds it applied (rnnexp.machine.malloc)
    build_s: float  # the model's construction alone (start_of)
    setup_s: float
    verify_s: float


class Measurer:
    def __init__(self, planned: job.Plan, *, verify_model: bool):
        self.p = planned
        self.verify_model = verify_model
        self._timer: Optional[Timer] = None
        self._built: Optional[_Built] = None  # between build() and warm()
        self._workload = None
        self._recompiled = ""  # the first change a round's check found

    def setup(self) -> Ready:
        """Build, verify and warm up, all on the configuration's intra-op threads."""
        self.build()
        return self.warm()

    def build(self, one_thread: bool = False) -> None:
        """Build, prepare (the backend's untimed first runs) and verify. `one_thread`: on one
        intra-op thread, so that workers whose threads would fill the cores build side by
        side (rnnexp.run.blocks.builds_side_by_side); the configuration's threads are back
        before `warm`, which warms up on them."""
        cfg, p = self.p.cfg, self.p
        if cfg.bench.num_threads:
            torch.set_num_threads(cfg.bench.num_threads)
        malloc_said = malloc.apply(cfg.bench.malloc)  # before the first buffer
        threads = torch.get_num_threads()
        if one_thread:
            torch.set_num_threads(1)
        try:
            with p.backend.context():
                self._built = self._build(malloc_said)
        finally:
            torch.set_num_threads(threads)

    def _build(self, malloc_said: str) -> _Built:
        cfg, p = self.p.cfg, self.p
        t0 = time.perf_counter()
        built = job.build_workload(cfg, p.spec)
        build_s = time.perf_counter() - t0
        workload = p.backend.prepare(built)
        t1 = time.perf_counter()
        verification = None
        if self.verify_model:
            verification = (verify(workload, p.spec.dtype, backward=cfg.bench.backward)
                            if cfg.bench.verify
                            else Verification("skipped", detail="bench.verify=false"))
        return _Built(workload, verification, malloc_said, build_s, setup_s=t1 - t0,
                      verify_s=time.perf_counter() - t1)

    def warm(self) -> Ready:
        """Warm up after `build`, on the configuration's threads; ready to be timed."""
        assert self._built is not None, "build() first"
        with self.p.backend.context():
            return self._warm(self._built)

    def _warm(self, built: _Built) -> Ready:
        cfg, p, workload = self.p.cfg, self.p, built.workload
        t2 = time.perf_counter()
        # A counting worker (bench.metric=instructions) counts where others time; its
        # warm-up runs uninstrumented (the same instructions, several times faster under
        # Valgrind), and Callgrind instruments from the first counted iteration on.
        counts = counting()
        clock = callgrind.Clock() if counts else clock_for(p.device)
        self._timer = Timer(workload, clock, cfg.bench.backward)
        iteration_ms = self._timer.warmup(min(cfg.bench.warmup, callgrind.WARMUP) if counts
                                          else cfg.bench.warmup)
        if cfg.bench.block_ms and not iteration_ms:  # no warm-up to size blocks from
            iteration_ms = self._timer.warmup(1)
        if isinstance(clock, callgrind.Clock):
            clock.start()
        # From here on anything compiled is inside the timed samples (checked after each round).
        p.backend.timed_start(workload)
        t3 = time.perf_counter()
        self._workload = workload
        self._built = None
        no_backward = workload.no_backward_reason or ("" if cfg.bench.backward
                                                       else "bench.backward=false")
        return Ready(work=workload.work, no_backward_reason=no_backward,
                     verification=built.verification,
                     block=block_for(iteration_ms, cfg.bench.block_ms), iteration_ms=iteration_ms,
                     threads=torch.get_num_threads(), clock=clock.name, malloc=built.malloc,
                     setup_s=built.setup_s, verify_s=built.verify_s, warmup_s=t3 - t2,
                     start=start_of(p, workload, built.build_s))

    def round(self, n: int, block: int) -> Round:
        """`n` timed samples of `block` iterations each (the scheduler gives every process
        the first one's block size)."""
        assert self._timer is not None, "setup() first"
        with self.p.backend.context():
            t0 = time.perf_counter()
            samples = self._timer.run(n, block=block)
            seconds = time.perf_counter() - t0
            if not self._recompiled:  # after the samples, untimed
                self._recompiled = self.p.backend.timed_changes(self._workload)
        return Round(samples, seconds)

    def finish(self) -> Finished:
        """Inside the backend's context: the peak memory and the profile (after timing, never
        during; the verifying process only), what actually ran, and whether a round found
        anything compiled while timed."""
        p, workload = self.p, self._workload
        try:
            with p.backend.context():
                return self._finish(p, workload)
        finally:
            self.close()

    def _finish(self, p: job.Plan, workload) -> Finished:
        profile, memory = None, None
        if workload is not None:
            if p.cfg.bench.memory and self.verify_model:
                memory = phase_memory.measure(workload, p.device, p.cfg.bench.backward)
            if p.cfg.bench.profile and self.verify_model:
                profile = profiling.record(workload, p.device, p.cfg.bench.profile_iters,
                                           p.output_dir or Path.cwd())
            p.backend.finish(workload)
        return Finished(backend=p.backend.info(), recompiled=self._recompiled, profile=profile,
                        memory=memory)

    def close(self) -> None:
        self._workload = self._timer = self._built = None


def counting() -> bool:
    """This process is a counting worker: started under Callgrind with a dump prefix."""
    return callgrind.OUT_ENV in os.environ and callgrind.running()


def start_of(p: job.Plan, workload, build_s: float) -> CompileCost:
    """What this process paid before its first result: the build, the compiler's own
    account, and every untimed call the backend made (the first one's wall apart)."""
    calls = list(p.backend.untimed_ms)
    return CompileCost(compiles=p.backend.compiles(workload), build_s=build_s,
                       compile_s=p.backend.compile_seconds(workload),
                       first_call_ms=calls[0] if calls else None, untimed_calls_ms=calls)
