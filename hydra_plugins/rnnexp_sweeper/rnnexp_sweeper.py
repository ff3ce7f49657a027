"""rnnexp's sweeper: Hydra's public Sweeper API around rnnexp's config check and sweep record.

A sweep (`-m`) goes: the command line (and a preset's `hydra.sweeper.params`) expanded into
its jobs with Hydra's override grammar — lists, `range()`, `choice()`, `glob()`; every job
composed and checked (`validate_batch_is_legal`: rnnexp.app.config_check, one line on the first
problem, before any folder is made); then the sweep folder and the sinks' record of the
sweep started (rnnexp.app.callback.SweepRecord), the jobs launched, and the record ended — or
ended interrupted or failed with the reason when the launch stops.

The launch goes through Hydra's Launcher API, so any launcher runs the sweep (Hydra's basic
launcher, joblib, submitit): its jobs' task function types its config again. One extension,
`LaunchesChecked`, lets a launcher take the typed configs the sweeper checked instead:
rnnexp's launchers implement it, and any other launcher may.
"""

# No `from __future__ import annotations`: Hydra scans this module without registering it
# in sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence, runtime_checkable

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
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


@runtime_checkable
class LaunchesChecked(Protocol):
    """rnnexp's extension of Hydra's Launcher API: `launch`, with each job's typed config
    (`rnnexp.config.schema.Config`, in job order) as the sweeper checked it — and, when the
    sweeper has them, the configs it composed to check (Hydra's `load_sweep_config` of each
    job's overrides) — so that the launcher neither composes nor validates the jobs again;
    and whether it measures every job in worker processes of this process and records each
    job here, after its window (`measures_in_workers`): the sweeper then starts the workers'
    fork server before it composes the jobs, and the sinks' start of the sweep beside the
    first window's set-up. A launcher without it is called through `launch`."""

    def measures_in_workers(self) -> bool: ...

    def launch_checked(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                       checked: Optional[Sequence[Any]],
                       composed: Optional[Sequence[DictConfig]] = None
                       ) -> Sequence[JobReturn]: ...


class RnnexpSweeper(Sweeper):
    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        self.params = dict(params or {})
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher: Optional[Launcher] = None
        # Of the batch last validated, per job: its overrides (credentials hidden), config
        # as composed, typed config and config-group choices.
        self.batch: List[List[str]] = []
        self.composed: List[DictConfig] = []
        self.checked: List[Any] = []
        self.choices: List[Dict[str, str]] = []

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
        """Each job composed as the launcher will compose it — with the credentials its own
        config files hold replaced by their hidden form, so that nothing Hydra or the sinks
        record of it holds them — and checked once (rnnexp's config check). The jobs'
        overrides (`batch`, hidden forms added), compositions and typed configs are kept for
        the launch."""
        from rnnexp.app import config_check
        from rnnexp.config import compositions

        assert self.hydra_context is not None and self.config is not None
        loader, master = self.hydra_context.config_loader, self.config
        self.batch, self.choices, self.composed = [], [], []

        def composed() -> Iterator[DictConfig]:
            for job in batch:
                cfg = compositions.load_sweep_config(loader, master, job)
                hidden = self.credentials_of(cfg)
                if hidden:  # the same composition (kept), these values set on top
                    cfg = compositions.load_sweep_config(loader, master, [*job, *hidden])
                self.batch.append([*job, *hidden])
                self.choices.append(config_check.app_choices(cfg.hydra.runtime.choices))
                self.composed.append(cfg)
                yield cfg

        self.checked = config_check.check_composed(composed(), multirun=True)

    @staticmethod
    def credentials_of(cfg: DictConfig) -> List[str]:
        """What a job's config files hold that the sweep's base did not: a credential
        (rnnexp.config.credentials), as overrides that hide it. A config that does not
        resolve has none to hide here: its check says why."""
        from rnnexp.app import config_check
        from rnnexp.config import credentials

        app = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        try:
            with config_check.hydra_resolvable(cfg):
                plain = OmegaConf.to_container(app, resolve=True)
        except Exception:
            return []
        return credentials.hidden_overrides(plain)

    def sweep(self, arguments: List[str]) -> Any:
        from rnnexp.app import config_check

        assert self.config is not None and self.launcher is not None
        # `${hydra:…}` in the sweep's own config (its sinks) resolves as in its jobs, where
        # Hydra sets it for each job.
        with config_check.hydra_resolvable(self.config):
            return self._sweep(arguments)

    def _sweep(self, arguments: List[str]) -> Any:
        from rnnexp.app import run_dir, stopping
        from rnnexp.app.callback import SweepRecord, prestart_workers

        assert self.config is not None and self.launcher is not None
        in_workers = isinstance(self.launcher, LaunchesChecked) and \
            self.launcher.measures_in_workers()
        if in_workers:  # known before any job is composed: its imports overlap the checks
            from rnnexp.measure import isolation

            isolation.prestart()
        self.validate_batch_is_legal(self.jobs(arguments))
        batch = self.batch
        prestart_workers(self.checked)
        if not self.config.get("resume"):  # a resumed sweep goes on in the folder it names
            # Two sweeps started together: two folders (the jobs' configs follow).
            run_dir.claim_sweep(self.config, self.composed)
        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, folder / "multirun.yaml")
        record = SweepRecord.start(self.config, batch, self.checked, self.choices,
                                   overlapped=in_workers)
        stopping.jobs_end_with_this_process(self.config.hydra.launcher)
        with record.ended_if_stopped():
            if isinstance(self.launcher, LaunchesChecked):
                returns = self.launcher.launch_checked(batch, 0, self.checked, self.composed)
            else:
                returns = self.launcher.launch(batch, initial_job_idx=0)
            for ret in returns:
                _ = ret.return_value  # a job that raised stops the sweep, as in Hydra's
        record.end()
        return [returns]
