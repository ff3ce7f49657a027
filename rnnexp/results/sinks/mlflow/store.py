"""Reaching an MLflow store: the client, the experiment, and failing fast when it is down."""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from filelock import FileLock
from rich.markup import escape

from rnnexp.config.credentials import redact, reveal
from rnnexp.config.credentials import take as take_credentials
from rnnexp.errors import RnnexpError

# Alembic and MLflow log every schema migration of a fresh SQLite store at INFO.
for _name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent", "mlflow.store"):
    logging.getLogger(_name).setLevel(logging.WARNING)

# MLflow retries an HTTP request 7 times with backoff and a 120 s timeout by default: minutes
# of hanging when the server is down. The results are on disk, so fail fast instead.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


class StoreError(RnnexpError):
    """The tracking store cannot be used (unreachable, missing, not an MLflow store)."""


@contextmanager
def http_limits(limits: Mapping[str, str] = HTTP_LIMITS) -> Iterator[None]:
    """Low retry/timeout for MLflow's HTTP client (or `limits`), unless the user set their
    own."""
    added = {k: v for k, v in limits.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def sqlite_path(uri: str) -> Path | None:
    # sqlite:////abs/path.db → /abs/path.db (urlparse would keep a leading "//")
    if not uri.startswith("sqlite:///") or uri.endswith(":memory:"):
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0])


def artifact_location(uri: str) -> str | None:
    """Artifacts of a SQLite store next to the DB file; MLflow's default is ./mlruns of
    whatever the cwd is when the experiment is created. A server decides for itself."""
    path = sqlite_path(uri)
    return str(path.parent / "mlruns") if path else None


# How long a process waits for another one creating or migrating the same SQLite store.
LOCK_TIMEOUT_S = 120


@contextmanager
def creation_lock(uri: str) -> Iterator[None]:
    """Held while a SQLite store is opened: the first use creates its schema (MLflow's
    migrations), and two processes doing that at once leave one of them failing. A file
    lock beside the DB makes every other process wait until the schema exists."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
        yield


class Connections:
    """The (MlflowClient, experiment id) of each (store URI, experiment) this process opened:
    the basic launcher runs every job of a sweep in the process that opened the sweep's
    parent run, so each job reuses the connection instead of building a client and looking
    the experiment up again. A SQLite store whose file went away is opened afresh."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str], tuple[object, str]] = {}

    def get(self, uri: str, experiment: str, create: bool):
        key, path = (uri, experiment), sqlite_path(uri)
        if key not in self._made or (path is not None and not path.exists()):
            self._made[key] = _open(uri, experiment, create)
        return self._made[key]

    def clear(self) -> None:
        """Forget every connection, as a new process starts without them."""
        self._made.clear()


CONNECTIONS = Connections()  # this process's


def connect(uri: str, experiment: str, create: bool = True):
    """(MlflowClient, experiment id), made once per process and store (CONNECTIONS);
    creates the SQLite file and the experiment if asked.

    Creation is race-safe: the store's schema and the experiment are made under a file lock
    (several single runs started together on a fresh SQLite store), and a concurrent
    creator's experiment is picked up if create_experiment loses (a server).
    """
    # The credentials hidden from the config: an HTTP store's userinfo → MLflow's variables.
    return CONNECTIONS.get(take_credentials(reveal(uri)), experiment, create)


def _open(uri: str, experiment: str, create: bool):
    path = sqlite_path(uri)
    if path is not None:
        if not create and not path.exists():
            raise StoreError(f"no MLflow store at {path} — check --tracking-uri")
        path.parent.mkdir(parents=True, exist_ok=True)
    with creation_lock(uri):
        return _connect(uri, experiment, create)


# MLflow 3's UI opens an experiment of unknown kind on its GenAI overview (traces, judges);
# this kind opens it on the runs table, where rnnexp's runs are.
EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def _connect(uri: str, experiment: str, create: bool):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        if not create:
            raise StoreError(f"no experiment '{experiment}' at {redact(uri)} — check "
                             "--experiment")
        try:
            return client, client.create_experiment(experiment,
                                                    artifact_location=artifact_location(uri),
                                                    tags={EXPERIMENT_KIND: MODEL_TRAINING})
        except Exception:
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                raise
    if create and EXPERIMENT_KIND not in exp.tags:  # made by an earlier rnnexp
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
    return client, exp.experiment_id


def short_reason(err: BaseException) -> str:
    """The cause in a few words: MLflow wraps a refused connection in three exceptions."""
    text = str(err).strip()
    os_error = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
    if os_error:
        return os_error.group(1).strip()
    if "Max retries exceeded" in text or "timed out" in text.lower():
        return "no answer"
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


def warn_offline(uri: str, err: BaseException, output_dir: Path | None = None) -> None:
    from rnnexp.results.report import err_console

    where = f"results kept in {output_dir}; upload later: python -m rnnexp sync {output_dir}" \
        if output_dir else "results kept on disk; upload later with python -m rnnexp sync"
    err_console.print(f"[yellow]warning:[/] MLflow store {escape(redact(uri))} not reachable "
                      f"({escape(redact(short_reason(err)))}) — {escape(where)}",
                      highlight=False, soft_wrap=True)
