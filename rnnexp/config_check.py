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

from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rnnexp import compositions, sinks, targets
from rnnexp.errors import ConfigError, RnnexpError, full_error
from rnnexp.schema import Config, closest, validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
CONFIG_NAME = "config"


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
        if full_error():  # Hydra's own error and traceback, as the user asked
            raise
        raise RnnexpError(one_line(err)) from None


def _compose_job(job: Sequence[str], hydra_overrides: Sequence[str] = ()):
    """A job's config as the launcher composes it (Hydra's node included), through
    rnnexp.compositions: each distinct set of group choices is composed once, and the
    launcher of this process's sweep finds the composition made here."""
    loader = GlobalHydra.instance().config_loader()
    with _composition_errors_in_one_line():
        return compositions.load(loader, CONFIG_NAME, [*hydra_overrides, *job])


def check(overrides: Sequence[str], multirun: bool) -> list[Config]:
    """Compose and validate each job (its sinks' and model factory's options too, and every
    `_target_` against the allowlist); raise RnnexpError with one line on the first problem.
    Returns the typed configs, in job order."""
    check_command_line(overrides)
    check_output_dir(overrides, multirun)
    configs = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = {}
        hydra_overrides = _hydra_overrides(overrides)
        try:
            jobs = expand_jobs(overrides, multirun)
            if len(jobs) == 1:  # a preset may make this a sweep (hydra.mode, sweeper.params)
                base = _compose_job(jobs[0], hydra_overrides)
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
        for job in jobs:
            cfg = composed.get(_key(job)) or _compose_job(job, hydra_overrides)
            app = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items()
                   if k != "hydra"}
            targets.check_tree("", app)
            config = validate(cfg)
            sinks.build(config.sinks)
            targets.bind("model.build", config.model.build, None)  # None: the spec
            _VALIDATED[_key(job)] = config
            configs.append(config)
    return configs
