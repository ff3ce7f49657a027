"""One job in two steps.

`plan` resolves the device and backend and checks that the combination can run — it builds
nothing and times nothing, so every refusal comes before any timing (the support matrix uses
the same function). `execute` measures it — build, verify, time, in one or more processes
(rnnexp.schedule) — and summarises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from rnnexp import drift, environment, memory, targets
from rnnexp import platform as platform_mod
from rnnexp.backends.base import Backend
from rnnexp.device import check_model_placement, device_name, resolve_device, torch_dtype
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
from rnnexp.schema import Config
from rnnexp.timing import Progress
from rnnexp.verify import Verification
from rnnexp.workload import Workload, WorkloadSpec


@dataclass
class Plan:
    cfg: Config
    choices: dict[str, str]
    overrides: list[str]
    plat: platform_mod.Platform
    device: torch.device
    backend: Backend
    spec: WorkloadSpec
    # The job's folder: where a profile's trace is written (bench.profile).
    output_dir: Optional[Path] = None


def make_backend(cfg: Config, plat: platform_mod.Platform, device: torch.device) -> Backend:
    return targets.call("backend", cfg.backend, plat=plat, device=device,
                        dtype=torch_dtype(cfg.dtype))


def build_workload(cfg: Config, spec: WorkloadSpec) -> Workload:
    return targets.call("model.build", cfg.model.build, spec)


def plan(cfg: Config, choices: dict[str, str], overrides: list[str] = (),
         plat: Optional[platform_mod.Platform] = None) -> Plan:
    """Everything decided before timing; raises UnsupportedError/ConfigError with a reason."""
    plat = plat or platform_mod.current()
    device = resolve_device(cfg.device, plat)
    check_model_placement(choices.get("model", "?"), cfg.model, device, cfg.dtype, plat)
    backend = make_backend(cfg, plat, device)
    backend.check(choices.get("model", "?"), cfg.model)
    memory.check(cfg, device, varlen="varlen" in str(targets.target_of(cfg.model.build)))
    spec = WorkloadSpec(shape=cfg.shape, device=device, dtype=torch_dtype(cfg.dtype),
                        seed=cfg.seed, script=backend.script(cfg.model),
                        requires_grad=cfg.bench.backward)
    return Plan(cfg, dict(choices), list(overrides), plat, device, backend, spec)


def execute(p: Plan, progress: Optional[Progress] = None) -> Result:
    """Measure the planned job in its process(es) (rnnexp.schedule) and make its Result."""
    from rnnexp import schedule  # schedule imports this module

    cfg = p.cfg
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    # This configuration's earlier runs here: how far its median moves between runs.
    config = plain_config(cfg)
    runs_key = drift.measurement(config, device_name(p.device, p.plat),
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
        device_name=device_name(p.device, p.plat),
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


def plain_config(cfg: Any) -> dict[str, Any]:
    node = cfg if OmegaConf.is_config(cfg) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
