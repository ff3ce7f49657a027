"""Compose and validate jobs' configs before anything runs, and say what is wrong in one
line.

Three moments, each at a public extension point of Hydra (docs/architecture.md):
- `gate`, before Hydra starts (rnnexp.app.cli): the command line's grammar and `_target_`s, the
  run/sweep folder, and the `_target_`s of the config Hydra is about to compose — its own
  node's callbacks, launcher and sweeper are built by Hydra before any plugin of rnnexp runs.
- `check_composed`, on each job Hydra composed: for a single run from the `RunCheck`
  callback (rnnexp.app.callback) before the run folder exists; for a sweep from rnnexp's
  sweeper (`validate_batch_is_legal`), every job before any runs or any folder is made.
- `check`, the same for a command line without Hydra's app around it (tests, the harness).
Hydra reports composition errors over several lines; `one_line` keeps the field and what
would work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rnnexp.config import compositions, credentials, hydra_private, kernel_plugins, targets
from rnnexp.config.schema import CONF_DIR, Config, closest, validate
from rnnexp.errors import ConfigError, RnnexpError, full_error
from rnnexp.results import sinks
from rnnexp.results.identity import MeasurementKey, duplicates
from rnnexp.results.report import print_warning

CONFIG_NAME = "config"
# The module of the Hydra app: a relative --config-path is relative to its package.
APP_MODULE = "rnnexp.app.cli"


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


def _loader() -> Optional[ConfigLoader]:
    """The config loader of the Hydra context this runs in, if any: `glob(*)` lists the
    options of a group through it."""
    hydra = GlobalHydra.instance()
    return hydra.config_loader() if hydra.is_initialized() else None


def _no_list(override: Override) -> ConfigError:
    """interval(a,b): a search space for an optimising sweeper, not a list of jobs."""
    return ConfigError(override.get_key_element(), f"{override.input_line}: an interval has "
                       "no list of values to run", "use range(start,stop,step) or a,b,c")


def expand(parsed: Sequence[Override]) -> list[list[str]]:
    """The jobs of a sweep in Hydra's override grammar: every combination of each key's
    values (a list, `range()`, `choice()`, `glob()`), in command-line order; a key given
    twice takes its last value, as Hydra's basic sweeper does."""
    by_key: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            by_key[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise _no_list(override)
    return [list(job) for job in itertools.product(*by_key.values())]


def expand_jobs(overrides: Sequence[str], multirun: bool,
                preset_params: Sequence[str] = (),
                loader: Optional[ConfigLoader] = None) -> list[list[str]]:
    """The override list of every job the command line describes (Hydra's sweep grammar);
    `preset_params` are sweep parameters a config defines (hydra.sweeper.params), which the
    command line overrides. `loader`: for `glob()` (default: the current Hydra context's)."""
    user = user_overrides(overrides)
    if not multirun:
        return [user]
    keys = {o.split("=", 1)[0].lstrip("~+") for o in user}  # `+key=` replaces `key=` too
    params = [p for p in preset_params if p.split("=", 1)[0] not in keys]
    parser = OverridesParser.create(config_loader=loader or _loader())
    return expand(parser.parse_overrides([*params, *user]))


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
    loader = _loader()
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
                and compositions.is_group(loader, key):
            raise ConfigError(key, "null is not an option of this group",
                              f"choose one of: {', '.join(group_options(key)) or '?'}")
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise _no_list(override)
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


def app_choices(choices) -> dict[str, str]:
    """A composed job's config-group choices, Hydra's own (hydra/launcher, ...) left out."""
    return {k: v for k, v in choices.items() if not k.startswith("hydra/")}


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Hydra's and OmegaConf's errors as RnnexpError with one line (`one_line`)."""
    try:
        yield
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        if full_error():  # Hydra's own error and traceback, as the user asked
            raise
        raise RnnexpError(one_line(err)) from None


# Launcher fields that are durations in minutes (submitit's), or counts (rnnexp_slurm's
# windows a task, tasks at once): at least one.
LAUNCHER_MINUTES = ("timeout_min",)
LAUNCHER_COUNTS = ("windows_per_task", "array_parallelism")


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
    for name in (*LAUNCHER_MINUTES, *LAUNCHER_COUNTS):
        value = launcher.get(name) if multirun else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            unit = " minute" if name in LAUNCHER_MINUTES else ""
            raise ConfigError(f"hydra.launcher.{name}", f"must be ≥ 1{unit}, got {value}")


def check_job(cfg: DictConfig) -> Config:
    """One composed job: every `_target_` against the allowlist (Hydra's node included), the
    schema, the sinks' and the model factory's options. Nothing is instantiated."""
    app = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}
    targets.check_tree("", app)
    targets.check_hydra(OmegaConf.to_container(cfg.hydra, resolve=False))
    config = validate(cfg)
    sinks.check(config.sinks)
    targets.bind("model.build", config.model.build,  # None: the spec (and weights)
                 *kernel_plugins.factory_args(config.model.build))
    return config


def check_composed(cfgs: Iterable[DictConfig], multirun: bool) -> list[Config]:
    """Every job of a run or sweep (`cfgs` may compose them as they are read), in one line
    on the first problem; their typed configs, in job order."""
    configs: list[Config] = []
    with one_line_errors():
        for cfg in cfgs:
            if not configs:
                check_run(cfg, multirun)
            configs.append(check_job(cfg))
    for same in duplicates([MeasurementKey.of_config(c) for c in configs]):
        print_warning(f"jobs {', '.join(map(str, same))} take the same measurement the same way "
                      "(rnnexp.results.identity): their results are repeats of one — resume counts "
                      "one done for all")
    return configs


def _searching(config_path: str | None, config_dir: str | None):
    """A Hydra context with the config search path the app will have."""
    return hydra_private.app_search(APP_MODULE, config_path or str(CONF_DIR), config_dir)


def _composed(loader: ConfigLoader, name: str, overrides: Sequence[str],
              multirun: bool) -> DictConfig:
    """The config Hydra composes for the command line (for a sweep: without its sweeps)."""
    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    return loader.load_configuration(name, list(overrides), mode)


def gate(overrides: Sequence[str], multirun: bool, config_path: str | None = None,
         config_dir: str | None = None, config_name: str | None = None) -> list[str]:
    """What must hold before Hydra builds anything: the command line (grammar, `_target_`s,
    its folder), and the config Hydra composes from it (the `_target_`s of its app tree and
    of Hydra's node). Returns the overrides Hydra must compose with so that no credential a
    config file holds (a URI's password or token) is recorded: each such value replaced by
    its hidden form (rnnexp.config.credentials)."""
    check_output_dir(overrides, multirun)
    with one_line_errors(), _searching(config_path, config_dir):
        check_command_line(overrides)
        loader = GlobalHydra.instance().config_loader()
        try:
            cfg = _composed(loader, config_name or CONFIG_NAME, overrides, multirun)
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        app = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        targets.check_tree("", OmegaConf.to_container(app, resolve=False))
        targets.check_hydra(OmegaConf.to_container(cfg.hydra, resolve=False))
        plain = OmegaConf.to_container(app, resolve=True)
    return [*overrides, *credentials.hidden_overrides(plain)]


def check(overrides: Sequence[str], multirun: bool, config_path: str | None = None,
          config_dir: str | None = None, config_name: str | None = None) -> list[Config]:
    """Compose and validate each job of a command line, as `gate` and then the callback or
    sweeper of a run would (a preset's `hydra.sweeper.params` and `hydra.mode` included);
    raise RnnexpError with one line on the first problem. Returns the typed configs."""
    check_output_dir(overrides, multirun)
    name = config_name or CONFIG_NAME
    with one_line_errors(), _searching(config_path, config_dir):
        check_command_line(overrides)
        loader = GlobalHydra.instance().config_loader()
        hydra_overrides = _hydra_overrides(overrides)
        try:
            jobs = expand_jobs(overrides, multirun, loader=loader)
            if len(jobs) == 1:  # a preset may make this a sweep (hydra.mode, sweeper.params)
                base = compositions.load(loader, name, [*hydra_overrides, *jobs[0]])
                targets.check_hydra(OmegaConf.to_container(base.hydra, resolve=False))
                multirun = multirun or OmegaConf.select(base, "hydra.mode") == RunMode.MULTIRUN
                if multirun:
                    jobs = expand_jobs(overrides, True, sweep_params(base), loader)
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        return check_composed((compositions.load(loader, name, [*hydra_overrides, *job])
                               for job in jobs), multirun)
