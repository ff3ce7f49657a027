"""The four things rnnexp needs from Hydra that Hydra does not export, in one place.

Every other module uses Hydra's public API only (plugins, callbacks, the compose API, the
override parser). What is here has no public equivalent in hydra-core 1.3; the versions it
was written for are `SUPPORTED`, and tests/config/test_hydra_private.py fails on any other release
so that an upgrade is a deliberate review of these few lines, never a silent break:

- `args_parser`: the command line as `hydra.main` reads it (-m, --config-dir, --help, ...);
  the config gate must see the same arguments before Hydra builds anything.
- `app_search`: a Hydra context whose config search path is the one `hydra.main` makes for
  this app (primary folder from --config-path, --config-dir before the schema provider).
  The compose API's `initialize_config_dir` takes one folder and cannot place --config-dir
  where Hydra does, and a gate that composed from another search path than the run could be
  bypassed by a file that only the run sees.
- `share_store`: the ConfigStore shared, not deep-copied, by each composition (see there).
- `run_composed`: a single run's job run from a config composed already — what `Hydra.run`
  does after its own composition. `hydra.main` composes the job itself and takes no
  composition; the gate has composed it (to find a config file's credentials and check its
  values before Hydra records anything), so a run composes once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any, Callable, Iterator

from hydra._internal.callbacks import Callbacks
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import configure_log, run_job
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, open_dict

# hydra-core releases whose privates below were read: >= first, < second.
SUPPORTED = ((1, 3), (1, 4))


def args_parser() -> argparse.ArgumentParser:
    return get_args_parser()


@contextlib.contextmanager
def app_search(app_module: str, config_path: str, config_dir: str | None,
               task_name: str = "app") -> Iterator[None]:
    """Hydra initialised (GlobalHydra) with the search path `hydra.main` builds in
    `_run_hydra` for `app_module` (the primary config's own hydra.searchpath is read while
    composing); the previous GlobalHydra is restored on exit."""
    from rnnexp.errors import RnnexpError

    search_path = create_automatic_config_search_path(None, app_module, config_path)
    if config_dir is not None:
        folder = os.path.abspath(config_dir)
        if not os.path.isdir(folder):
            raise RnnexpError(f"--config-dir: {folder} is not a folder")
        search_path.prepend(provider="command-line", path=f"file://{folder}")
    backup = get_gh_backup()
    Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)
    try:
        yield
    finally:
        restore_gh_from_backup(backup)


def _same(store: ConfigStore, memo: dict) -> ConfigStore:
    return store


def share_store() -> None:
    """Every composition makes a CachingConfigRepository, which deep-copies Hydra's config
    repository so that re-initialising its sources leaves the original alone — and with it
    the ConfigStore singleton its structured-config source points to: every stored node, at
    every composition (with DeepBench's 110 problems stored, 0.21 → 0.09 s a job's config
    here). The store hands out a deep copy of a node on every load (ConfigStore.load), so no
    composition can change it, and the copies may share it. Idempotent."""
    ConfigStore.__deepcopy__ = _same  # type: ignore[attr-defined]


def run_composed(cfg: DictConfig, task_function: Callable[[DictConfig], Any],
                 config_name: str) -> None:
    """`Hydra.run` (hydra/_internal/hydra.py) from its composition on, for `cfg` composed in
    the current Hydra context (`app_search`): logging configured, the run's callbacks around
    the job, the job run in its folder; a failed job's exception raised."""
    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
    if cfg.hydra.mode is None:
        with open_dict(cfg):
            cfg.hydra.mode = RunMode.RUN
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=config_name)
    context = HydraContext(config_loader=GlobalHydra.instance().config_loader(),
                           callbacks=callbacks)
    ret = run_job(hydra_context=context, task_function=task_function, config=cfg,
                  job_dir_key="hydra.run.dir", job_subdir_key=None, configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name=config_name, job_return=ret)
    _ = ret.return_value  # raises the job's exception, as Hydra does
