"""rnnexp's launcher: Hydra's public Launcher API around rnnexp.app.launch.

Hydra finds launchers in the `hydra_plugins` namespace; this module only adapts the API —
what a sweep's jobs go through is rnnexp.app.launch's. Each job is composed through the
`hydra_context` Hydra gives the launcher, its folder made and its task function run by
Hydra's own `run_job`, as the basic launcher does; before that, the jobs' configurations are
measured together, in interleaved rounds. rnnexp's sweeper hands over the typed configs it
checked (`launch_checked`, the sweeper's `LaunchesChecked` extension of the Launcher API), and
the launcher hands each to its job's task function.
"""

# No `from __future__ import annotations`: Hydra scans this module without registering it
# in sys.modules, and dataclasses then cannot resolve string annotations.
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict


@dataclass
class RnnexpLauncherConf:
    _target_: str = "hydra_plugins.rnnexp_launcher.rnnexp_launcher.RnnexpLauncher"
    # false: the jobs one after the other, each measured on its own (as Hydra's basic
    # launcher), with no pairing between them.
    interleave: bool = True


ConfigStore.instance().store(group="hydra/launcher", name="rnnexp", node=RnnexpLauncherConf,
                             provider="rnnexp")


class RnnexpLauncher(Launcher):
    def __init__(self, interleave: bool = True) -> None:
        self.interleave = interleave
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.typed: dict = {}  # job number → its typed config, for the launch under way

    def measures_in_workers(self) -> bool:
        """Every job it measures runs in worker processes of this one, and is recorded here
        once its window is measured (interleaved): the sweeper starts the fork server before
        the jobs are composed, and the sinks' start of the sweep while the first window's
        workers set up (rnnexp.run.overlap)."""
        return self.interleave

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        return self.launch_checked(job_overrides, initial_job_idx, None)

    def launch_checked(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                       checked: Optional[Sequence[Any]],
                       composed: Optional[Sequence[DictConfig]] = None
                       ) -> Sequence[JobReturn]:
        """`launch`, with each job's typed config as the sweeper checked it (None: the
        launcher types them) and its config as the sweeper composed it (None: composed
        here) — the sweeper's `LaunchesChecked`."""
        # The app's own code, imported when a sweep runs (not when Hydra scans plugins).
        from rnnexp.app import launch
        from rnnexp.errors import Interrupted

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        configs, self.typed = self.compose(job_overrides, initial_job_idx, checked, composed)
        returns = {}
        if not self.interleave:
            return [self._run(cfg) for cfg in configs.values()]
        sweep = launch.SweepRun.plan(list(configs.values()), self.typed)
        measured = {j.num for members in sweep.windows for j in members}
        # Jobs declined before timing, or skipped by a resumed sweep: recorded first.
        for num, cfg in configs.items():
            if num not in measured:
                returns[num] = self._run(cfg, sweep.refused.get(num))
        for w, members in enumerate(sweep.windows):
            measured = sweep.measure(w)
            outcomes = measured.outcomes
            if measured.interrupt is not None:
                # What the window finished is recorded; the jobs still measuring end killed.
                for j in members:
                    if j.num in outcomes:
                        returns[j.num] = self._run(configs[j.num], outcomes[j.num])
                self._record_interrupted([configs[j.num] for j in members
                                          if j.num not in outcomes], measured.interrupt)
            for i, j in enumerate(members):
                try:
                    returns[j.num] = self._run(configs[j.num], outcomes.get(j.num))
                except (KeyboardInterrupt, Interrupted):
                    # Measured before the signal: the window's other jobs are recorded as
                    # they were measured, then the sweep ends.
                    for rest in members[i + 1:]:
                        self._run(configs[rest.num], outcomes.get(rest.num))
                    raise
                except OSError:
                    # Hydra could not make a job's folder (a full disk): the sweep stops, and
                    # what this window measured is kept elsewhere, each said in one line.
                    launch.keep_measured([outcomes.get(rest.num) for rest in members[i:]])
                    raise
        return [returns[num] for num in sorted(returns)]

    def compose(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                checked: Optional[Sequence[Any]],
                composed: Optional[Sequence[DictConfig]] = None) -> tuple[dict, dict]:
        """Each job's config, composed as Hydra's basic launcher composes it (or as the
        sweeper did), and its typed config (the sweeper's, or typed here), by job number."""
        from rnnexp.config import compositions, schema

        assert self.config is not None and self.hydra_context is not None
        configs, typed = {}, {}
        for i, overrides in enumerate(job_overrides):
            num = initial_job_idx + i
            cfg = composed[i] if composed is not None else compositions.load_sweep_config(
                self.hydra_context.config_loader, self.config, overrides)
            with open_dict(cfg):
                cfg.hydra.job.id = num
                cfg.hydra.job.num = num
            configs[num] = cfg
            typed[num] = checked[i] if checked is not None else schema.validate(cfg)
        return configs, typed

    def _run(self, cfg: DictConfig, outcome: object = None) -> JobReturn:
        """The job's folder, callbacks and task function, by Hydra's own run_job."""
        from rnnexp.run import overlap

        assert self.hydra_context is not None and self.task_function is not None
        overlap.finish()  # the sinks' start of the sweep, which the job's record needs
        task = functools.partial(self.task_function, checked=self.typed[int(cfg.hydra.job.num)])
        if outcome is not None:
            task = functools.partial(task, outcome=outcome)
        ret = run_job(hydra_context=self.hydra_context, task_function=task, config=cfg,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        assert self.config is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return ret

    def _record_interrupted(self, cfgs: Sequence[DictConfig], err: BaseException) -> None:
        """Every job of an interrupted window recorded as interrupted (the task function
        records it and ends the sweep's parent), then the interrupt raised — as recorded
        when a job recorded it."""
        from rnnexp.errors import InterruptRecorded
        from rnnexp.run import signals

        for cfg in cfgs:
            try:
                self._run(cfg, err)
            except InterruptRecorded:  # this job's record of the interrupt
                pass
        if cfgs:  # else the sweep's parent is ended by the app, as outside any job
            raise InterruptRecorded(signals.signum_of(err)) from err
        raise err
