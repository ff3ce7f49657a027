"""One job in two steps.

`plan` resolves the device and backend and checks that the combination can run — it builds
nothing and times nothing, so every refusal comes before any timing (the support matrix uses
the same function). `execute` builds the model, verifies it, times it and summarises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from omegaconf import OmegaConf

from rnnexp import environment, memory, profiling, stats, targets
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
from rnnexp.schema import BenchConfig, Config
from rnnexp.timing import Progress, Samples, clock_for, measure
from rnnexp.verify import Verification, verify
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
    cfg, spec = p.cfg, p.spec
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    if cfg.bench.num_threads:
        torch.set_num_threads(cfg.bench.num_threads)
    with p.backend.context():
        # Building (scripting, compiling) and verifying can take long: show them as phases.
        _step(progress, "build")
        workload = p.backend.prepare(build_workload(cfg, spec))
        _step(progress, "build", done=True)
        if cfg.bench.verify:
            _step(progress, "verify")
            verification = verify(workload, spec.dtype, backward=cfg.bench.backward)
            _step(progress, "verify", done=True)
        else:
            verification = Verification("skipped", detail="bench.verify=false")
        env = environment.machine(p.plat.cpu_name)
        env.quiet = cfg.bench.quiet.value
        # Other processes are looked at right before timing (and waited for, or refused,
        # as bench.quiet says) and right after.
        env.before, env.waited_s = environment.settle(cfg.bench.quiet.value,
                                                      cfg.bench.quiet_timeout_s, progress)
        clock = clock_for(p.device)
        samples = measure(workload, warmup=cfg.bench.warmup, iters=cfg.bench.iters, clock=clock,
                          backward=cfg.bench.backward, progress=progress,
                          done=precision_target(cfg.bench),
                          on_timed_start=lambda: p.backend.timed_start(workload))
        recompiled = p.backend.timed_changes(workload)
        profile = None
        if cfg.bench.profile:  # after timing, never during
            _step(progress, "profile")
            profile = profiling.record(workload, p.device, cfg.bench.profile_iters,
                                       p.output_dir or Path.cwd())
            _step(progress, "profile", done=True)
        p.backend.finish(workload)
        env.after = environment.look()
        env.gpu = environment.gpu_state(p.device)

    no_backward = workload.no_backward_reason or ("" if cfg.bench.backward
                                                   else "bench.backward=false")
    phases = phase_stats(samples, workload.work, no_backward)
    environment.assess(env, environment.spreads_of(phases), p.device)
    if not verification.ok:
        status, reason = INVALID, f"verification failed: {verification.detail}"
    elif recompiled:
        status, reason = RECOMPILED, recompiled
    else:
        status, reason = OK, ""
    return Result(
        choices=p.choices,
        overrides=p.overrides,
        config=plain_config(cfg),
        status=status,
        reason=reason,
        device=str(p.device),
        device_name=device_name(p.device, p.plat),
        dtype=cfg.dtype.value,
        backend=BackendInfo.from_json(p.backend.info()),
        verification=verification,
        work=workload.work,
        # Samples and statistics stay for diagnosis; rates only for a valid timing.
        phases=phases if status == OK else without_rates(phases),
        platform=p.plat,
        timing=TimingInfo(clock=clock.name, warmup=cfg.bench.warmup, iters=cfg.bench.iters,
                          timed_iters=len(samples.forward_ms),
                          precision=cfg.bench.precision, threads=torch.get_num_threads()),
        environment=env,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - t0,
        profile=profile,
    )


def precision_target(bench: BenchConfig) -> Optional[Callable[[Samples], bool]]:
    """`bench.precision` as a stopping rule for the timer (None: a fixed count)."""
    if bench.precision is None:
        return None

    def done(samples: Samples) -> bool:
        return (len(samples.forward_ms) >= bench.min_iters
                and stats.precise_enough(samples.total_ms, bench.precision))

    return done


def _step(progress: Optional[Progress], name: str, done: bool = False) -> None:
    """A one-step progress phase around work that is not iterations."""
    if progress is None:
        return
    if done:
        progress.advance()
    else:
        progress.phase(name, 1)


def plain_config(cfg: Any) -> dict[str, Any]:
    node = cfg if OmegaConf.is_config(cfg) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
