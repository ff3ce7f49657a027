"""A search space written in Hydra's sweep syntax, as the dimensions Optuna samples.

`backend=aten,jit,inductor backend.mode=default,max-autotune dtype=float32,bfloat16
bench.num_threads=range(1,5) model=jit shape=small`: an override with one value is fixed for
every cell; one with several (a list, `range()`, `choice()`, `glob()`) is a dimension.

A field under a searched group (`backend.mode` under `backend`) exists only for the options
whose composed config has it: which ones is read from the configs themselves — each option
composed and typed (rnnexp.app.config_check) — not from a list kept here. Such a field is
folded into its group's dimension: `backend` takes the values `backend=aten`,
`backend=inductor backend.mode=default`, `backend=inductor backend.mode=max-autotune`, ...
so every sampler sees a fixed space (no value of a field that does not apply is ever
proposed, and none is counted as a cell of the grid).

The baseline is a cell of the space: the first value of every dimension unless `--baseline`
names others.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from rnnexp.app import config_check
from rnnexp.config import kernel_plugins, schema
from rnnexp.errors import ConfigError, RnnexpError

Params = dict[str, Any]


@dataclass(frozen=True)
class Dimension:
    """One searched key: its values as override texts (a group's value may carry fields that
    exist only for that option, space-separated), or an evenly spaced integer range."""

    name: str
    options: tuple[tuple[str, ...], ...] = ()  # each value's overrides
    ints: Optional[tuple[int, int, int]] = None  # (low, high, step): sampled as an integer

    @property
    def choices(self) -> tuple[str, ...]:
        """The values as Optuna records them: the overrides, space-separated."""
        return tuple(" ".join(o) for o in self.options)

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.ints is not None:
            low, high, step = self.ints
            return optuna.distributions.IntDistribution(low, high, step=step)
        return optuna.distributions.CategoricalDistribution(self.choices)

    def values(self) -> list[Any]:
        if self.ints is not None:
            low, high, step = self.ints
            return list(range(low, high + 1, step))
        return list(self.choices)

    def overrides(self, value: Any) -> list[str]:
        if self.ints is not None:
            return [f"{self.name}={int(value)}"]
        return list(self.options[self.choices.index(value)])


@dataclass
class Space:
    fixed: list[str]
    dimensions: list[Dimension]
    baseline: Params = field(default_factory=dict)

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {d.name: d.distribution() for d in self.dimensions}

    def overrides(self, params: Params) -> list[str]:
        """A cell's own overrides (without the fixed ones), in the dimensions' order."""
        return [o for d in self.dimensions for o in d.overrides(params[d.name])]

    def command_line(self, params: Params) -> list[str]:
        return [*self.fixed, *self.overrides(params)]

    def key(self, params: Params) -> tuple[str, ...]:
        return tuple(self.overrides(params))

    def cells(self) -> Iterator[Params]:
        """Every cell of the grid."""
        for values in itertools.product(*(d.values() for d in self.dimensions)):
            yield dict(zip((d.name for d in self.dimensions), values, strict=True))

    @property
    def size(self) -> int:
        return math.prod(len(d.values()) for d in self.dimensions)

    def label(self, params: Params) -> str:
        """A cell as its overrides, the group's name left out of its own fields."""
        return " ".join(self.overrides(params))


def _parse(texts: Sequence[str], what: str):
    parser = OverridesParser.create()
    out = []
    for text in texts:
        try:
            out += parser.parse_overrides([text])
        except (OverrideParseException, ValueError) as err:
            raise RnnexpError(f"{what} {text}: {config_check.one_line(err)}") from None
    return out


def _field_of(config: Any, path: Sequence[str]) -> bool:
    """Whether the typed config has this field (a dataclass attribute or a dict key)."""
    node = config
    for part in path:
        if isinstance(node, dict):
            if part not in node:
                return False
            node = node[part]
        elif hasattr(node, "__dataclass_fields__"):
            if part not in node.__dataclass_fields__:
                return False
            node = getattr(node, part)
        else:
            return False
    return True


def _typed(overrides: Sequence[str]):
    """The typed config of one cell's command line (the schemas stored first, as the app
    stores them)."""
    schema.register(with_deepbench=any("deepbench" in o for o in overrides))
    kernel_plugins.register()
    return config_check.check(list(overrides), multirun=False)[0]


def _numbers(values: Sequence[str]) -> Optional[tuple[int, int, int]]:
    """(low, high, step) when the values are integers evenly spaced in increasing order."""
    try:
        ints = [int(v) for v in values]
    except ValueError:
        return None
    if len(ints) < 2 or any(str(i) != v.strip() for i, v in zip(ints, values, strict=True)):
        return None
    step = ints[1] - ints[0]
    if step <= 0 or any(b - a != step for a, b in zip(ints, ints[1:], strict=False)):
        return None
    return ints[0], ints[-1], step


