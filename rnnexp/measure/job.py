"""A job's plan: `plan` resolves the device and backend and checks that the combination can
run — it builds nothing and times nothing, so every refusal comes before any timing (the
support matrix uses the same function). rnnexp.run.execution then measures the plan; its
processes build the workload with `build_workload`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from rnnexp.backends.base import Backend
from rnnexp.config import kernel_plugins, targets
from rnnexp.config.schema import Config, Metric
from rnnexp.errors import ConfigError
from rnnexp.machine import memory
from rnnexp.machine import platform as platform_mod
from rnnexp.machine.device import check_model_placement, resolve_device, torch_dtype
from rnnexp.measure import callgrind, verify
from rnnexp.models import plugin
from rnnexp.models.workload import Workload, WorkloadSpec


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
    kernel = kernel_plugins.of_model(cfg.model.build)
    if kernel is not None:  # a plugin's kernel, given what the built-ins are given
        targets.bind("model.build", cfg.model.build, *kernel_plugins.factory_args(
            cfg.model.build))
        workload = plugin.build(kernel, spec, targets.options_of(cfg.model.build))
    else:
        workload = targets.call("model.build", cfg.model.build, spec)
    if spec.reference_math:  # decided at plan time (verify.reference_plan)
        workload.reference_math = spec.reference_math
        workload.verify_note = "; ".join(filter(None, [workload.verify_note,
                                                       spec.reference_note]))
    return workload


def foreign(python: Optional[str]) -> bool:
    """`python` (bench.python) is another interpreter than this process's."""
    if not python:
        return False
    # Not resolved: a venv's python is a link to the base interpreter, yet its own
    # environment (the pyvenv.cfg beside it).
    return os.path.abspath(python) != os.path.abspath(sys.executable)


@functools.cache
def check_python(python: str) -> str:
    """The torch version of another interpreter (bench.python) that can run rnnexp's
    workers; ConfigError in one line when it cannot."""
    hint = "a Python interpreter of an environment with rnnexp installed, e.g. " \
           "/path/to/checkout/.venv/bin/python"
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise ConfigError("bench.python", f"{python} is not an executable file", hint)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        probe = subprocess.run([python, "-c", "import rnnexp.measure.isolation, torch; "
                                "print(torch.__version__)"], capture_output=True, text=True,
                               cwd=tempfile.gettempdir(), env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError("bench.python", f"{python} did not start ({err})", hint) from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError("bench.python", f"{python} cannot import rnnexp and torch "
                          f"({last})", hint)
    return probe.stdout.strip()


def varlen(cfg: Config) -> bool:
    """The model takes sequences of varying length (its memory holds the longest)."""
    return "varlen" in str(targets.target_of(cfg.model.build))


def plan(cfg: Config, choices: dict[str, str], overrides: list[str] = (),
         plat: Optional[platform_mod.Platform] = None) -> Plan:
    """Everything decided before timing; raises UnsupportedError/ConfigError with a reason."""
    plat = plat or platform_mod.current()
    if foreign(cfg.bench.python):
        check_python(str(cfg.bench.python))
    device = resolve_device(cfg.device, plat)
    if cfg.bench.metric == Metric.instructions:
        check_counting(device)
    check_model_placement(choices.get("model", "?"), cfg.model, device, cfg.dtype, plat)
    backend = make_backend(cfg, plat, device)
    kernel = kernel_plugins.of_model(cfg.model.build)
    if kernel is not None:  # what its plugin declares, before the backend's own checks
        kernel.check(choices.get("model", "?"), device.type, backend.name, cfg.dtype.value)
    backend.check(choices.get("model", "?"), cfg.model)
    # Every process the scheduler may start for this configuration is alive at once.
    memory.check(cfg, device, varlen=varlen(cfg),
                 processes=memory.processes_at_once(cfg.bench))
    dtype = torch_dtype(cfg.dtype)
    # A half-precision reference the CPU would take too long over is emulated in float32.
    reference_math, reference_note = verify.reference_plan(cfg, dtype)
    spec = WorkloadSpec(shape=cfg.shape, device=device, dtype=dtype,
                        seed=cfg.seed, script=backend.script(cfg.model),
                        requires_grad=cfg.bench.backward, reference_math=reference_math,
                        reference_note=reference_note)
    return Plan(cfg, dict(choices), list(overrides), plat, device, backend, spec)


def check_counting(device: Any) -> None:
    """bench.metric=instructions counts the host's instructions, under Valgrind."""
    if device.type != "cpu":
        raise ConfigError("bench.metric", f"instructions counts a CPU's instructions; this job "
                          f"runs on {device.type}", "device=cpu, or bench.metric=time")
    callgrind.check()


def plain_config(cfg: Any) -> dict[str, Any]:
    node = cfg if OmegaConf.is_config(cfg) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
