"""A third party's Hydra launcher, on Hydra's public Launcher API only, that also takes the
sweeper's checked configs (the sweeper's `LaunchesChecked` extension): it writes what it was
handed beside the sweep, then runs the jobs one after the other as Hydra's basic launcher
does."""

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict


class CheckedLauncher(Launcher):
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        returns = []
        for i, overrides in enumerate(job_overrides):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config,
                                                                     list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = cfg.hydra.job.num = initial_job_idx + i
            returns.append(run_job(hydra_context=self.hydra_context,
                                   task_function=self.task_function, config=cfg,
                                   job_dir_key="hydra.sweep.dir",
                                   job_subdir_key="hydra.sweep.subdir"))
        return returns

    def measures_in_workers(self) -> bool:
        return False  # each job runs through Hydra's run_job, here, one after the other

    def launch_checked(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                       checked: Optional[Sequence[Any]],
                       composed: Optional[Sequence[DictConfig]] = None
                       ) -> Sequence[JobReturn]:
        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "checked.json").write_text(json.dumps(
            [[c.model.family, c.shape.seq_len] for c in checked or []]))
        return self.launch(job_overrides, initial_job_idx)
