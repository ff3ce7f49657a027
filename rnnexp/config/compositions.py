"""A sweep's job configs composed once per distinct set of config-group choices, shared by
the config check and the launcher.

Hydra composes every job from scratch (~0.07 s each on a 2-core machine): the config check
(rnnexp.app.config_check) composes a job to validate it, then the launcher composes it again to
run it. A job's config is the composition of its group choices (`model=jit`: which YAML
files) with its plain `key=value` overrides applied on top — Hydra itself applies those
after composing, with `OmegaConf.update`, as `apply` does here. So the
composition of each distinct set of group choices and Hydra overrides is kept, and a job is
a copy of it with its plain overrides applied and the fields of Hydra's node that
`load_configuration` derives from the job's overrides set again (`hydra.overrides.task`,
`hydra.job.override_dirname`; `hydra.job.name` when it came from the running app). A sweep
over values (seeds, shapes) composes once; a sweep over a group composes each choice once,
in the check, and the launcher reuses it. Both reach it through the public `ConfigLoader`
Hydra hands its plugins (`hydra_context.config_loader`): rnnexp's sweeper and launcher call
`load`; other launchers compose as Hydra does.
"""

from __future__ import annotations

import copy
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobRuntime
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException


@dataclass
class _Base:
    cfg: DictConfig
    job_name: str  # the running app's name when it was composed (see `load`)


# By (search path, config name, group choices), the most recently used last. One takes
# ~0.25 MB: a sweep over more distinct choices than this composes the rest as Hydra would.
_BASES: OrderedDict[tuple, _Base] = OrderedDict()
KEPT = 128


# Fields Hydra reads while composing (where the YAML files come from; the environment
# variables it copies into hydra.job.env_set; whether the job is named after the app):
# overrides of these are composed with the choices.
_READ_WHILE_COMPOSING = ("hydra.searchpath", "hydra.job.env_copy", "hydra.job.env_set",
                         "hydra.job.name")


# The groups under a parent group, by (search path, parent): listing them reads every
# source of the search path (~2.5 ms), and a job's plain overrides ask several times.
_GROUPS: dict[tuple[str, str], frozenset[str]] = {}


def is_group(loader: ConfigLoader, key: str) -> bool:
    """`key` names a config group (`model`, `hydra/launcher`), not a config value."""
    parent, _, name = key.replace(".", "/").rpartition("/")
    where = (str(loader.get_search_path()), parent)
    if where not in _GROUPS:
        _GROUPS[where] = frozenset(loader.list_groups(parent))
    return name in _GROUPS[where]


def _plain(loader: ConfigLoader, override: Override) -> bool:
    """What Hydra's defaults list treats as a config value, applied after composing (Hydra's
    own `hydra.sweep.dir=...`, `hydra.mode=...` too), rather than a group choice."""
    key = override.key_or_group
    if override.package is not None or any(key == k or key.startswith(k + ".")
                                           for k in _READ_WHILE_COMPOSING):
        return False
    return not (override.is_add() or override.is_force_add() or override.is_delete()
                or override.is_sweep_override()) \
        and not isinstance(override.value(), dict) and not is_group(loader, key)


def apply(overrides: Sequence[Override], cfg: DictConfig) -> None:
    """Plain `key=value` overrides set on a composed config, as Hydra sets them after
    composing (OmegaConf.update, merging; a key the config lacks needs `+`)."""
    for override in overrides:
        try:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        except (ConfigAttributeError, ConfigKeyError) as err:
            raise ConfigCompositionException(
                f"Could not override '{override.key_or_group}'.\nTo append to your config use "
                f"+{override.input_line}") from err
        except OmegaConfBaseException as err:
            raise ConfigCompositionException(f"Error merging override {override.input_line}"
                                             ).with_traceback(err.__traceback__) from err


def override_dirname(overrides: Sequence[Override], exclude_keys: Sequence[str],
                     item_sep: str, kv_sep: str) -> str:
    """hydra.job.override_dirname, as Hydra derives it from a job's overrides."""
    lines = sorted(str(o.input_line) for o in overrides if o.key_or_group not in exclude_keys)
    return re.sub("=", kv_sep, item_sep.join(lines))


def load(loader: ConfigLoader, config_name: str, overrides: Sequence[str]) -> DictConfig:
    """What `loader.load_configuration(config_name, overrides, RunMode.RUN)` returns."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    is_plain = [_plain(loader, o) for o in parsed]
    plain = [o for o, p in zip(parsed, is_plain, strict=True) if p]
    choices = tuple(o.input_line for o, p in zip(parsed, is_plain, strict=True) if not p)
    key = (str(loader.get_search_path()), config_name, choices)
    name = JobRuntime.instance().get("name")
    base = _BASES.get(key)
    # Hydra names the job after the running app unless the config names it: a base whose
    # name may be the app's of its time is composed again under another app's.
    if base is None or (base.job_name != name and base.cfg.hydra.job.name == base.job_name):
        base = _BASES[key] = _Base(loader.load_configuration(config_name, list(choices),
                                                             RunMode.RUN), name)
        if len(_BASES) > KEPT:
            _BASES.popitem(last=False)
    _BASES.move_to_end(key)
    cfg = copy.deepcopy(base.cfg)
    apply(plain, cfg)
    app = [o for o in parsed if not o.is_hydra_override()]
    dirname = cfg.hydra.job.config.override_dirname
    with open_dict(cfg.hydra):
        cfg.hydra.overrides.hydra = [o.input_line for o in parsed if o.is_hydra_override()]
        cfg.hydra.overrides.task = [o.input_line for o in app]
        cfg.hydra.job.override_dirname = override_dirname(
            overrides=app, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep,
            exclude_keys=dirname.exclude_keys)
        cfg.hydra.runtime.cwd = os.getcwd()
    return cfg


def load_sweep_config(loader: ConfigLoader, master_config: DictConfig,
                      sweep_overrides: Sequence[str]) -> DictConfig:
    """What `loader.load_sweep_config(master_config, sweep_overrides)` returns: a sweep's
    job composed with the sweep's own Hydra overrides, through `load`."""
    overrides: Any = OmegaConf.to_container(master_config.hydra.overrides.hydra)
    cfg = load(loader, master_config.hydra.job.config_name, [*overrides, *sweep_overrides])
    # As Hydra does: the same resolved values (timestamps) as the sweep's own config.
    OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
    return cfg
