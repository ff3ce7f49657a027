"""The one place a config's `_target_` becomes a call.

Models, backends and sinks are named in config by `_target_`. Only callables of the project's
own package may be named (plus module prefixes listed in `RNNEXP_TARGETS`, comma-separated,
for user extensions), and nested `_target_`s are never instantiated: they reach the callable
as the plain dicts they are. Options the callable does not take are refused in one line.

`check_tree` applies the allowlist to every `_target_` of a composed config and of the
command line, at any depth, before Hydra instantiates anything (it instantiates its
callbacks, launcher and sweeper itself; those may also name Hydra's own classes).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from typing import Any, Callable, Mapping

from hydra.utils import get_object

from rnnexp.errors import ConfigError

PROJECT_PREFIX = "rnnexp."
EXTRA_ENV = "RNNEXP_TARGETS"
# What Hydra's own nodes (hydra.callbacks, hydra.launcher, hydra.sweeper) may name besides.
HYDRA_PREFIXES = ("hydra.", "hydra_plugins.")


def allowed_prefixes() -> tuple[str, ...]:
    extra = [p.strip() for p in os.environ.get(EXTRA_ENV, "").split(",") if p.strip()]
    return (PROJECT_PREFIX, *(p if p.endswith(".") else p + "." for p in extra))


def check_tree(field: str, node: Any) -> None:
    """Every `_target_` in `node` (nested dicts/lists, any depth) passes `check_target`."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{field}.{key}" if field else str(key)
            if key == "_target_":
                check_target(field, value, hydra=field == "hydra" or
                             field.startswith("hydra."))
            else:
                check_tree(path, value)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_tree(f"{field}[{i}]", value)


def check_target(field: str, target: Any, hydra: bool = False) -> str:
    """The target path if it may be called; ConfigError naming `field` otherwise. `hydra`:
    a node of Hydra's own config, which may also name Hydra's classes."""
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{field}._target_", f"must name a callable, got {target!r}")
    if not target.startswith(allowed_prefixes() + (HYDRA_PREFIXES if hydra else ())):
        raise ConfigError(f"{field}._target_", f"'{target}' is outside rnnexp",
                          f"only rnnexp.* callables may be named (extensions: list their "
                          f"module prefix in {EXTRA_ENV})")
    return target


def resolve(field: str, target: Any) -> Callable[..., Any]:
    path = check_target(field, target)
    try:
        fn = get_object(path)
    except Exception:
        raise ConfigError(f"{field}._target_", f"'{path}' cannot be imported",
                          "check the module and name") from None
    if not callable(fn):
        raise ConfigError(f"{field}._target_", f"'{path}' is not callable")
    return fn


def options_of(node: Any) -> dict[str, Any]:
    """The options of a target node (a dict or a schema dataclass), `_target_` left out."""
    if dataclasses.is_dataclass(node):
        data = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
    elif isinstance(node, Mapping):
        data = dict(node)
    else:
        raise ConfigError(field="?", problem=f"not a target node: {node!r}")
    data.pop("_target_", None)
    return data


def target_of(node: Any) -> Any:
    return getattr(node, "_target_", None) if dataclasses.is_dataclass(node) else \
        node.get("_target_")


def bind(field: str, node: Any, *args: Any, **context: Any) -> Callable[..., Any]:
    """The callable of `node`, once its options are known to fit its signature (args and
    context stand for what the caller passes besides; their values do not matter)."""
    fn = resolve(field, target_of(node))
    options = options_of(node)
    try:
        signature = inspect.signature(fn)
        signature.bind(*args, **context, **options)
    except TypeError as err:
        raise ConfigError(field, _unknown_option(err, options, signature)) from None
    except ValueError:  # no signature to check (a builtin): let the call decide
        pass
    return fn


def call(field: str, node: Any, *args: Any, **context: Any) -> Any:
    """`node._target_(*args, **context, **options)`; the options are the node's other keys."""
    return bind(field, node, *args, **context)(*args, **context, **options_of(node))


def _unknown_option(err: TypeError, options: Mapping[str, Any],
                    signature: inspect.Signature) -> str:
    takes = [n for n, p in signature.parameters.items()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for name in options:
        if name not in takes and not any(p.kind == p.VAR_KEYWORD
                                         for p in signature.parameters.values()):
            close = difflib.get_close_matches(name, takes, n=1)
            hint = f" — did you mean {close[0]}?" if close else \
                f" — it takes {', '.join(takes) or 'no options'}"
            return f"no option '{name}'{hint}"
    return str(err)
