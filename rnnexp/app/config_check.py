"""Compose and validate jobs' configs before anything runs, and say what is wrong in one
line.

Three moments, each at a public extension point of Hydra (docs/architecture.md):
- `gate`, before Hydra starts (rnnexp.app.cli): the command line's grammar and `_target_`s, the
  run/sweep folder, a single run's values (before the `_target_` check imports torch), and
  the `_target_`s of the config Hydra is about to compose — its own node's callbacks,
  launcher and sweeper are built by Hydra before any plugin of rnnexp runs. A single run's
  composition here is the one it runs with (`run`).
- `check_composed`, on each job Hydra composed: for a single run from the `RunCheck`
  callback (rnnexp.app.callback) before the run folder exists; for a sweep from rnnexp's
  sweeper (`validate_batch_is_legal`), every job before any runs or any folder is made.
- `check`, the same for a command line without Hydra's app around it (tests, the harness).
Hydra reports composition errors over several lines; `one_line` keeps the field and what
would work.
"""

from __future__ import annotations

import contextlib
import copy
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
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from rnnexp.config import compositions, credentials, hydra_private, kernel_plugins, targets
from rnnexp.config.schema import CONF_DIR, Config, closest, validate
from rnnexp.errors import ConfigError, RnnexpError, full_error
from rnnexp.results.identity import MeasurementKey, duplicates
from rnnexp.results.report import print_warning

CONFIG_NAME = "config"
# The module of the Hydra app: a relative --config-path is relative to its package.
APP_MODULE = "rnnexp.app.cli"


def group_options(group: str) -> list[str]:
    folder = CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def parsed(overrides: Sequence[str]) -> list[tuple[str, Optional[Override]]]:
    """Each override with Hydra's reading of it (None: not one — `check_command_line` says
    why, in one line)."""
    parser = OverridesParser.create()
    out: list[tuple[str, Optional[Override]]] = []
    for text in overrides:
        try:
            out.append((text, parser.parse_overrides([text])[0]))
        except (OverrideParseException, ValueError):  # ValueError: a 5000-digit int
            out.append((text, None))
    return out


def names_deepbench(overrides: Sequence[str]) -> bool:
    """Whether a command line names DeepBench — its group (`+deepbench=…`) or a value such as
    the preset `+experiment=deepbench`: only then are its 110 problems stored (0.19 s)."""
    # A sweep's value reads as its elements (ChoiceSweep(list=[...]), Glob(include=[...])).
    return any(o is not None and "deepbench" in f"{o.key_or_group} {o.value()}"
               for _, o in parsed(overrides))


def _is_hydras(override: Optional[Override]) -> bool:
    """One of Hydra's own overrides (hydra.*, hydra/launcher=...)."""
    key = override.key_or_group if override is not None else ""
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def user_overrides(overrides: Sequence[str]) -> list[str]:
    """The app's overrides: Hydra's own are left to Hydra."""
    return [text for text, o in parsed(overrides) if not _is_hydras(o)]


def _hydra_overrides(overrides: Sequence[str]) -> list[str]:
    """Hydra's own overrides, in command-line order, as the sweep's config records them for
    its launcher; a sweep over one of Hydra's fields is left to Hydra."""
    return [text for text, o in parsed(overrides)
            if o is not None and _is_hydras(o) and not o.is_sweep_override()]


def _loader() -> Optional[ConfigLoader]:
    """The config loader of the Hydra context this runs in, if any: `glob(*)` lists the
    options of a group through it."""
    hydra = GlobalHydra.instance()
    return hydra.config_loader() if hydra.is_initialized() else None


def _no_list(override: Override) -> ConfigError:
    """interval(a,b): a search space for an optimising sweeper, not a list of jobs."""
    return ConfigError(override.get_key_element(), f"{override.input_line}: an interval has "
                       "no list of values to run", "use range(start,stop,step) or a,b,c")


def _nothing_selected(override: Override) -> ConfigError:
    """A sweep whose values are none (glob() matching no option, range(0,0)) would be a
    sweep of no job: refused, never run as an empty sweep."""
    key = override.key_or_group
    options = group_options(key)
    return ConfigError(key, f"{override.input_line}: selects no value — the sweep would have "
                       "no job", f"choose from: {', '.join(options)}" if options else
                       "give at least one value")


