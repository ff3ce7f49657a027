"""Credentials never travel inside a tracking URI.

A URI's userinfo (`http://user:secret@host:5000`) would be copied into everything rnnexp
and Hydra write: the console, results.json, `.hydra/*.yaml`, MLflow params and tags. MLflow
reads HTTP credentials from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, so the
userinfo is moved there (for this process and the ones it starts) and the URI goes on
without it; anything else shown or written passes through `redact`.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

USERNAME_ENV = "MLFLOW_TRACKING_USERNAME"
PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"
URI_ENV = "MLFLOW_TRACKING_URI"

# scheme://userinfo@ — userinfo holds no '/', '@' or whitespace.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s]+)@")


def redact(text: str) -> str:
    """`text` with the userinfo of every URI in it replaced by `***`."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def redact_tree(value: Any) -> Any:
    """`redact` applied to every string in nested dicts/lists."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_tree(v) for v in value)
    return value


def take(text: str) -> str:
    """`text` with URI userinfo removed; the credentials go to MLflow's variables (the
    last ones found win), where its HTTP client reads them."""
    def move(m: re.Match) -> str:
        user, _, password = m["userinfo"].partition(":")
        os.environ[USERNAME_ENV] = unquote(user)
        if password:
            os.environ[PASSWORD_ENV] = unquote(password)
        return m["scheme"]

    return _USERINFO.sub(move, text)


def take_from_process(argv: list[str]) -> list[str]:
    """Command-line arguments and MLFLOW_TRACKING_URI without credentials (moved to MLflow's
    variables), before Hydra records either anywhere."""
    if os.environ.get(URI_ENV):
        os.environ[URI_ENV] = take(os.environ[URI_ENV])
    return [take(a) for a in argv]
