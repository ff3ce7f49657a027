"""Compose and validate every job's config before anything runs, and say what is wrong in
one line.

Hydra reports composition errors over several lines (and a sweep would only fail when it
reaches the bad job), so the CLI first expands the command line into its jobs with Hydra's
own override parser and sweeper — including sweeps that a preset (`+experiment=...`) defines
in `hydra.sweeper.params` — composes each with the compose API and validates it. The typed
configs are kept, so a job that runs in this process is not validated a second time.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rnnexp import sinks, targets
from rnnexp.errors import ConfigError, RnnexpError
from rnnexp.schema import Config, closest, validate

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
            return f"{key}: no such field — {_suggest(key, getattr(cause, 'object_type', None))}"
        return f"{key}: {msg}" if key else msg
    return str(err).strip().splitlines()[0]


def _suggest(key: str, schema: Any) -> str:
    """The closest field of the schema node that `key` was looked up in."""
    if not dataclasses.is_dataclass(schema):
        return "check the name"
    prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
    names = [f"{prefix}{f.name}" for f in dataclasses.fields(schema)
             if not f.name.startswith("_")]
    return closest(key, names)


def check_command_line(overrides: Sequence[str]) -> None:
    """The grammar of every override, Hydra's own included, and the allowlist for any
    `_target_` an override sets or adds (e.g. +hydra.callbacks.x._target_=...)."""
    parser, parsed = OverridesParser.create(), []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as err:
            raise RnnexpError(f"{text}: {one_line(err)}") from None
    for override in parsed:
        key = override.key_or_group
        values = list(override.sweep_iterator()) if override.is_sweep_override() else \
            [override.value()]
        for value in values:
            if key == "_target_" or key.endswith("._target_"):
                field = key.removesuffix("_target_").rstrip(".")
                targets.check_target(field, value, hydra=key.startswith("hydra."))
            else:
                targets.check_tree(key, value)


def check_output_dir(overrides: Sequence[str], multirun: bool) -> None:
    """The run/sweep folder a command line names can be created: checked by creating (and
    removing) a temporary folder in its nearest existing parent, before Hydra makes it."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith(key + "=")]
    if not given or "${" in given[-1]:
        return  # the default folder under the current directory, or an interpolation
    folder = Path(given[-1]).expanduser().absolute()
    parent = folder
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise NotADirectoryError(f"{parent} is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".rnnexp-check-", dir=parent))
    except OSError as err:
        reason = err.strerror or str(err)
        raise ConfigError(key, f"cannot create {folder} ({reason})",
                          "choose a writable folder") from None


# Typed configs of the jobs checked in this process, by their overrides.
_VALIDATED: dict[tuple[str, ...], Config] = {}
# Their config-group choices (model, backend, ...), for jobs composed with Hydra's config.
_CHOICES: dict[tuple[str, ...], dict[str, str]] = {}


def _key(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(user_overrides(overrides)))


def validated(overrides: Sequence[str]) -> Config | None:
    """The typed config `check` made for a job with these overrides, if it ran here."""
    return _VALIDATED.get(_key(overrides))


def choices(overrides: Sequence[str]) -> dict[str, str] | None:
    """The group choices of a single job `check` composed, if it ran here."""
    return _CHOICES.get(_key(overrides))


@contextlib.contextmanager
def _composition_errors_in_one_line() -> Iterator[None]:
    try:
        yield
    except (HydraException, OmegaConfBaseException) as err:
        raise RnnexpError(one_line(err)) from None


def _compose(job: Sequence[str], hydra_config: bool = False):
    with _composition_errors_in_one_line():
        return compose(config_name=CONFIG_NAME, overrides=list(job),
                       return_hydra_config=hydra_config)


def _compose_job(job: Sequence[str], bases: dict[tuple[str, ...], Any]):
    """A job's app config, as Hydra would compose it: the config-group choices composed once
    per distinct set of them (cached in `bases`), then the job's plain `key=value` overrides
    applied the way Hydra applies them after composing (its own
    ConfigLoaderImpl._apply_overrides_to_config, on a copy). A sweep over values (shapes,
    seeds) then composes once, not once a job (~0.07 s each)."""
    repo = GlobalHydra.instance().config_loader().repository
    parsed = OverridesParser.create().parse_overrides(list(job))
    # What Hydra's defaults list treats as a config override rather than a group choice.
    plain = [o for o in parsed if o.package is None and not (o.is_add() or o.is_force_add()
             or o.is_delete() or o.is_sweep_override()) and not isinstance(o.value(), dict)
             and not repo.group_exists(o.key_or_group)]
    groups = tuple(o.input_line for o in parsed if o not in plain)
    if groups not in bases:
        bases[groups] = _compose(list(groups))
    cfg = copy.deepcopy(bases[groups])
    with _composition_errors_in_one_line():
        ConfigLoaderImpl._apply_overrides_to_config(plain, cfg)
    return cfg


def check(overrides: Sequence[str], multirun: bool) -> list[Config]:
    """Compose and validate each job (its sinks' and model factory's options too, and every
    `_target_` against the allowlist); raise RnnexpError with one line on the first problem.
    Returns the typed configs, in job order."""
    check_command_line(overrides)
    check_output_dir(overrides, multirun)
    configs = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = {}
        try:
            jobs = expand_jobs(overrides, multirun)
            if len(jobs) == 1:  # a preset may make this a sweep (hydra.mode, sweeper.params)
                base = _compose(jobs[0], hydra_config=True)
                composed[_key(jobs[0])] = base
                _CHOICES[_key(jobs[0])] = {
                    k: v for k, v in base.hydra.runtime.choices.items()
                    if not k.startswith("hydra/")}
                targets.check_tree("hydra.callbacks", OmegaConf.to_container(
                    base.hydra.callbacks, resolve=False))
                if multirun or OmegaConf.select(base, "hydra.mode") == RunMode.MULTIRUN:
                    jobs = expand_jobs(overrides, True, sweep_params(base))
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        bases: dict[tuple[str, ...], Any] = {}
        for job in jobs:
            cfg = composed.get(_key(job)) or _compose_job(job, bases)
            app = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items()
                   if k != "hydra"}
            targets.check_tree("", app)
            config = validate(cfg)
            sinks.build(config.sinks)
            targets.bind("model.build", config.model.build, None)  # None: the spec
            _VALIDATED[_key(job)] = config
            configs.append(config)
    return configs
