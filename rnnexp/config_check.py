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
import dataclasses
import difflib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rnnexp import compositions, credentials, kernel_plugins, sinks, targets
from rnnexp.errors import ConfigError, RnnexpError, full_error
from rnnexp.identity import MeasurementKey, duplicates
from rnnexp.report import print_warning
from rnnexp.schema import CONF_DIR, Config, closest, validate

CONFIG_NAME = "config"
# The module of the Hydra app: a relative --config-path is relative to its package.
APP_MODULE = "rnnexp.cli"


def group_options(group: str) -> list[str]:
    folder = CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _is_hydras(override: str) -> bool:
    """One of Hydra's own overrides (hydra.*, hydra/launcher=...)."""
    return override.lstrip("~+").startswith("hydra")


def user_overrides(overrides: Sequence[str]) -> list[str]:
    """The app's overrides: Hydra's own are left to Hydra."""
    return [o for o in overrides if not _is_hydras(o)]


def _hydra_overrides(overrides: Sequence[str]) -> list[str]:
    """Hydra's own overrides, in command-line order, as the sweep's config records them for
    its launcher; a sweep over one of Hydra's fields is left to Hydra."""
    parser = OverridesParser.create()
    return [o for o in overrides
            if _is_hydras(o) and not parser.parse_override(o).is_sweep_override()]


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
            close = difflib.get_close_matches(name, options, n=1)
            if close:  # the likely typo first; the whole list is one `--help` away
                return (f"{group}={name}: no such option — did you mean {close[0]}? "
                        f"(all {len(options)}: rnnexp --help)")
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
    `_target_` an override sets or adds (e.g. +hydra.callbacks.x._target_=...). Within a
    Hydra context (`check`): glob() lists the options of the group it sweeps."""
    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() \
        else None
    parser, parsed = OverridesParser.create(config_loader=loader), []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except (OverrideParseException, ValueError) as err:  # ValueError: a 5000-digit int
            shown = text if len(text) <= 80 else text[:60] + "…"
            raise RnnexpError(f"{shown}: {one_line(err)}") from None
    for override in parsed:
        key = override.key_or_group
        if loader is not None and not override.is_delete() and override.value() is None \
                and loader.repository.group_exists(key):
            raise ConfigError(key, "null is not an option of this group",
                              f"choose one of: {', '.join(group_options(key)) or '?'}")
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
    if given and not given[-1].strip().strip("'\""):  # '' would write into the current folder
        raise ConfigError(key, "is empty", "name a folder, e.g. outputs/mine")
    if not given or "${" in given[-1]:
        return  # the default folder under the current directory, or an interpolation
    folder = Path(given[-1]).expanduser().absolute()
    parent = folder
    try:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise NotADirectoryError(f"{parent} is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".rnnexp-check-", dir=parent))
    except OSError as err:
        reason = err.strerror or str(err)
        shown = str(folder) if len(str(folder)) <= 120 else str(folder)[:100] + "…"
        raise ConfigError(key, f"cannot create {shown} ({reason})",
                          "choose a writable folder") from None


# Typed configs of the jobs checked in this process, by their overrides.
_VALIDATED: dict[tuple[str, ...], Config] = {}
# Their config-group choices (model, backend, ...), for jobs composed with Hydra's config.
_CHOICES: dict[tuple[str, ...], dict[str, str]] = {}


def _key(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(user_overrides(overrides)))


def app_choices(choices) -> dict[str, str]:
    """A composed job's config-group choices, Hydra's own (hydra/launcher, ...) left out."""
    return {k: v for k, v in choices.items() if not k.startswith("hydra/")}


def typed(cfg, overrides: Sequence[str]) -> Config:
    """A composed job's typed config: the one `check` made, when it ran in this process."""
    return validated(overrides) or validate(cfg)


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
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        if full_error():  # Hydra's own error and traceback, as the user asked
            raise
        raise RnnexpError(one_line(err)) from None


def _compose_job(job: Sequence[str], hydra_overrides: Sequence[str] = (),
                 config_name: str = CONFIG_NAME):
    """A job's config as the launcher composes it (Hydra's node included), through
    rnnexp.compositions: each distinct set of group choices is composed once, and the
    launcher of this process's sweep finds the composition made here."""
    loader = GlobalHydra.instance().config_loader()
    with _composition_errors_in_one_line():
        return compositions.load(loader, config_name, [*hydra_overrides, *job])


def check_hiding_credentials(overrides: Sequence[str], multirun: bool,
                             **where: str | None) -> tuple[list[str], list[Config]]:
    """`check`, and the overrides Hydra must compose with so that no credential a config
    file holds (a URI's password or token) is recorded: each such value is replaced by its
    hidden form (rnnexp.credentials), and the jobs checked again with it. (overrides, configs)
    """
    configs = check(overrides, multirun, **where)
    plain = OmegaConf.to_container(OmegaConf.structured(configs[0]), resolve=True,
                                   enum_to_str=True) if configs else {}
    extra = credentials.hidden_overrides(plain)
    if not extra:
        return list(overrides), configs
    overrides = [*overrides, *extra]
    return overrides, check(overrides, multirun, **where)


