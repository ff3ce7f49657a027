"""rnnexp's sweeper: Hydra's public Sweeper API around rnnexp's config check and sweep record.

A sweep (`-m`) goes: the command line (and a preset's `hydra.sweeper.params`) expanded into
its jobs with Hydra's override grammar — lists, `range()`, `choice()`, `glob()`; every job
composed and checked (`validate_batch_is_legal`: rnnexp.app.config_check, one line on the first
problem, before any folder is made); then the sweep folder and the sinks' record of the
sweep started (rnnexp.app.callback.SweepRecord), the jobs launched, and the record ended — or
ended interrupted or failed with the reason when the launch stops.
"""

# No `from __future__ import annotations`: Hydra scans this module without registering it
# in sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


@dataclass
class RnnexpSweeperConf:
    _target_: str = "hydra_plugins.rnnexp_sweeper.rnnexp_sweeper.RnnexpSweeper"
    # Sweeps a config defines (a preset): key → values in the override grammar; the command
    # line's value of the same key replaces it.
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="rnnexp", node=RnnexpSweeperConf,
                             provider="rnnexp")


class RnnexpSweeper(Sweeper):
    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        self.params = dict(params or {})
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher: Optional[Launcher] = None
        self.checked: List[Any] = []  # the typed configs of the batch last validated
        self.hidden: List[List[str]] = []  # per job: overrides hiding its credentials
        self.choices: List[Dict[str, str]] = []  # per job: its config-group choices

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def jobs(self, arguments: Sequence[str]) -> List[List[str]]:
        """Every job's overrides, in job order."""
        from rnnexp.app import config_check

        assert self.hydra_context is not None
        params = [f"{k}={v}" for k, v in self.params.items()]
        with config_check.one_line_errors():
            return config_check.expand_jobs(list(arguments), True, params,
                                            loader=self.hydra_context.config_loader)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Each job composed as the launcher will compose it, and checked (rnnexp's config
        check); the typed configs are kept for the launch."""
        from rnnexp.app import config_check
        from rnnexp.config import compositions, credentials

        assert self.hydra_context is not None and self.config is not None
        loader, master = self.hydra_context.config_loader, self.config
        self.hidden, self.choices = [], []

        def composed() -> Iterator[DictConfig]:
            for job in batch:
                cfg = compositions.load_sweep_config(loader, master, job)
                self.choices.append(config_check.app_choices(cfg.hydra.runtime.choices))
                yield cfg  # checked first: what follows resolves it
                # What this job's config files hold that the sweep's base did not: a
                # credential (rnnexp.config.credentials), to be hidden in this job too.
                app = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
                with config_check.hydra_resolvable(cfg):
                    plain = OmegaConf.to_container(app, resolve=True)
                self.hidden.append(credentials.hidden_overrides(plain))

        self.checked = config_check.check_composed(composed(), multirun=True)

    def without_credentials(self, batch: List[List[str]]) -> List[List[str]]:
        """Each job with the credentials its own config files hold replaced by their hidden
        form, and checked again: nothing Hydra or the sinks record of it holds them."""
        if not any(self.hidden):
            return batch
        batch = [[*job, *hidden] for job, hidden in zip(batch, self.hidden, strict=True)]
        self.validate_batch_is_legal(batch)
        return batch

    def sweep(self, arguments: List[str]) -> Any:
        from rnnexp.app import config_check

        assert self.config is not None and self.launcher is not None
        # `${hydra:…}` in the sweep's own config (its sinks) resolves as in its jobs, where
        # Hydra sets it for each job.
        with config_check.hydra_resolvable(self.config):
            return self._sweep(arguments)

    def _sweep(self, arguments: List[str]) -> Any:
        from hydra_plugins.rnnexp_launcher.rnnexp_launcher import RnnexpLauncher
        from rnnexp.app import run_dir, stopping
        from rnnexp.app.callback import SweepRecord, prestart_workers

        assert self.config is not None and self.launcher is not None
        batch = self.jobs(arguments)
        self.validate_batch_is_legal(batch)
        batch = self.without_credentials(batch)
        prestart_workers(self.checked)
        if not self.config.get("resume"):  # a resumed sweep goes on in the folder it names
            run_dir.claim_sweep(self.config)  # two sweeps started together: two folders
        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, folder / "multirun.yaml")
        record = SweepRecord.start(self.config, batch, self.checked, self.choices)
        stopping.jobs_end_with_this_process(self.config.hydra.launcher)
        with record.ended_if_stopped():
            if isinstance(self.launcher, RnnexpLauncher):
                returns = self.launcher.launch_checked(batch, 0, self.checked)
            else:
                returns = self.launcher.launch(batch, initial_job_idx=0)
            for ret in returns:
                _ = ret.return_value  # a job that raised stops the sweep, as in Hydra's
        record.end()
        return [returns]
