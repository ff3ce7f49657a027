"""Credentials in a URI are used to connect, and never shown or written.

A tracking URI may carry a credential: userinfo (`http://user:secret@host`, any characters,
encoded or not, `@` and `/` included) or a query-string token (`?token=...`). Whatever rnnexp
and Hydra write — the console, results.json, `.hydra/*.yaml`, MLflow params, tags and
artifacts — gets the URI with those parts replaced by `***` (`redact`). So every such URI,
from the command line, MLFLOW_TRACKING_URI or any config file, is replaced early by its
redacted form (`hide`), and the original is kept for the connection only: in this process
and, through the environment variable URIS_ENV, in the processes it starts (joblib workers,
submitit jobs). `reveal` gives it back where the store is contacted. There, an HTTP store's
userinfo goes to MLflow's credential variables (its HTTP client reads them; `take`); a
database store (postgresql://user:pw@...) keeps it in the URI its driver connects with.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any
from urllib.parse import unquote

USERNAME_ENV = "MLFLOW_TRACKING_USERNAME"
PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"
URI_ENV = "MLFLOW_TRACKING_URI"
# {redacted URI: original}, for this process's children; never written anywhere.
URIS_ENV = "RNNEXP_URI_CREDENTIALS"
MASK = "***"

# scheme://userinfo@ — userinfo runs to the last '@' of the URI (a password may hold '@' or
# '/' unencoded); a URI ends at whitespace or a quote.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s'\"]*)@")
# ?token=..., &password=..., &X-Api-Key=...: a query parameter whose name says secret.
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;][A-Za-z0-9_.\-]*(?:token|password|passwd|pwd|secret|key|auth|sig|"
    r"signature|credential)[A-Za-z0-9_.\-]*=)(?P<value>[^&#\s'\"]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with the userinfo and secret query values of every URI in it masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['name']}{MASK}" if m["value"] else m[0], text)


def redact_tree(value: Any) -> Any:
    """`redact` applied to every string in nested dicts/lists."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_tree(v) for v in value)
    return value


def _kept() -> dict[str, str]:
    try:
        kept = json.loads(os.environ.get(URIS_ENV, "{}"))
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


def _keep(pairs: dict[str, str]) -> None:
    if pairs:
        os.environ[URIS_ENV] = json.dumps({**_kept(), **pairs})


def hide(text: str) -> str:
    """`text` redacted; the original is kept for `reveal` (here and in child processes)."""
    redacted = redact(text)
    if redacted != text:
        _keep({redacted: text})
    return redacted


def reveal(uri: str) -> str:
    """The URI `hide` was given for its redacted form (itself if it hid nothing)."""
    return _kept().get(uri, uri)


def take(uri: str) -> str:
    """The URI to connect with. For an HTTP(S) store the userinfo moves to MLflow's
    variables, where its HTTP client reads it; other stores (a database) keep it."""
    m = _USERINFO.match(uri)
    if m is None or m["scheme"].lower() not in ("http://", "https://"):
        return uri
    user, _, password = m["userinfo"].partition(":")
    os.environ[USERNAME_ENV] = unquote(user)
    if password:
        os.environ[PASSWORD_ENV] = unquote(password)
    return m["scheme"] + uri[m.end():]


def _strings(value: Any) -> list[str]:
    """Every string in a parsed override value (nested lists and dicts included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _override_values(argument: str) -> list[str]:
    """The strings a `key=value` argument sets, as Hydra reads them (quotes and escapes
    resolved, each value of a sweep): what the config — and so the store's URI — holds."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = OverridesParser.create().parse_override(argument)
        values = list(override.sweep_iterator()) if override.is_sweep_override() else \
            [override.value()]
    except Exception:  # not an override (a flag's value): the text after the first '='
        return [argument.partition("=")[2].strip("'\"")]
    return _strings(values)


def hide_argument(argument: str) -> str:
    """A command-line argument redacted. What Hydra will compose from it is each value the
    argument sets, so each of those is kept for `reveal` — not only the whole
    `key=value` text, which no config holds."""
    shown = hide(argument)
    if shown != argument:
        # strict=False: a list whose redaction joined two values pairs up as far as it can.
        values = zip(_override_values(shown), _override_values(argument), strict=False)
        _keep({hidden: original for hidden, original in values if hidden != original})
    return shown


def take_from_process(argv: list[str]) -> list[str]:
    """Command-line arguments and MLFLOW_TRACKING_URI with their credentials hidden, before
    Hydra records either anywhere."""
    if os.environ.get(URI_ENV):
        os.environ[URI_ENV] = hide(os.environ[URI_ENV])
    return [hide_argument(a) for a in argv]


def hidden_overrides(config: Any, path: str = "") -> list[str]:
    """Overrides that replace every config value holding a credential (from a config file,
    an interpolation) by its hidden form — for Hydra to compose, record and hand on."""
    if isinstance(config, dict):
        return [o for k, v in config.items()
                for o in hidden_overrides(v, f"{path}.{k}" if path else str(k))]
    if isinstance(config, str) and redact(config) != config:
        value = hide(config).replace("\\", "\\\\").replace("'", "\\'")
        return [f"{path}='{value}'"]
    return []
