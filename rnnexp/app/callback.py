"""Where a run and a sweep meet the sinks and the config check, through Hydra's public hooks.

- `RunCheck`, a Hydra callback (conf/config.yaml, hydra.callbacks): a single run's config is
  checked (rnnexp.app.config_check) in `on_run_start`, before Hydra makes the run folder.
- `SweepRecord`, owned by rnnexp's sweeper (hydra_plugins/rnnexp_sweeper) for one sweep:
  once every job is checked it tells the configured sinks that the sweep starts (MLflow's
  parent run) and decides what the jobs share — how the machine is divided between parallel
  jobs (rnnexp.machine.placement) and, with `resume=true`, which jobs already ran
  (rnnexp.results.resume);
  at the end the sinks get the summary, or the reason the sweep stopped. Jobs (in this
  process, in joblib workers, on cluster nodes with submitit) read the `Sweep` — with what
  each sink keeps for them — from the sweep folder, which works for every launcher that
  shares the filesystem and leaves no state behind in the process.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rnnexp.app import config_check, recording, run_dir, stopping
from rnnexp.config.schema import Config
from rnnexp.errors import (
    Interrupted,
    InterruptRecorded,
    RnnexpError,
    crash_line,
    signal_name,
)
from rnnexp.machine import placement, platform
from rnnexp.measure import isolation, job
from rnnexp.results import exit_codes, resume
from rnnexp.results import sinks as sinks_mod
from rnnexp.results.report import err_console, print_error
from rnnexp.results.result import CRASHED, FAILED_STATUSES, INTERRUPTED, Result
from rnnexp.run import overlap, schedule, signals


def sinks_of(config: DictConfig) -> list[sinks_mod.Sink]:
    return sinks_mod.build(OmegaConf.to_container(config.sinks, resolve=True))


def plan_sweep(sweep: sinks_mod.Sweep, config: DictConfig, jobs: Sequence[Sequence[str]],
               configs: Sequence[Config]) -> None:
    """Placement warning and resume decisions, in one line each."""
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
    placed = [placement.for_job(c, num, launch, list(jobs[num]), plat.gpu_count, cores)
              for num, c in enumerate(configs)]
    sweep.skip_jobs = resume.finished_jobs(sweep.path, [job.plain_config(c) for c in placed],
                                           platform.git_commit(), plat.torch_version)
    skip, n = len(sweep.skip_jobs), len(configs)
    err_console.print(f"resume: {skip} of {n} jobs already measured in {sweep.dir} — "
                      f"skipping them, running {n - skip}", highlight=False, markup=False)


class RunCheck(Callback):
    """A single run's config checked before Hydra makes its folder: one line, exit 2. Its
    typed config goes to the task function (config_check.CHECKED_RUN)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra turns a callback's exception into a warning and runs the job: a refusal
        # here ends the program (SystemExit), as the error boundary of rnnexp.app.cli would.
        try:
            configs = config_check.check_composed([config], multirun=False)
        except RnnexpError as err:
            print_error(str(err))
            sys.exit(exit_codes.USER_ERROR)
        except Exception:  # HYDRA_FULL_ERROR=1: the error as Hydra raised it
            traceback.print_exc()
            sys.exit(exit_codes.USER_ERROR)
        config_check.CHECKED_RUN.keep(config, configs[0])  # for the task function, in turn
        run_dir.claim_run(config)  # two runs started in the same second: two folders
        prestart_workers(configs)


def prestart_workers(configs: Sequence[Config]) -> None:
    """Jobs measured in worker processes: their fork server starts now, importing in
    parallel with the rest of start-up (rnnexp.measure.isolation)."""
    if any(schedule.uses_workers(c) for c in configs):
        isolation.prestart()