def parse(overrides: Sequence[str], baseline: Sequence[str] = ()) -> Space:
    """The space of a command line; every dimension's key and every field folded into a
    group checked against the composed configs, in one line on the first problem."""
    fixed: list[str] = []
    swept: dict[str, list[str]] = {}
    for o in _parse(overrides, "search space:"):
        key = o.get_key_element()
        if not o.is_sweep_override():
            fixed.append(f"{key}={o.get_value_element_as_str()}")
        elif o.is_discrete_sweep():
            values = list(dict.fromkeys(o.sweep_string_iterator()))
            swept[key] = values
        else:
            raise ConfigError(key, f"{o.input_line}: an interval has no list of values "
                              "to search", "use range(start,stop,step) or a,b,c")
    if not swept:
        raise RnnexpError("search space: nothing to search — give at least one key several "
                          "values, e.g. backend=aten,jit,inductor bench.num_threads=1,2")
    fixed_keys = {f.split("=", 1)[0].lstrip("+~") for f in fixed}
    both = sorted(fixed_keys & swept.keys())
    if both:
        raise ConfigError(both[0], "is both fixed and searched", "give it once")
    groups = [k for k in swept if config_check.group_options(k)]
    # A field under a searched group goes with that group's options that have it.
    folded: dict[str, list[str]] = {g: [] for g in groups}
    for key in swept:
        owner = next((g for g in groups if key.startswith(g + ".")), None)
        if owner is not None:
            folded[owner].append(key)
    dims: list[Dimension] = []
    for key, values in swept.items():
        if any(key in fields for fields in folded.values()):
            continue
        if key in folded:
            dims.append(Dimension(key, _group_choices(key, values, folded[key], swept, fixed)))
        else:
            numbers = _numbers(values)
            options = tuple((f"{key}={v}",) for v in values) if numbers is None else ()
            dims.append(Dimension(key, options, numbers))
    space = Space(fixed=fixed, dimensions=dims)
    space.baseline = _baseline(space, baseline)
    _typed(space.command_line(space.baseline))  # the baseline composes and validates
    return space


def _group_choices(group: str, options: Sequence[str], fields: Sequence[str],
                   swept: dict[str, list[str]], fixed: Sequence[str]
                   ) -> tuple[tuple[str, ...], ...]:
    """Each option of `group`, times the values of the searched fields it has."""
    applies: dict[str, list[str]] = {f: [] for f in fields}
    choices: list[tuple[str, ...]] = []
    for option in options:
        typed = _typed([*fixed, f"{group}={option}"])
        own = [f for f in fields if _field_of(typed, f.split("."))]
        for f in own:
            applies[f].append(option)
        for values in itertools.product(*(swept[f] for f in own)):
            choices.append((f"{group}={option}",
                            *(f"{f}={v}" for f, v in zip(own, values, strict=True))))
    for f, owners in applies.items():
        if not owners:
            raise ConfigError(f, f"is a field of no {group} searched here "
                              f"({group}={','.join(options)})",
                              f"search a {group} that has it, or drop {f}")
    return tuple(choices)


def _baseline(space: Space, given: Sequence[str]) -> Params:
    """The first value of every dimension, or the ones `--baseline` names (which must be
    values of the space)."""
    asked: dict[str, str] = {}
    for o in _parse(given, "--baseline"):
        if o.is_sweep_override():
            raise RnnexpError(f"--baseline {o.input_line}: one value per key, e.g. "
                              "backend=aten")
        asked[o.get_key_element()] = o.get_value_element_as_str()
    params: Params = {}
    used: set[str] = set()
    for d in space.dimensions:
        mine = {k: v for k, v in asked.items() if k == d.name or k.startswith(d.name + ".")}
        used |= mine.keys()
        if d.ints is not None:
            value = int(mine[d.name]) if d.name in mine and mine[d.name].lstrip("-").isdigit() \
                else d.ints[0] if d.name not in mine else None
            if value is None or value not in d.values():
                raise RnnexpError(f"--baseline {d.name}={mine[d.name]}: not a value of the "
                                  f"space — {d.name} takes {d.values()}")
            params[d.name] = value
            continue
        wanted = {f"{k}={v}" for k, v in mine.items()}
        match = next((c for c in d.choices if wanted <= set(d.overrides(c))), None)
        if match is None:
            shown = " ".join(sorted(wanted))
            raise RnnexpError(f"--baseline {shown}: not a value of the space — {d.name} takes "
                              + ", ".join(" ".join(d.overrides(c)) for c in d.choices))
        params[d.name] = match
    unknown = sorted(asked.keys() - used)
    if unknown:
        raise RnnexpError(f"--baseline {unknown[0]}: not searched — the space searches "
                          + ", ".join(d.name for d in space.dimensions))
    return params
