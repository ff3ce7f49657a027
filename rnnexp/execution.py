"""A planned job (rnnexp.job) measured — built, verified and timed in one or more processes
(rnnexp.schedule) — and summarised in its Result, with the drift between the
configuration's earlier runs (rnnexp.drift) in its interval."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Optional

import torch

from rnnexp import drift, environment, job, schedule
from rnnexp import platform as platform_mod
from rnnexp.device import device_name
from rnnexp.results import (
    INVALID,
    OK,
    RECOMPILED,
    BackendInfo,
    Result,
    TimingInfo,
    phase_stats,
    without_rates,
)
from rnnexp.timing import Progress
from rnnexp.verify import Verification


def execute(p: job.Plan, progress: Optional[Progress] = None) -> Result:
    """Measure the planned job in its process(es) (rnnexp.schedule) and make its Result."""
    cfg = p.cfg
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    # This configuration's earlier runs here: how far its median moves between runs.
    config, name = job.plain_config(cfg), device_name(p.device, p.plat)
    runs_key = drift.measurement(config, name,
                                 cfg.bench.num_threads or torch.get_num_threads(),
                                 p.plat.torch_version, platform_mod.git_commit())
    runs_drift = drift.earlier(runs_key) if cfg.bench.drift else drift.UNKNOWN
    m = schedule.measure(p, progress, runs_drift)
    ready, env = m.ready, m.environment
    verification = ready.verification or Verification("skipped", detail="not verified")
    phases = phase_stats(m.pooled(), ready.work, ready.no_backward_reason,
                         per_process=m.per_process, drift=runs_drift.spreads,
                         drift_runs=runs_drift.runs)
    env.drift, env.drift_runs, env.drift_hours, env.drift_from = \
        runs_drift.spread, runs_drift.runs, round(runs_drift.hours, 2), runs_drift.source
    environment.assess(env, environment.spreads_of(phases), p.device)
    if not verification.ok:
        status, reason = INVALID, f"verification failed: {verification.detail}"
    elif m.recompiled:
        status, reason = RECOMPILED, m.recompiled
    else:
        status, reason = OK, ""
    result = Result(
        choices=p.choices,
        overrides=p.overrides,
        config=config,
        status=status,
        reason=reason,
        device=str(p.device),
        device_name=name,
        dtype=cfg.dtype.value,
        backend=BackendInfo.from_json(m.backend),
        verification=verification,
        work=ready.work,
        # Samples and statistics stay for diagnosis; rates only for a valid timing.
        phases=phases if status == OK else without_rates(phases),
        platform=p.plat,
        timing=TimingInfo(clock=ready.clock, warmup=cfg.bench.warmup, iters=cfg.bench.iters,
                          timed_iters=sum(len(s.forward_ms) for s in m.per_process),
                          precision=cfg.bench.precision, threads=ready.threads,
                          block=ready.block, processes=len(m.per_process), stopped=m.stopped,
                          budget_s=cfg.bench.budget_s, measure_s=m.wall_s, setup_s=m.setup_s,
                          verify_s=ready.verify_s, warmup_s=m.warmup_s, timed_s=m.timed_s),
        environment=env,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - t0,
        profile=m.profile,
    )
    # A valid run on a machine not flagged busy joins the history the next run's interval uses.
    if cfg.bench.drift and status == OK and environment.BUSY not in env.flags:
        drift.record(runs_key, {name: phase.median_ms for name, phase in phases.items()
                                if phase.timed})
    return result