@dataclass
class SweepRecord:
    """One sweep as the sinks see it, from its start to its end."""

    config: DictConfig
    targets: list[sinks_mod.Sink]
    sweep: sinks_mod.Sweep
    jobs: Sequence[Sequence[str]]  # each job's overrides, in job order
    configs: Sequence[Config]  # each job's checked config
    choices: Sequence[dict[str, str]]  # each job's config-group choices, as composed

    @classmethod
    def start(cls, config: DictConfig, jobs: Sequence[Sequence[str]],
              configs: Sequence[Config], choices: Sequence[dict[str, str]],
              overlapped: bool = False) -> SweepRecord:
        """`overlapped`: the sinks are told in a thread (rnnexp.run.overlap) while the first
        window's workers set up — for a launcher that measures in this process's workers and
        records each job here, after its window (rnnexp's); the sweep folder holds the
        sweep's identity at once and what the sinks keep for its jobs once they are done."""
        folder = Path(str(config.hydra.sweep.dir))
        # A resumed sweep keeps its identity (and its MLflow parent run).
        sweep = (sinks_mod.Sweep.load(folder) if config.get("resume") else None) or \
            sinks_mod.Sweep.start(folder, list(config.hydra.overrides.task))
        plan_sweep(sweep, config, jobs, configs)
        targets = sinks_of(config)

        def tell_sinks() -> None:
            for sink in targets:
                sink.on_sweep_start(sweep)
            sweep.save()

        def tell_and_warm() -> None:
            tell_sinks()
            for sink in targets:  # the imports the sweep's end needs, while waiting anyway
                try:
                    sink.warm()
                except Exception:  # its end fails the same way, and says why
                    pass

        if overlapped:
            sweep.save()
            overlap.start(tell_and_warm, name="rnnexp-sweep-start")
        else:
            tell_sinks()
        return cls(config, targets, sweep, jobs, configs, choices)

    def abort(self, result: Result, unfinished: bool = True) -> None:
        """The sweep was cut short, with `result`'s status: its job processes end
        (rnnexp.app.stopping), the jobs that started and left no result are recorded with that
        status (unless `unfinished` is false: their folders could not be written, and what
        was measured of them is kept elsewhere already), and the sinks are told (the parent
        run ends)."""
        stopping.end_jobs()
        overlap.finish(raise_errors=False)  # the sinks' start, if still under way
        for folder in recording.started_without_result(self.sweep.path) if unfinished else ():
            unfinished = self.unfinished_job(folder, result)
            if unfinished is not None:
                recording.publish(self.targets, unfinished, folder, self.sweep)
        for sink in self.targets:
            sink.on_abort(self.sweep, result)

    def unfinished_job(self, folder: Path, ended: Result) -> Optional[Result]:
        """The record of the job in `folder`, ended with the sweep before it had a result."""
        if not folder.name.isdigit() or int(folder.name) >= len(self.jobs):
            return None
        num = int(folder.name)
        return Result(choices=dict(self.choices[num]), overrides=[str(o) for o in self.jobs[num]],
                      config=job.plain_config(self.configs[num]), status=ended.status,
                      reason=f"{ended.reason} — the job was ended with its sweep",
                      platform=platform.current(), git_commit=platform.git_commit())

    @contextlib.contextmanager
    def ended_if_stopped(self) -> Iterator[None]:
        """A launch that stops — interrupted outside any job, a launcher's error (no SLURM
        here) — ends the sweep's record with the reason, instead of leaving MLflow's parent
        run RUNNING at the top of its list."""
        try:
            yield
        except InterruptRecorded:  # a job recorded its own interruption, and told the sinks
            raise
        except (KeyboardInterrupt, Interrupted) as err:
            reason = f"interrupted ({signal_name(signals.signum_of(err))})"
            self.abort(Result(choices={}, overrides=[], config={}, status=INTERRUPTED,
                              reason=reason))
            raise
        except OSError as err:  # a full disk, a folder gone: the jobs were stopped by it
            exit_codes.note_unwritten()
            self.abort(Result(choices={}, overrides=[], config={}, status=INTERRUPTED,
                              reason=f"the sweep stopped: cannot write {err.filename or ''} "
                                     f"({err.strerror or err})"), unfinished=False)
            raise
        except Exception as err:
            self.abort(Result(choices={}, overrides=[], config={}, status=CRASHED,
                              reason=f"the sweep stopped: {crash_line(err)}"))
            raise

    def end(self) -> None:
        overlap.finish()
        folder = Path(str(self.config.hydra.sweep.dir)).resolve()
        sweep = sinks_mod.Sweep.load(folder) or sinks_mod.Sweep.start(folder, [])
        jobs = sinks_mod.load_jobs(folder)
        if sweep.skip_jobs:
            err_console.print(f"resume: {len(sweep.skip_jobs)} job(s) skipped, measured "
                              "earlier in this folder", highlight=False, markup=False)
        for end in ("on_sweep_end", "on_sweep_closed"):  # closed: after every sink's end
            for sink in self.targets:
                try:  # one sink's unwritable output does not keep the others from the end
                    getattr(sink, end)(sweep, jobs)
                except OSError as err:
                    exit_codes.note_unwritten()
                    print_error(f"{sink.name}: cannot write {err.filename or folder} "
                                f"({err.strerror or err}) — the jobs' results are recorded")
        # The sweep's exit status, from every job's saved result (jobs may have run in
        # other processes); rnnexp.app.cli.main exits with it once Hydra returns. A job whose
        # folder holds no result had it kept elsewhere (rnnexp.app.recording).
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
