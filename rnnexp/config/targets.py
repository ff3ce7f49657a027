"""The one place a config's `_target_` becomes a call.

Models, backends and sinks are named in config by `_target_`. A target is judged by what it
resolves to, without calling anything: a class or function *defined* in the project's own
package (or in a module prefix listed in `RNNEXP_TARGETS`, comma-separated, for user
extensions), named by the path it is defined at — never a path through a module's imports
(`rnnexp.app.cli.os.system` is `os.system`). Where a node has a role, the target must also fill
it: a sink is a `Sink` subclass, a backend a `Backend` (or a factory of rnnexp.backends), a
model factory a function of rnnexp.models or the factory an installed kernel plugin declares
(rnnexp.config.kernel_plugins); Hydra's callbacks, launcher and sweeper (which
Hydra instantiates itself) its own `Callback`, `Launcher` and `Sweeper` classes, which may
also come from Hydra and its plugins. Hydra instantiates nested `_target_`s of the nodes it
builds before the node itself, so those nodes may hold none; elsewhere nested `_target_`s are
never instantiated: they reach the callable as the plain dicts they are. Options the
callable does not take are refused in one line.

`check_tree` applies this to every `_target_` of a composed config and of the command line,
at any depth, before anything is instantiated; `check_hydra` to Hydra's own node, logging
configs included (`logging.config.dictConfig` calls what `()` and `class` name).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import os
from typing import Any, Callable, Mapping, Optional

from rnnexp.errors import ConfigError

PROJECT_PREFIX = "rnnexp."
EXTRA_ENV = "RNNEXP_TARGETS"
# What Hydra's own nodes (hydra.callbacks, hydra.launcher, hydra.sweeper) may name besides.
HYDRA_PREFIXES = ("hydra.", "hydra_plugins.")
# Hydra-side fields whose `_target_` Hydra instantiates (with any nested `_target_`s first).
HYDRA_BUILT = ("hydra.callbacks.", "hydra.launcher", "hydra.sweeper")
# What logging's dictConfig may build from Hydra's logging configs: handler, formatter and
# filter classes of these packages (Hydra's defaults use logging's and colorlog's).
LOGGING_PREFIXES = ("logging.", "hydra.", "colorlog.", "rich.logging.")
LOGGING_NODES = ("hydra.job_logging", "hydra.hydra_logging")
# Environment variables a config may not set for the job (hydra.job.env_set): each makes a
# process the job starts load code (LD_PRELOAD, PYTHONSTARTUP, ...) or widens the allowlist.
UNSAFE_ENV = ("LD_", "DYLD_", "PYTHON", "RNNEXP_", "BASH_ENV", "ENV", "PATH", "MLFLOW_")


def allowed_prefixes() -> tuple[str, ...]:
    extra = [p.strip() for p in os.environ.get(EXTRA_ENV, "").split(",") if p.strip()]
    return (PROJECT_PREFIX, *(p if p.endswith(".") else p + "." for p in extra))


def _refuse(field: str, problem: str, hint: str = "") -> ConfigError:
    return ConfigError(f"{field}._target_", problem, hint or
                       f"only classes and functions defined in rnnexp may be named "
                       f"(extensions: list their module prefix in {EXTRA_ENV})")


def _lookup(field: str, path: str) -> Any:
    """The object at `path`: its longest importable module prefix, then attributes. Only
    modules under an allowed prefix are ever imported (the caller checked the prefix)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
                continue  # no such module: try the next shorter prefix
            raise _refuse(field, f"'{path}' cannot be imported ({err})",
                          "check the module and name") from None
        except Exception as err:
            raise _refuse(field, f"'{path}' cannot be imported "
                          f"({type(err).__name__}: {err})", "check the module and name") from None
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise _refuse(field, f"'{path}' cannot be imported", "check the module and name")
            obj = getattr(obj, attr)
        return obj
    raise _refuse(field, f"'{path}' cannot be imported", "check the module and name")


def _role(field: str) -> Optional[tuple[str, Callable[[Any], bool], tuple[str, ...]]]:
    """(what the node must be, the test, extra prefixes it may come from) for a node whose
    target rnnexp or Hydra calls; None for any other node."""
    def subclass(module: str, name: str) -> Callable[[Any], bool]:
        def test(obj: Any) -> bool:
            base = getattr(importlib.import_module(module), name)
            return inspect.isclass(obj) and issubclass(obj, base)
        return test

    def function_in(*prefixes: str) -> Callable[[Any], bool]:
        return lambda obj: obj.__module__.startswith(
            tuple(p for p in prefixes) + allowed_prefixes()[1:])

    if field.startswith("sinks.") and field.count(".") == 1:
        return "an rnnexp Sink", subclass("rnnexp.results.sinks", "Sink"), ()
    if field == "backend":
        backend = subclass("rnnexp.backends.base", "Backend")
        factory = function_in("rnnexp.backends.")
        return "a Backend (or a factory in rnnexp.backends)", \
            lambda o: backend(o) or (inspect.isfunction(o) and factory(o)), ()
    if field == "model.build":
        models = function_in("rnnexp.models.")
        return "a model factory of rnnexp.models (or of an installed kernel plugin)", \
            lambda o: models(o) or _declared_kernel(f"{o.__module__}.{o.__qualname__}"), ()
    if field.startswith("hydra.callbacks.") and field.count(".") == 2:
        return "a Hydra Callback", subclass("hydra.experimental.callback", "Callback"), \
            HYDRA_PREFIXES
    if field == "hydra.launcher":
        return "a Hydra Launcher", subclass("hydra.plugins.launcher", "Launcher"), \
            HYDRA_PREFIXES
    if field == "hydra.sweeper":
        return "a Hydra Sweeper", subclass("hydra.plugins.sweeper", "Sweeper"), HYDRA_PREFIXES
    return None


