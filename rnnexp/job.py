"""A job's plan: `plan` resolves the device and backend and checks that the combination can
run — it builds nothing and times nothing, so every refusal comes before any timing (the
support matrix uses the same function). rnnexp.execution then measures the plan; its
processes build the workload with `build_workload`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from rnnexp import memory, targets, verify
from rnnexp import platform as platform_mod
from rnnexp.backends.base import Backend
from rnnexp.device import check_model_placement, resolve_device, torch_dtype
from rnnexp.schema import Config
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
    workload = targets.call("model.build", cfg.model.build, spec)
    if spec.reference_math:  # decided at plan time (verify.reference_plan)
        workload.reference_math = spec.reference_math
        workload.verify_note = "; ".join(filter(None, [workload.verify_note,
                                                       spec.reference_note]))
    return workload


def plan(cfg: Config, choices: dict[str, str], overrides: list[str] = (),
         plat: Optional[platform_mod.Platform] = None) -> Plan:
    """Everything decided before timing; raises UnsupportedError/ConfigError with a reason."""
    plat = plat or platform_mod.current()
    device = resolve_device(cfg.device, plat)
    check_model_placement(choices.get("model", "?"), cfg.model, device, cfg.dtype, plat)
    backend = make_backend(cfg, plat, device)
    backend.check(choices.get("model", "?"), cfg.model)
    # Every process the scheduler may start for this configuration is alive at once.
    memory.check(cfg, device, varlen="varlen" in str(targets.target_of(cfg.model.build)),
                 processes=memory.processes_at_once(cfg.bench))
    dtype = torch_dtype(cfg.dtype)
    # A half-precision reference the CPU would take too long over is emulated in float32.
    reference_math, reference_note = verify.reference_plan(cfg, dtype)
    spec = WorkloadSpec(shape=cfg.shape, device=device, dtype=dtype,
                        seed=cfg.seed, script=backend.script(cfg.model),
                        requires_grad=cfg.bench.backward, reference_math=reference_math,
                        reference_note=reference_note)
    return Plan(cfg, dict(choices), list(overrides), plat, device, backend, spec)


def plain_config(cfg: Any) -> dict[str, Any]:
    node = cfg if OmegaConf.is_config(cfg) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
