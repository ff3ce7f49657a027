"""One job from its plan (rnnexp.measure.job) to its Result: `run` measures it — built, verified and
timed in one or more processes, a window of one (rnnexp.run.interleave) — with the drift between the
configuration's earlier runs (rnnexp.run.drift) in its interval; `not_run` is the record of a job
that was declined, crashed or was interrupted."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import torch

from rnnexp.config.schema import Config
from rnnexp.errors import Interrupted, JobCrashed, RnnexpError, crash_line, signal_name
from rnnexp.machine import environment, memory
from rnnexp.machine import platform as platform_mod
from rnnexp.machine.device import device_name
from rnnexp.measure import callgrind, job
from rnnexp.measure.records import Verification
from rnnexp.measure.timing import Progress
from rnnexp.results.identity import MeasurementKey
from rnnexp.results.result import (
    CRASHED,
    INTERRUPTED,
    INVALID,
    OK,
    RECOMPILED,
    UNSUPPORTED,
    BackendInfo,
    CountStats,
    Instructions,
    PhaseStats,
    Result,
    TimingInfo,
    phase_stats,
    without_rates,
)
from rnnexp.run import drift, interleave, roofline, schedule


@dataclass
class History:
    """A configuration's earlier runs on this machine (rnnexp.run.drift): how far its median moves
    between runs, which the interval and the stopping rule include."""

    key: dict
    drift: drift.Drift
    commit: str
    device_name: str

    @classmethod
    def of(cls, p: job.Plan) -> History:
        cfg = p.cfg
        name, commit = device_name(p.device, p.plat), platform_mod.git_commit()
        measurement = MeasurementKey.of_config(job.plain_config(cfg), p.plat.torch_version,
                                               commit)
        key = drift.history_key(measurement, name,
                                cfg.bench.num_threads or torch.get_num_threads())
        return cls(key, drift.earlier(key) if cfg.bench.drift else drift.UNKNOWN, commit, name)

    def add(self, cfg: Config, status: str, env: environment.Environment,
            phases: dict[str, PhaseStats]) -> None:
        """A valid run on a machine not flagged busy joins the history the next run's
        interval uses."""
        if cfg.bench.drift and status == OK and environment.BUSY not in env.flags:
            drift.record(self.key, {name: phase.median_ms for name, phase in phases.items()
                                    if phase.timed})


def execute(p: job.Plan, progress: Optional[Progress] = None) -> Result:
    """Measure the planned job in its process(es) (a window of one, rnnexp.run.interleave)
    and make its Result."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    history = History.of(p)
    m = interleave.measure(p, progress, history.drift)
    return conclude(p, m, history, started, time.perf_counter() - t0)


def conclude(p: job.Plan, m: schedule.Measured, history: History, started: datetime,
             duration_s: float) -> Result:
    """The Result of a measured job (statistics, flags, status), which joins the
    configuration's history when it is a valid run on a machine not flagged busy."""
    cfg, ready, env = p.cfg, m.ready, m.environment
    verification = ready.verification or Verification("skipped", detail="not verified")
    phases = phase_stats(m.pooled(), ready.work, ready.no_backward_reason,
                         per_process=m.per_process, drift=history.drift.spreads,
                         drift_runs=history.drift.runs)
    assess(env, history.drift, phases, p.device)
    status, reason = status_of(verification, m.recompiled)
    result = Result(
        choices=p.choices,
        overrides=p.overrides,
        config=job.plain_config(cfg),
        status=status,
        reason=reason,
        device=str(p.device),
        device_name=history.device_name,
        dtype=cfg.dtype.value,
        backend=BackendInfo.from_json(m.backend),
        verification=verification,
        work=ready.work,
        # Samples and statistics stay for diagnosis; rates only for a valid timing.
        phases=phases if status == OK else without_rates(phases),
        platform=ready.platform or p.plat,
        # Under bench.python the worker's checkout is the code measured.
        git_commit=history.commit if ready.git_commit is None else ready.git_commit,
        timing=timing_info(cfg, m),
        environment=env,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=duration_s,
        profile=m.profile,
        interleaving=m.interleaving,
        memory=m.memory,
    )
    result.instructions = instructions_of(m, phases)
    if ready.start is not None:  # steady: the median the timed samples give
        result.compile_cost = dataclasses.replace(ready.start,
                                                  steady_ms=result.rate_phase.median_ms)
    history.add(cfg, status, env, phases)
    return result