def _declared_kernel(path: str) -> bool:
    """An installed package declares `path` as a kernel's factory (entry point group
    rnnexp.kernels): admitted for model.build because it is installed, not because a config
    names it."""
    from rnnexp.config import kernel_plugins

    return kernel_plugins.declaring(path) is not None


def check_target(field: str, target: Any, hydra: bool = False) -> Any:
    """What `target` names, if a node at `field` may name it; ConfigError naming `field`
    otherwise. Nothing is called. (`hydra` is kept for callers; the field says it.)"""
    if not isinstance(target, str) or not target:
        raise _refuse(field, f"must name a class or function, got {target!r}")
    role = _role(field)
    prefixes = allowed_prefixes() + (role[2] if role else ())
    if field == "model.build" and not target.startswith(prefixes) and \
            _declared_kernel(target):
        prefixes += (target,)  # an installed plugin declares it (rnnexp.config.kernel_plugins)
    if not target.startswith(prefixes):
        raise _refuse(field, f"'{target}' is outside rnnexp")
    obj = _lookup(field, target)
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    defined_at = f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) \
        else None
    if defined_at is not None and defined_at != target:
        if not defined_at.startswith(prefixes):
            raise _refuse(field, f"'{target}' is {defined_at}, which is outside rnnexp")
        raise _refuse(field, f"'{target}' is an import",
                      f"name it where it is defined: {defined_at}")
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        raise _refuse(field, f"'{target}' is not a class or function")
    if role and not role[1](obj):
        raise _refuse(field, f"'{target}' is not {role[0]}", f"name {role[0]} here")
    return obj


def check_tree(field: str, node: Any) -> None:
    """Every `_target_` in `node` (nested dicts/lists, any depth) passes `check_target`; a
    node Hydra instantiates holds no nested `_target_`."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{field}.{key}" if field else str(key)
            if key == "_target_":
                check_target(field, value)
                if field.startswith(HYDRA_BUILT) and _role(field) is not None:
                    for key2, value2 in node.items():
                        if key2 != "_target_":
                            _no_nested_targets(field, f"{field}.{key2}", value2)
            else:
                check_tree(path, value)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_tree(f"{field}[{i}]", value)


def _no_nested_targets(built: str, field: str, node: Any) -> None:
    """No `_target_` inside `built` (at `field`): Hydra would call it while building."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "_target_":
                raise _refuse(field, f"Hydra would call it while building {built}",
                              f"options of {built} may not name a _target_")
            _no_nested_targets(built, f"{field}.{key}", value)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _no_nested_targets(built, f"{field}[{i}]", value)


def check_hydra(node: Mapping[str, Any]) -> None:
    """Hydra's own node of a composed config: its callbacks, launcher and sweeper targets,
    the callables its logging configs name, and the environment it sets for jobs."""
    check_tree("hydra", node)
    for name in LOGGING_NODES:
        _check_logging(name, (node or {}).get(name.split(".", 1)[1]))
    env = ((node or {}).get("job") or {}).get("env_set") or {}
    for key in env:
        if str(key).upper().startswith(UNSAFE_ENV):
            raise ConfigError(f"hydra.job.env_set.{key}", "may not be set by a config "
                              "(it would make the job's processes load other code)",
                              "set it in the environment before starting rnnexp")


def _check_logging(field: str, node: Any) -> None:
    """dictConfig builds what `()` (any factory) and `class` (handlers, formatters) name,
    and imports what `ext://` names: only logging classes of known packages."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{field}.{key}"
            if key in ("()", "class") and isinstance(value, str):
                _check_logging_class(path, value)
            elif isinstance(value, str) and value.startswith("ext://") and \
                    value not in ("ext://sys.stdout", "ext://sys.stderr"):
                raise ConfigError(path, f"'{value}' is not allowed",
                                  "use ext://sys.stdout or ext://sys.stderr")
            else:
                _check_logging(path, value)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _check_logging(f"{field}[{i}]", value)


def _check_logging_class(field: str, path: str) -> None:
    import logging

    prefixes = LOGGING_PREFIXES + allowed_prefixes()
    ok = path.startswith(prefixes)
    if ok:
        try:
            obj = _lookup(field, path)
        except ConfigError:
            ok = False
        else:
            ok = inspect.isclass(obj) and issubclass(
                obj, (logging.Handler, logging.Formatter, logging.Filter)) and \
                obj.__module__.startswith(tuple(p.rstrip(".") for p in prefixes))
    if not ok:
        raise ConfigError(field, f"'{path}' is not a logging handler, formatter or filter "
                          "class", "name one of logging's (e.g. logging.StreamHandler)")


def resolve(field: str, target: Any) -> Callable[..., Any]:
    return check_target(field, target)


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
