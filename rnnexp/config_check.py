"""Compose and validate every job's config before anything runs, and say what is wrong in
one line.

Hydra reports composition errors over several lines (and a sweep would only fail when it
reaches the bad job), so the CLI first expands the command line into its jobs with Hydra's
own override parser and sweeper, composes each with the compose API and validates it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from rnnexp.errors import RnnexpError
from rnnexp.schema import validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
CONFIG_NAME = "config"


def group_options(group: str) -> list[str]:
    folder = CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def expand_jobs(overrides: Sequence[str], multirun: bool) -> list[list[str]]:
    """The override list of every job the command line describes (Hydra's sweep grammar)."""
    user = [o for o in overrides if not o.lstrip("~+").startswith("hydra")]
    if not multirun:
        return [user]
    parsed = OverridesParser.create().parse_overrides(user)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


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


def check(overrides: Sequence[str], multirun: bool) -> list[DictConfig]:
    """Compose and validate each job; raise RnnexpError with one line on the first problem."""
    try:
        jobs = expand_jobs(overrides, multirun)
    except OverrideParseException as err:
        raise RnnexpError(f"command line: {one_line(err)}") from None
    configs = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in jobs:
            try:
                cfg = compose(config_name=CONFIG_NAME, overrides=job)
            except (HydraException, OmegaConfBaseException) as err:
                raise RnnexpError(one_line(err)) from None
            validate(cfg)
            configs.append(cfg)
    return configs