# Launcher fields that are durations in minutes (submitit's): at least one.
LAUNCHER_MINUTES = ("timeout_min",)


def check_run(cfg: DictConfig, multirun: bool) -> None:
    """What a single config cannot say about itself: fields that only mean something in a
    sweep, a run that would record nothing, Hydra folders and launcher limits."""
    if OmegaConf.select(cfg, "resume") and not multirun:
        raise ConfigError("resume", "only applies to a sweep re-run in its folder",
                          "add -m and hydra.sweep.dir=<the sweep's folder>")
    if not OmegaConf.select(cfg, "sinks"):
        raise ConfigError("sinks", "is empty: the measurement would be recorded nowhere",
                          "e.g. sinks=[json,console]")
    subdir = cfg.hydra.sweep._get_node("subdir") if multirun else None
    if subdir is not None:  # unresolved: ${hydra.job.num} is only known in the job
        raw = str(subdir._value())
        if raw.startswith(("/", "~")) or ".." in Path(raw).parts or not raw.strip():
            raise ConfigError("hydra.sweep.subdir", f"'{raw}' leaves the sweep's folder",
                              "use a relative name inside it, e.g. ${hydra.job.num}")
    launcher = OmegaConf.select(cfg, "hydra.launcher") or {}
    for name in LAUNCHER_MINUTES:
        value = launcher.get(name) if multirun else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"hydra.launcher.{name}", f"must be ≥ 1 minute, got {value}")


@contextlib.contextmanager
def _as_hydra_searches(config_path: str | None, config_dir: str | None) -> Iterator[None]:
    """Hydra initialised with the config search path its app will use: the primary config
    folder (--config-path), with --config-dir before it, as Hydra's `_run_hydra` makes it
    (the primary config's own hydra.searchpath is read while composing)."""
    search_path = create_automatic_config_search_path(None, APP_MODULE,
                                                      config_path or str(CONF_DIR))
    if config_dir is not None:
        folder = os.path.abspath(config_dir)
        if not os.path.isdir(folder):
            raise RnnexpError(f"--config-dir: {folder} is not a folder")
        search_path.prepend(provider="command-line", path=f"file://{folder}")
    backup = get_gh_backup()
    Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
    try:
        yield
    finally:
        restore_gh_from_backup(backup)


def check(overrides: Sequence[str], multirun: bool, config_path: str | None = None,
          config_dir: str | None = None, config_name: str | None = None) -> list[Config]:
    """Compose and validate each job (its sinks' and model factory's options too, and every
    `_target_` against the allowlist, Hydra's node included) from the configs Hydra will
    read (--config-path, --config-dir, --config-name); raise RnnexpError with one line on
    the first problem. Nothing is instantiated. Returns the typed configs, in job order."""
    check_output_dir(overrides, multirun)
    configs = []
    name = config_name or CONFIG_NAME
    with _composition_errors_in_one_line(), _as_hydra_searches(config_path, config_dir):
        check_command_line(overrides)
        composed = {}
        hydra_overrides = _hydra_overrides(overrides)
        try:
            jobs = expand_jobs(overrides, multirun)
            if len(jobs) == 1:  # a preset may make this a sweep (hydra.mode, sweeper.params)
                base = _compose_job(jobs[0], hydra_overrides, name)
                composed[_key(jobs[0])] = base
                _CHOICES[_key(jobs[0])] = app_choices(base.hydra.runtime.choices)
                targets.check_hydra(OmegaConf.to_container(base.hydra, resolve=False))
                multirun = multirun or OmegaConf.select(base, "hydra.mode") == RunMode.MULTIRUN
                if multirun:
                    jobs = expand_jobs(overrides, True, sweep_params(base))
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        for job in jobs:
            cfg = composed.get(_key(job)) or _compose_job(job, hydra_overrides, name)
            if not configs:
                check_run(cfg, multirun)
            app = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items()
                   if k != "hydra"}
            targets.check_tree("", app)
            targets.check_hydra(OmegaConf.to_container(cfg.hydra, resolve=False))
            config = validate(cfg)
            sinks.check(config.sinks)
            targets.bind("model.build", config.model.build,  # None: the spec (and weights)
                         *kernel_plugins.factory_args(config.model.build))
            _VALIDATED[_key(job)] = config
            configs.append(config)
    for same in duplicates([MeasurementKey.of_config(c) for c in configs]):
        print_warning(f"jobs {', '.join(map(str, same))} take the same measurement the same way "
                      "(rnnexp.identity): their results are repeats of one — resume counts "
                      "one done for all")
    return configs
