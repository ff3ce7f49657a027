"""Compose and validate every job's config before anything runs, and say what is wrong in
one line.

Hydra reports composition errors over several lines (and a sweep would only fail when it
reaches the bad job), so the CLI first expands the command line into its jobs with Hydra's
own override parser and sweeper — including sweeps that a preset (`+experiment=...`) defines
in `hydra.sweeper.params` — composes each with the compose API and validates it. The typed
configs are kept, so a job that runs in this process is not validated a second time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rnnexp import sinks
from rnnexp.errors import RnnexpError
from rnnexp.schema import Config, validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
CONFIG_NAME = "config"


def group_options(group: str) -> list[str]:
    folder = CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def user_overrides(overrides: Sequence[str]) -> list[str]:
    """The app's overrides: Hydra's own (hydra.*, hydra/launcher=...) are left to Hydra."""
    return [o for o in overrides if not o.lstrip("~+").startswith("hydra")]


def expand_jobs(overrides: Sequence[str], multirun: bool,
                preset_params: Sequence[str] = ()) -> list[list[str]]:
    """The override list of every job the command line describes (Hydra's sweep grammar);
    `preset_params` are sweep parameters a config defines (hydra.sweeper.params), which the
    command line overrides, as Hydra's basic sweeper does."""
    user = user_overrides(overrides)
    if not multirun:
        return [user]
    keys = {o.split("=", 1)[0].lstrip("~+") for o in user}
    params = [p for p in preset_params if p.split("=", 1)[0] not in keys]
    # Within a Hydra context (the checks, a running sweep) `glob(*)` can list group options.
    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() \
        else None
    parsed = OverridesParser.create(config_loader=loader).parse_overrides([*params, *user])
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


def sweep_params(cfg) -> list[str]:
    """A composed config's own sweep (hydra.sweeper.params, e.g. from a preset)."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return [f"{k}={v}" for k, v in params.items()]


def one_line(err: BaseException) -> str:
    """A Hydra/OmegaConf composition error reduced to its field and what would work."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        options = group_options(group)
        if group and options:
            return f"{group}={name}: no such option — choose one of: {', '.join(options)}"
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else None
    if isinstance(err, OmegaConfBaseException):
        cause = err
    if cause is not None:
        key = getattr(cause, "full_key", "") or ""
        lines = [ln.strip() for ln in str(cause).splitlines()]
        msg = " ".join(ln for ln in lines if ln and not re.match(r"(full_key|object_type|"
                                                                     r"reference_type)[:=]", ln))
        if "not in" in msg and key:
            group = key.rsplit(".", 1)[0]
            return f"{key}: no such field in {group}"
        return f"{key}: {msg}" if key else msg
    return str(err).strip().splitlines()[0]


# Typed configs of the jobs checked in this process, by their overrides.
_VALIDATED: dict[tuple[str, ...], Config] = {}


def _key(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(user_overrides(overrides)))


def validated(overrides: Sequence[str]) -> Config | None:
    """The typed config `check` made for a job with these overrides, if it ran here."""
    return _VALIDATED.get(_key(overrides))


def _compose(job: Sequence[str], hydra_config: bool = False):
    try:
        return compose(config_name=CONFIG_NAME, overrides=list(job),
                       return_hydra_config=hydra_config)
    except (HydraException, OmegaConfBaseException) as err:
        raise RnnexpError(one_line(err)) from None


def check(overrides: Sequence[str], multirun: bool) -> list[Config]:
    """Compose and validate each job (its sinks' options too); raise RnnexpError with one line
    on the first problem. Returns the typed configs, in job order."""
    configs = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = {}
        try:
            jobs = expand_jobs(overrides, multirun)
            if len(jobs) == 1:  # a preset may make this a sweep (hydra.mode, sweeper.params)
                base = _compose(jobs[0], hydra_config=True)
                composed[_key(jobs[0])] = base
                if multirun or OmegaConf.select(base, "hydra.mode") == RunMode.MULTIRUN:
                    jobs = expand_jobs(overrides, True, sweep_params(base))
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        for job in jobs:
            cfg = composed.get(_key(job)) or _compose(job)
            config = validate(cfg)
            sinks.build(config.sinks)
            _VALIDATED[_key(job)] = config
            configs.append(config)
    return configs
