"""One timing job per device: where each job of a parallel sweep runs.

Jobs that run side by side on one machine must not share what they time on. On a multi-GPU
node each job takes its own GPU (`device.index` = job number modulo the visible GPUs, and a
lock per GPU so that a job never starts on a GPU another job of the sweep still holds). On
the CPU the jobs that run at once divide the cores (`bench.num_threads` = cores // parallel
jobs), and the value a job ran with is in its results. Values set explicitly on the command
line or in a preset are kept. Decisions are pure functions of plain numbers, so they are
tested for machines this one is not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from omegaconf import OmegaConf

from rnnexp.config.schema import Config, DeviceKind
from rnnexp.machine import platform

# The GPUs this machine shows, for launcher configs: submitit's local executor hides every GPU
# it is not told about (submitit/local/local.py start_controller sets CUDA_VISIBLE_DEVICES to
# the first gpus_per_node, "" for none), so conf/hydra/launcher/rnnexp_local.yaml gives each
# job all of them and placement gives each job its own.
OmegaConf.register_new_resolver("rnnexp_gpus", lambda: platform.current().gpu_count,
                                replace=True)


@dataclass(frozen=True)
class Launch:
    """How a sweep's jobs run: `parallel` jobs at once on one machine."""

    launcher: str  # basic, joblib, submitit_local, submitit_slurm or the launcher's class
    parallel: int = 1
    # Cores a cluster allocates to each job (submitit_slurm cpus_per_task).
    cpus_per_task: Optional[int] = None


def launch_of(launcher: Mapping[str, Any], jobs: int, cores: int) -> Launch:
    """The launch a Hydra launcher config (`hydra.launcher`) makes of a sweep of `jobs` jobs."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("JoblibLauncher"):
        n = int(launcher.get("n_jobs") or 1)
        n = n if n > 0 else max(1, cores + 1 + n)  # joblib: -1 is every core, -2 all but one
        return Launch("joblib", max(1, min(n, jobs) if jobs > 0 else n))
    if target.endswith("submitit_launcher.LocalLauncher"):
        # submitit's local executor starts every job of the sweep at once.
        return Launch("submitit_local", max(1, jobs), launcher.get("cpus_per_task"))
    if target.endswith(("submitit_launcher.SlurmLauncher", "RnnexpSlurmLauncher")):
        # Each job its own allocation: nothing shared but the node's other tenants.
        return Launch("submitit_slurm", 1, launcher.get("cpus_per_task"))
    if target.endswith(("BasicLauncher", "RnnexpLauncher")) or not target:
        return Launch("basic")  # one job's timing at a time
    return Launch(target.rsplit(".", 1)[-1])


@dataclass(frozen=True)
class Placement:
    device_index: Optional[int] = None  # None: as configured
    num_threads: Optional[int] = None  # None: as configured


def explicit(overrides: Sequence[str], key: str) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


def place(job_num: int, launch: Launch, device: DeviceKind, *, gpus: int, cores: int,
          index_set: bool, threads_set: bool) -> Placement:
    """Where job `job_num` runs. `gpus`/`cores`: what this machine shows the job."""
    if on_gpu(device, gpus):
        if launch.parallel > 1 and gpus > 1 and not index_set:
            return Placement(device_index=job_num % gpus)
        return Placement()
    if threads_set:
        return Placement()
    if launch.cpus_per_task:  # the cluster gave the job these cores
        return Placement(num_threads=launch.cpus_per_task)
    if launch.parallel > 1:
        return Placement(num_threads=max(1, cores // launch.parallel))
    return Placement()


def oversubscription(launch: Launch, device: DeviceKind, *, gpus: int, cores: int,
                     threads: Optional[int] = None) -> str:
    """One line when a parallel sweep would time jobs on shared hardware, else ""."""
    if launch.parallel <= 1:
        return ""
    if on_gpu(device, gpus):
        if launch.parallel > gpus:
            return (f"{launch.parallel} parallel jobs on {gpus} GPU(s): jobs wait for a free "
                    f"GPU (one timing job per GPU) — use at most {gpus} parallel jobs")
        return ""
    per_job = threads or 1
    if launch.parallel * per_job > cores:
        what = f"{launch.parallel} parallel jobs" + (f" × {threads} threads" if threads else "")
        fit = max(1, cores // per_job)
        how = (f"hydra.launcher.n_jobs={fit}" if launch.launcher == "joblib"
               else f"hydra/launcher=joblib hydra.launcher.n_jobs={fit}")
        return (f"{what} oversubscribe {cores} CPU core(s): their timings disturb each other — "
                f"use at most {fit} parallel jobs ({how}) or the basic launcher")
    return ""


def apply(cfg: Config, placement: Placement) -> Config:
    """The config with the placement's choices in it (what the job runs and records)."""
    if placement.device_index is not None:
        cfg = dataclasses.replace(cfg, device=dataclasses.replace(
            cfg.device, index=placement.device_index))
    if placement.num_threads is not None:
        cfg = dataclasses.replace(cfg, bench=dataclasses.replace(
            cfg.bench, num_threads=placement.num_threads))
    return cfg


def for_job(cfg: Config, job_num: int, launch: Launch, overrides: Sequence[str], gpus: int,
            cores: int) -> Config:
    """The config job `job_num` of the sweep runs with."""
    threads_set = cfg.bench.num_threads is not None or explicit(overrides, "bench.num_threads")
    return apply(cfg, place(job_num, launch, cfg.device.kind, gpus=gpus, cores=cores,
                            index_set=explicit(overrides, "device.index"),
                            threads_set=threads_set))


def in_sweep(cfg: Config, job_num: int, launcher: Mapping[str, Any], sweep_jobs: int,
             sweep_dir: Path, overrides: Sequence[str]
             ) -> tuple[Config, contextlib.AbstractContextManager]:
    """A sweep job's config on this machine, and the device lock to hold while it runs."""
    cores, gpus = visible_cores(), platform.current().gpu_count
    launch = launch_of(launcher, sweep_jobs, cores)
    cfg = for_job(cfg, job_num, launch, overrides, gpus, cores)
    return cfg, device_lock(cfg, launch, sweep_dir, gpus)


def visible_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def on_gpu(device: DeviceKind, gpus: int) -> bool:
    return device is DeviceKind.cuda or (device is DeviceKind.auto and gpus > 0)


def device_lock(cfg: Config, launch: Launch, sweep_dir: Path, gpus: int
                ) -> contextlib.AbstractContextManager:
    """Held while a parallel sweep's job runs on a GPU: one timing job per GPU."""
    if launch.parallel > 1 and on_gpu(cfg.device.kind, gpus):
        return GpuLock(sweep_dir, cfg.device.index)
    return contextlib.nullcontext()


class GpuLock:
    """Holds GPU `index` for this sweep while the job runs: a job whose GPU is still held by
    another job of the sweep (a fast job ahead of a slow one) waits for it."""

    def __init__(self, sweep_dir: Path, index: int):
        self.path = Path(sweep_dir) / ".placement" / f"gpu{index}.lock"
        self._file = None

    def __enter__(self) -> GpuLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w")  # held open while the job runs
        fcntl.flock(self._file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