def instructions_of(m: schedule.Measured, phases: dict[str, PhaseStats]
                    ) -> Optional[Instructions]:
    """bench.metric=instructions: each phase's counts, with the time's median beside them
    (the calibration: ns per instruction) and the pinning both ran under."""
    if not m.counts:
        return None
    per = {"forward": [s.forward_ms for s in m.counts]}
    if all(s.backward_ms for s in m.counts):
        per["backward"] = [s.backward_ms for s in m.counts]
        per["total"] = [s.total_ms for s in m.counts]
    return Instructions(
        phases={name: CountStats.of(values, phases[name].median_ms if name in phases else None)
                for name, values in per.items()},
        env=dict(callgrind.COUNTING_ENV), count_s=m.count_s)


def assess(env: environment.Environment, runs_drift: drift.Drift,
           phases: dict[str, PhaseStats], device: torch.device) -> None:
    """The machine's flags, with the drift between runs the interval included."""
    env.drift, env.drift_runs, env.drift_hours, env.drift_from = \
        runs_drift.spread, runs_drift.runs, round(runs_drift.hours, 2), runs_drift.source
    environment.assess(env, environment.spreads_of(phases), device)


def status_of(verification: Verification, recompiled: str) -> tuple[str, str]:
    """(status, reason): a failed verification first, then a recompilation while timed."""
    if not verification.ok:
        return INVALID, f"verification failed: {verification.detail}"
    if recompiled:
        return RECOMPILED, recompiled
    return OK, ""


def timing_info(cfg: Config, m: schedule.Measured) -> TimingInfo:
    """How the samples were taken and where the seconds went."""
    ready = m.ready
    return TimingInfo(clock=ready.clock, warmup=cfg.bench.warmup, iters=cfg.bench.iters,
                      timed_iters=sum(len(s.forward_ms) for s in m.per_process),
                      precision=cfg.bench.precision, threads=ready.threads,
                      block=ready.block, processes=len(m.per_process), stopped=m.stopped,
                      budget_s=cfg.bench.budget_s, interleaved=m.interleaving is not None,
                      measure_s=m.wall_s, setup_s=m.setup_s, verify_s=ready.verify_s,
                      warmup_s=m.warmup_s, timed_s=m.timed_s)


def with_roofline(cfg: Config, result: Result) -> Result:
    """After timing, in this process: never inside a timed region."""
    if cfg.bench.roofline:
        result.roofline = roofline.of_result(result)
    return result


def run(cfg: Config, choices: dict[str, str], overrides: list[str],
        progress: Optional[Progress] = None, output_dir: Optional[Path] = None,
        planned: Optional[job.Plan] = None) -> Result:
    """Raises RnnexpError (one line) when the job is refused before timing, JobCrashed (one
    line) when it crashes. `planned`: the job's plan, if made already."""
    planned = planned or job.plan(cfg, choices, overrides)
    planned.output_dir = output_dir
    try:
        result = execute(planned, progress=progress)
    except RnnexpError:
        raise
    except Exception as err:  # one line for the record; an out-of-memory names the shape
        raise JobCrashed(memory.crash_line(cfg.shape, err)) from err
    return with_roofline(cfg, result)


def not_run(cfg: Config, choices: dict[str, str], overrides: list[str],
            err: BaseException) -> Result:
    """The record of a job that was declined, crashed or interrupted."""
    if isinstance(err, KeyboardInterrupt):
        # Ctrl-C, or the scheduler's signal (rnnexp.run.signals.Killed) with its reason
        status, reason = INTERRUPTED, str(err) or "interrupted (SIGINT)"
    elif isinstance(err, Interrupted):
        status, reason = INTERRUPTED, f"interrupted ({signal_name(err.signum)})"
    elif isinstance(err, RnnexpError) and not isinstance(err, JobCrashed):
        status, reason = UNSUPPORTED, str(err)
    elif isinstance(err, JobCrashed):
        status, reason = CRASHED, str(err)
    else:
        status, reason = CRASHED, crash_line(err)
    return Result(choices=dict(choices), overrides=list(overrides),
                  config=job.plain_config(cfg), status=status, reason=reason,
                  platform=platform_mod.current(), git_commit=platform_mod.git_commit())
