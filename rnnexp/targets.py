"""The one place a config's `_target_` becomes a call.

Models, backends and sinks are named in config by `_target_`. Only callables of the project's
own package may be named (plus module prefixes listed in `RNNEXP_TARGETS`, comma-separated,
for user extensions), and nested `_target_`s are never instantiated: they reach the callable
as the plain dicts they are. Options the callable does not take are refused in one line.
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


def allowed_prefixes() -> tuple[str, ...]:
    extra = [p.strip() for p in os.environ.get(EXTRA_ENV, "").split(",") if p.strip()]
    return (PROJECT_PREFIX, *(p if p.endswith(".") else p + "." for p in extra))


def check_target(field: str, target: Any) -> str:
    """The target path if it may be called; ConfigError naming `field` otherwise."""
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{field}._target_", f"must name a callable, got {target!r}")
    if not target.startswith(allowed_prefixes()):
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


def call(field: str, node: Any, *args: Any, **context: Any) -> Any:
    """`node._target_(*args, **context, **options)`; the options are the node's other keys."""
    fn = resolve(field, target_of(node))
    options = options_of(node)
    try:
        signature = inspect.signature(fn)
        signature.bind(*args, **context, **options)
    except TypeError as err:
        raise ConfigError(field, _unknown_option(err, options, signature)) from None
    except ValueError:  # no signature to check (a builtin): let the call decide
        pass
    return fn(*args, **context, **options)


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