def expand(parsed: Sequence[Override]) -> list[list[str]]:
    """The jobs of a sweep in Hydra's override grammar: every combination of each key's
    values (a list, `range()`, `choice()`, `glob()`), in command-line order; a key given
    twice takes its last value, as Hydra's basic sweeper does (the command line itself may
    not: `check_command_line`), so a preset's parameter gives way to the command line's."""
    by_key: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            by_key[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            if not by_key[key]:
                raise _nothing_selected(override)
        else:
            raise _no_list(override)
    return [list(job) for job in itertools.product(*by_key.values())]


def _value_text(override: Override) -> str:
    """An override's value as a command line would give it (a sweep's, comma-separated)."""
    if override.is_discrete_sweep():
        return ",".join(override.sweep_string_iterator())
    if override.is_sweep_override():
        return str(override.value())  # interval(…): refused as no list of jobs
    return override.get_value_element_as_str()


def _given_twice(parsed: Sequence[Override]) -> None:
    """A key given twice on one command line (`model=lstm model=gru`) is refused: Hydra would
    take the last without a word, so a preset line pasted before a choice, or a typo in a long
    command, would measure something else than the command reads. Runs and sweeps alike."""
    seen: dict[str, Override] = {}
    for override in parsed:
        key = override.key_or_group + (f"@{override.package}" if override.package else "")
        first = seen.get(key)
        if first is not None:
            both = [first.input_line, override.input_line]
            values = ",".join(_value_text(o) for o in (first, override)
                              if o.value_type is not None)
            raise ConfigError(override.key_or_group, f"given twice ({' then '.join(both)})",
                              "give it once; to measure each, sweep them: "
                              f"-m {override.key_or_group}={values}")
        seen[key] = override


def expand_jobs(overrides: Sequence[str], multirun: bool,
                preset_params: Sequence[str] = (),
                loader: Optional[ConfigLoader] = None) -> list[list[str]]:
    """The override list of every job the command line describes (Hydra's sweep grammar);
    `preset_params` are sweep parameters a config defines (hydra.sweeper.params), which the
    command line overrides. `loader`: for `glob()` (default: the current Hydra context's)."""
    user = user_overrides(overrides)
    if not multirun:
        return [user]
    keys = {o.key_or_group for _, o in parsed(user) if o}  # `+key=` replaces `key=` too
    params = [text for text, o in parsed(preset_params) if o is None or o.key_or_group
              not in keys]
    parser = OverridesParser.create(config_loader=loader or _loader())
    return expand(parser.parse_overrides([*params, *user]))


def sweep_params(cfg) -> list[str]:
    """A composed config's own sweep (hydra.sweeper.params, e.g. from a preset)."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return [f"{k}={v}" for k, v in params.items()]


# What people call an option by another name: difflib would take `gpu` for `cpu`.
ALIASES = {
    "device": {"gpu": "cuda", "nvidia": "cuda", "rocm": "cuda", "hip": "cuda", "amd": "cuda"},
    "backend": {"eager": "aten", "native": "aten", "torchscript": "jit", "script": "jit",
                "nnc": "te", "tensorexpr": "te", "compile": "inductor",
                "torch.compile": "inductor", "rocm": "miopen", "cuda": "cudnn"},
}


def one_line(err: BaseException) -> str:
    """A Hydra/OmegaConf composition error reduced to its field and what would work."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        options = group_options(group)
        if group and options:
            alias = ALIASES.get(group, {}).get(name.lower())
            close = [alias] if alias in options else \
                difflib.get_close_matches(name, options, n=1)
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
        plain = _plain_value_error(key, msg, getattr(cause, "object_type", None))
        if plain:
            return plain
        return f"{key}: {msg}" if key else msg
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    ambiguous = re.match(r"Ambiguous value for argument '(([^=']+)=[^']*)'", first)
    if ambiguous:  # a sweep's values in a run: Hydra's three ways out, on the one line
        whole, key = ambiguous.groups()
        return (f"{whole}: several values outside a sweep — to sweep them add -m; a list is "
                f"{key}=[…], a string {key}='…'")
    return first


# OmegaConf's words for a value of the wrong type, and what a person reads instead.
_KINDS = {"Integer": "a whole number", "Float": "a number"}


def _plain_value_error(key: str, msg: str, schema: Any) -> str:
    """OmegaConf's conversion errors (`Value 'ten' of type 'str' could not be converted to
    Integer`) as what the field takes, with the schema's default as the example; '' for
    any other message."""
    if not key:
        return ""
    example = _example(key, schema)
    eg = f" — e.g. {key}={example}" if example is not None else ""
    found = re.match(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", msg)
    if found and found.group(2) in _KINDS:
        return f"{key}: '{found.group(1)}' is not {_KINDS[found.group(2)]}{eg}"
    found = re.match(r"Value '(.*)' is not a valid bool", msg)
    if found:
        return f"{key}: '{found.group(1)}' is not true or false{eg}"
    found = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
    if found:
        options = [o.strip() for o in found.group(2).split(",")]
        close = difflib.get_close_matches(found.group(1), options, n=1)
        return (f"{key}: '{found.group(1)}' is not one of {', '.join(options)}"
                + (f" — did you mean {close[0]}?" if close else ""))
    if re.match(r"field '.*' is not Optional", msg):
        return f"{key}: cannot be null{eg or ' — give it a value'}"
    return ""


def _example(key: str, schema: Any) -> Any:
    """The schema's default for `key` (a field of the dataclass `schema`), as typed."""
    if not dataclasses.is_dataclass(schema):
        return None
    name = key.rsplit(".", 1)[-1]
    for f in dataclasses.fields(schema):
        if f.name == name and f.default is not dataclasses.MISSING and f.default is not None:
            value = f.default
            return str(value).lower() if isinstance(value, bool) else \
                getattr(value, "value", value)
    return None


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
    _given_twice(parsed)
    for override in parsed:
        key = override.key_or_group
        if override.is_discrete_sweep() and not list(override.sweep_iterator()):
            raise _nothing_selected(override)
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
    given = [str(o.value() or "") for _, o in parsed(overrides)
             if o is not None and o.key_or_group == key and not o.is_delete()]
    if given and not given[-1].strip():  # '' would write into the current folder
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


RESULTS_FILE = "rnnexp.results.sinks.results_file.ResultsFile"


def check_run(cfg: DictConfig, multirun: bool) -> None:
    """What a single config cannot say about itself: fields that only mean something in a
    sweep, a run that would record nothing, Hydra folders and launcher limits."""
    if OmegaConf.select(cfg, "resume") and not multirun:
        raise ConfigError("resume", "only applies to a sweep re-run in its folder",
                          "add -m and hydra.sweep.dir=<the sweep's folder>")
    if not OmegaConf.select(cfg, "sinks"):
        raise ConfigError("sinks", "is empty: the measurement would be recorded nowhere",
                          "e.g. sinks=[json,console]")
    if multirun and not any(str((s or {}).get("_target_", "")) == RESULTS_FILE
                            for s in OmegaConf.to_container(cfg.sinks).values()):
        # The sweep's summary, its report and `compare` read each job's results.json.
        raise ConfigError("sinks", "has no json: a sweep's jobs would leave no results.json "
                          "for its summary, report and compare",
                          "add json, e.g. sinks=[json,console]")
    # Unresolved: ${hydra.job.num} is only known in the job.
    subdir = OmegaConf.to_container(cfg.hydra.sweep).get("subdir") if multirun else None
    if subdir is not None:
        raw = str(subdir)
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


def _uses_hydra_resolver(node: Any) -> bool:
    if isinstance(node, str):
        return "${hydra:" in node
    if isinstance(node, dict):
        return any(_uses_hydra_resolver(v) for v in node.values())
    if isinstance(node, list):
        return any(_uses_hydra_resolver(v) for v in node)
    return False


# Fields of Hydra's node that Hydra sets only once a sweep's job runs: `${hydra:…}` of them in
# the app's fields cannot be checked with the rest of the sweep before any job starts.
JOB_TIME = ("job.num", "job.id", "runtime.output_dir")


def check_job(cfg: DictConfig, num: Optional[int] = None) -> Config:
    """One composed job: every `_target_` against the allowlist (Hydra's node included), the
    schema, the sinks' and the model factory's options. Nothing is instantiated."""
    from rnnexp.results import sinks  # with the Result it imports torch: not for the gate

    app = _app_fields(cfg)
    targets.check_tree("", app)
    targets.check_hydra(OmegaConf.to_container(cfg.hydra, resolve=False))
    if not _uses_hydra_resolver(app):
        config = CHECKED_RUN.gated(app) or validate(cfg)
    else:
        try:
            with hydra_resolvable(cfg, num):
                config = validate(cfg)
        except OmegaConfBaseException as err:
            missing = [f for f in JOB_TIME if f"hydra:{f}" in str(app)]
            if not missing or full_error():
                raise
            field = getattr(err, "full_key", "") or "a field"
            raise ConfigError(field, f"${{hydra:{missing[0]}}} is known only once a sweep's "
                              "job runs, after every job is checked",
                              "use it in Hydra's own fields (hydra.sweep.subdir, …), or "
                              "${hydra:…} of what composing knows: runtime.cwd, job.name, "
                              "job.override_dirname, runtime.choices, sweep.dir") from None
    sinks.check(config.sinks)
    targets.bind("model.build", config.model.build,  # None: the spec (and weights)
                 *kernel_plugins.factory_args(config.model.build))
    return config


def check_composed(cfgs: Iterable[DictConfig], multirun: bool) -> list[Config]:
    """Every job of a run or sweep (`cfgs` may compose them as they are read), in one line
    on the first problem; their typed configs, in job order."""
    configs: list[Config] = []
    with one_line_errors():
        for num, cfg in enumerate(cfgs):
            if not configs:
                check_run(cfg, multirun)
            configs.append(check_job(cfg, num if multirun else None))
    for same in duplicates([MeasurementKey.of_config(c) for c in configs]):
        print_warning(f"jobs {', '.join(map(str, same))} take the same measurement the same way "
                      "(rnnexp.results.identity): their results are repeats of one — resume counts "
                      "one done for all")
    return configs


class CheckedRun:
    """A single run's typed config on its way through the process, validated once: from the
    gate (its values, checked before Hydra composes) to the check of the config Hydra
    composed (rnnexp.app.callback.RunCheck, before Hydra makes the run's folder), and from
    there to its task function — Hydra hands a callback's work to no one, so it waits here
    until the task takes it. Not kept when what the check resolved may read otherwise in
    the task: `${hydra:…}` in the app's fields (the check ran before the run's folder was
    claimed: rnnexp.app.run_dir), or a job that Hydra gives an environment
    (hydra.job.env_set, read by `${oc.env:…}` and the store's URI) or another working folder
    (hydra.job.chdir); the task types such a config itself."""

    def __init__(self) -> None:
        self._config: Optional[Config] = None
        self._gated: Optional[tuple[dict, Config]] = None

    def gate(self, app: dict, config: Config) -> None:
        """The gate's typed config of the app's fields `app` (unresolved, Hydra's node
        left out)."""
        self._gated = (app, config)

    def gated(self, app: dict) -> Optional[Config]:
        """The gate's typed config, once, when Hydra composed the same app fields (no
        credential of a config file was hidden in between, no resolver of Hydra's read)."""
        gated, self._gated = self._gated, None
        return gated[1] if gated is not None and gated[0] == app else None

    def keep(self, cfg: DictConfig, config: Config) -> None:
        moved = OmegaConf.select(cfg, "hydra.job.env_set") or \
            OmegaConf.select(cfg, "hydra.job.chdir")
        self._config = None if moved or _uses_hydra_resolver(_app_fields(cfg)) else config

    def take(self) -> Optional[Config]:
        config, self._config = self._config, None
        return config


# The one process-wide slot of it (a process runs one single run).
CHECKED_RUN = CheckedRun()


def _searching(config_path: str | None, config_dir: str | None):
    """A Hydra context with the config search path the app will have."""
    return hydra_private.app_search(APP_MODULE, config_path or str(CONF_DIR), config_dir)


def _composed(loader: ConfigLoader, name: str, overrides: Sequence[str],
              multirun: bool) -> DictConfig:
    """The config Hydra composes for the command line (for a sweep: without its sweeps)."""
    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    return loader.load_configuration(name, list(overrides), mode)


@dataclasses.dataclass
class Gated:
    """What the gate hands on: the overrides Hydra must compose the run with besides the
    command line's (each credential a config file holds, in its hidden form), and for a
    single run that runs as the gate composed it, that composition — the job's one: `run`
    runs it, and Hydra does not compose it again."""

    hidden: list[str]
    composed: Optional[DictConfig] = None


def gate(overrides: Sequence[str], multirun: bool, config_path: str | None = None,
         config_dir: str | None = None, config_name: str | None = None) -> Gated:
    """What must hold before Hydra builds anything: the command line (grammar, `_target_`s,
    its folder), and the config Hydra composes from it (a single run's values, then the
    `_target_`s of its app tree and of Hydra's node). Returns the overrides Hydra must add
    so that no credential a config file holds (a URI's password or token) is recorded —
    each such value replaced by its hidden form (rnnexp.config.credentials) — and a single
    run's composition with them (`run` runs it)."""
    check_output_dir(overrides, multirun)
    name = config_name or CONFIG_NAME
    with one_line_errors(), _searching(config_path, config_dir):
        check_command_line(overrides)
        loader = GlobalHydra.instance().config_loader()
        try:
            # A single run through the kept compositions: its hidden credentials, if any,
            # are then set on the same composition rather than composed again.
            cfg = _composed(loader, name, overrides, multirun) if multirun else \
                compositions.load(loader, name, overrides)
        except OverrideParseException as err:
            raise RnnexpError(f"command line: {one_line(err)}") from None
        app = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        fields = _app_fields(cfg)
        single = _runs_as_composed(cfg, multirun)
        if single:
            config = check_values(cfg)
            if not _uses_hydra_resolver(fields):
                CHECKED_RUN.gate(fields, config)
        targets.check_tree("", fields)
        targets.check_hydra(OmegaConf.to_container(cfg.hydra, resolve=False))
        with hydra_resolvable(cfg):
            plain = OmegaConf.to_container(app, resolve=True)
        hidden = credentials.hidden_overrides(plain)
        # As hydra.main runs it: the hidden values, and `hydra.mode=RUN` where the config
        # leaves the mode open, added to the command line.
        run = [*overrides, *hidden, *(["hydra.mode=RUN"] if cfg.hydra.mode is None else [])]
        if single and len(run) > len(overrides):
            cfg = compositions.load(loader, name, run)
    # hydra.verbose: Hydra's debug listing (plugins, search path, defaults tree) comes from
    # its own composition — that diagnostic run goes through hydra.main.
    return Gated(hidden, cfg if single and not cfg.hydra.verbose else None)


def run(gated: Gated, task_function: Any, config_path: str | None = None,
        config_dir: str | None = None, config_name: str | None = None) -> None:
    """A single run's job from the gate's composition, in the Hydra context `hydra.main`
    would make for it (rnnexp.config.hydra_private.run_composed)."""
    assert gated.composed is not None
    with _searching(config_path, config_dir):
        hydra_private.run_composed(gated.composed, task_function,
                                   config_name or CONFIG_NAME)


def _runs_as_composed(cfg: DictConfig, multirun: bool) -> bool:
    """Whether the gate's composition is the job Hydra will run, values and all: a single
    run (not a sweep, whose jobs add their own values, nor a preset that makes it one) whose
    job gets no other environment or folder to resolve its values in."""
    return not (multirun or OmegaConf.select(cfg, "hydra.mode") == RunMode.MULTIRUN
                or OmegaConf.select(cfg, "hydra.job.env_set")
                or OmegaConf.select(cfg, "hydra.job.chdir"))


def check_values(cfg: DictConfig) -> Config:
    """A single run's values against the schema, before the `_target_` check imports the
    models (and torch, seconds): a bad value is reported at once. The callback checks the
    config Hydra composes; where its app fields are these, it takes this typed config
    (CHECKED_RUN) rather than validating them again."""
    check_run(cfg, multirun=False)
    with hydra_resolvable(cfg):
        return validate(cfg)


def _app_fields(cfg: DictConfig) -> dict:
    """The app's fields of a composed config, unresolved: Hydra's node left out."""
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}


@contextlib.contextmanager
def hydra_resolvable(cfg: DictConfig, num: Optional[int] = None) -> Iterator[None]:
    """`${hydra:…}` in the app's fields resolves against this composition's Hydra node, as
    it does in the job Hydra runs later (Hydra sets it only then) — with what Hydra adds for
    the job: its folder, and in a sweep (`num`: the job's number) its number. Hydra marks
    the node it is given read-only: it gets a copy."""
    hc = HydraConfig.instance()
    saved = hc.cfg
    copied = copy.deepcopy(cfg)
    with open_dict(copied):
        if num is not None:
            copied.hydra.job.num = copied.hydra.job.id = num
            folder = Path(str(copied.hydra.sweep.dir)) / str(copied.hydra.sweep.subdir)
        else:
            folder = Path(str(copied.hydra.run.dir))
        if OmegaConf.is_missing(copied.hydra.runtime, "output_dir") and \
                (num is not None or copied.hydra.mode != RunMode.MULTIRUN):
            copied.hydra.runtime.output_dir = str(folder.absolute())
    hc.set_config(copied)
    try:
        yield
    finally:
        hc.cfg = saved


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
