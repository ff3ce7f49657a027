"""Hydra callback for sweeps (`-m`): tells the configured sinks that a sweep starts and ends,
and decides, once for all jobs, what they share: how the machine is divided between parallel
jobs (rnnexp.placement) and, with `resume=true`, which jobs already ran (rnnexp.resume).

Registered in conf/config.yaml under hydra.callbacks. The multirun events run in the
launching process, before any job is submitted, and it exits with the status the sweep's
end decides; jobs (in that process with the basic launcher, in workers with joblib, in their
own processes or cluster nodes with submitit) read the `Sweep` — with what each sink keeps
for them — from the sweep folder, which works for every launcher that shares the filesystem
and leaves no state behind in the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rnnexp import (
    config_check,
    exit_codes,
    job,
    placement,
    platform,
    recording,
    resume,
    run_dir,
    stopping,
)
from rnnexp import sinks as sinks_mod
from rnnexp.report import err_console, print_error
from rnnexp.results import FAILED_STATUSES, Result

# The sweep this process is running, from its start to its end: a signal that arrives
# outside any job (between jobs, in Hydra's own code) still ends its parent run.
_active: list[tuple[list[sinks_mod.Sink], sinks_mod.Sweep]] = []


# The override list of each job of that sweep, by job number.
_job_overrides: list[list[str]] = []


def abort_active(result: Result) -> None:
    """The running sweep (if any) was cut short, with `result`'s status: its job processes
    end (rnnexp.stopping), the jobs that started and left no result are recorded with that
    status, and the sinks are told (the parent run ends)."""
    while _active:
        targets, sweep = _active.pop()
        stopping.end_jobs()
        for folder in recording.started_without_result(sweep.path):
            unfinished = unfinished_job(folder, result)
            if unfinished is not None:
                recording.publish(targets, unfinished, folder, sweep)
        for sink in targets:
            sink.on_abort(sweep, result)


def unfinished_job(folder: Path, ended: Result) -> Optional[Result]:
    """The record of the job in `folder`, ended with the sweep before it had a result."""
    saved = folder / ".hydra" / "overrides.yaml"
    if saved.is_file():
        overrides = [str(o) for o in OmegaConf.load(saved)]
    elif folder.name.isdigit() and int(folder.name) < len(_job_overrides):
        overrides = _job_overrides[int(folder.name)]
    else:
        return None
    config = config_check.validated(overrides)
    if config is None:
        return None
    base = config_check.choices(_job_overrides[0]) if _job_overrides else None
    choices = dict(base or {})
    for text in overrides:  # this job's own group choices
        key, sep, value = text.partition("=")
        if sep and key.lstrip("+") in choices:
            choices[key.lstrip("+")] = value
    return Result(choices=choices, overrides=overrides, config=job.plain_config(config),
                  status=ended.status, reason=f"{ended.reason} — the job was ended with "
                  "its sweep", platform=platform.current(), git_commit=platform.git_commit())


def sinks_of(config: DictConfig) -> list[sinks_mod.Sink]:
    return sinks_mod.build(OmegaConf.to_container(config.sinks, resolve=True))


def job_configs(config: DictConfig) -> list:
    """The typed configs of the sweep's jobs in job order, as the CLI checked them (empty if
    the sweep was not started through `python -m rnnexp`)."""
    jobs = config_check.expand_jobs(list(config.hydra.overrides.task), True,
                                    config_check.sweep_params(config))
    configs = [config_check.validated(j) for j in jobs]
    return configs if all(c is not None for c in configs) else []


def plan_sweep(sweep: sinks_mod.Sweep, config: DictConfig) -> None:
    """Placement warning and resume decisions, in one line each."""
    configs = job_configs(config)
    sweep.jobs = len(configs)
    if not configs:
        return
    launcher = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    plat, cores = platform.current(), placement.visible_cores()
    launch = placement.launch_of(launcher, len(configs), cores)
    warning = placement.oversubscription(launch, configs[0].device.kind, gpus=plat.gpu_count,
                                         cores=cores, threads=configs[0].bench.num_threads)
    if warning:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if not configs[0].resume:
        return
    jobs = config_check.expand_jobs(list(config.hydra.overrides.task), True,
                                    config_check.sweep_params(config))
    placed = [placement.for_job(c, num, launch, jobs[num], plat.gpu_count, cores)
              for num, c in enumerate(configs)]
    sweep.skip_jobs = resume.finished_jobs(sweep.path, [job.plain_config(c) for c in placed],
                                           platform.git_commit(), plat.torch_version)
    skip, n = len(sweep.skip_jobs), len(configs)
    err_console.print(f"resume: {skip} of {n} jobs already measured in {sweep.dir} — "
                      f"skipping them, running {n - skip}", highlight=False, markup=False)


class SweepCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir.claim_run(config)  # two runs started in the same second: two folders

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("resume"):  # a resumed sweep goes on in the folder it names
            run_dir.claim_sweep(config)
        folder = Path(str(config.hydra.sweep.dir))
        # A resumed sweep keeps its identity (and its MLflow parent run).
        sweep = (sinks_mod.Sweep.load(folder) if config.get("resume") else None) or \
            sinks_mod.Sweep.start(folder, list(config.hydra.overrides.task))
        plan_sweep(sweep, config)
        _job_overrides[:] = config_check.expand_jobs(list(config.hydra.overrides.task), True,
                                                     config_check.sweep_params(config))
        targets = sinks_of(config)
        for sink in targets:
            sink.on_sweep_start(sweep)
        sweep.save()
        _active[:] = [(targets, sweep)]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _active.clear()
        folder = Path(str(config.hydra.sweep.dir)).resolve()
        sweep = sinks_mod.Sweep.load(folder) or sinks_mod.Sweep.start(folder, [])
        jobs = sinks_mod.load_jobs(folder)
        if sweep.skip_jobs:
            err_console.print(f"resume: {len(sweep.skip_jobs)} job(s) skipped, measured "
                              "earlier in this folder", highlight=False, markup=False)
        for sink in sinks_of(config):
            try:  # one sink's unwritable output does not keep the others from the end
                sink.on_sweep_end(sweep, jobs)
            except OSError as err:
                exit_codes.note_unwritten()
                print_error(f"{sink.name}: cannot write {err.filename or folder} "
                            f"({err.strerror or err}) — the jobs' results are recorded")
        # The sweep's exit status, from every job's saved result (jobs may have run in
        # other processes); rnnexp.cli.main exits with it once Hydra returns. A job whose
        # folder holds no result had it kept elsewhere (rnnexp.recording).
        failed = [r for _, r in jobs if r.status in FAILED_STATUSES]
        exit_codes.set_pending(exit_codes.for_statuses(r.status for _, r in jobs))
        missing = recording.started_without_result(folder)
        if missing:
            exit_codes.note_unwritten()
            print_error(f"{len(missing)} job(s) left no result in their folder "
                        f"({', '.join(p.name for p in missing)}): see the lines above for "
                        "where each was kept")
        if failed:
            print_error(f"{len(failed)} of {len(jobs)} jobs failed: " + ", ".join(
                f"{r.label} ({r.status})" for r in failed))
