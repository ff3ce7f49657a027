"""The MLflow sink: every job a run, every sweep a parent run with its jobs as children.

Everything MLflow lives here: the store connection (`store`), what a run holds (`runs`), the
sweep's parent run, and working offline — an unreachable store costs one warning and the
results stay on disk for `python -m rnnexp sync`. Nothing here raises into a job.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from rnnexp.config import credentials
from rnnexp.errors import ConfigError
from rnnexp.machine import platform
from rnnexp.results.result import RESULTS_FILE, Result
from rnnexp.results.sinks import Jobs, Sink, Sweep
from rnnexp.results.sinks.mlflow import runs, store, view


def check_uri(uri: str) -> None:
    if uri.startswith("sqlite:") and not (uri.startswith("sqlite:////")
                                          or uri == "sqlite:///:memory:"):
        raise ConfigError("sinks.mlflow.uri", f"'{uri}' is not an absolute SQLite path",
                          "use sqlite:////abs/path/mlflow.db")
    if "://" not in uri and uri not in ("databricks", "databricks-uc"):
        raise ConfigError("sinks.mlflow.uri", f"'{uri}' is not a tracking URI",
                          "use sqlite:////abs/path/mlflow.db or http://host:port")
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in STORE_SCHEMES:
        raise ConfigError("sinks.mlflow.uri", f"'{uri}': no MLflow store serves {scheme}://",
                          f"use one of {', '.join(s + '://' for s in STORE_SCHEMES)}")
    path = store.sqlite_path(uri)
    if path is not None and not path.exists():
        _check_creatable(path)


# What MLflow's tracking stores serve (a database through SQLAlchemy, + a driver allowed).
STORE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks",
                 "databricks-uc")


def _check_creatable(path: Path) -> None:
    """A SQLite store that does not exist yet can be made where it is named."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)) or \
            str(path).startswith(("/proc/", "/sys/")):
        raise ConfigError("sinks.mlflow.uri", f"cannot create {path} ({parent} is not a "
                          "writable folder)", "choose a writable folder")


# MLflow's longest experiment name (mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH, read
# there by a test: importing MLflow costs seconds the config check does not spend).
MAX_EXPERIMENT_NAME = 500

# The stores whose saved view this process has seen to (once each, failed or not): whether
# the store holds it.
_VIEW_SAVED: dict[tuple[str, str], bool] = {}


class Mlflow(Sink):
    @classmethod
    def check_options(cls, uri: str, experiment: str = "rnnexp") -> None:
        check_uri(credentials.redact(str(uri)))
        cls.check_experiment(experiment)

    @staticmethod
    def check_experiment(experiment: str) -> None:
        """A name MLflow takes, checked before anything is measured (MLflow checks it only
        when the run is recorded)."""
        if not str(experiment).strip():
            raise ConfigError("sinks.mlflow.experiment", "is empty", "name the MLflow experiment")
        if len(str(experiment)) > MAX_EXPERIMENT_NAME:
            raise ConfigError("sinks.mlflow.experiment",
                              f"is {len(str(experiment))} characters long; MLflow takes at "
                              f"most {MAX_EXPERIMENT_NAME}", "choose a shorter name")

    def __init__(self, uri: str, experiment: str = "rnnexp"):
        self.check_options(uri, experiment)
        # Shown and written redacted; the store connects with the original (store.connect).
        self.uri, self.experiment = credentials.hide(uri), experiment

    @contextmanager
    def client(self) -> Iterator[tuple[object, str]]:
        """(MlflowClient, experiment id), creating the store and experiment on first use."""
        with store.http_limits():
            yield store.connect(self.uri, self.experiment)

    def _state(self, sweep: Optional[Sweep]) -> dict:
        return sweep.state.get(self.name, {}) if sweep else {}

    def on_sweep_start(self, sweep: Sweep) -> None:
        state = sweep.state.setdefault(self.name, {"run_id": None})
        state.pop("offline", None)
        try:
            # Store and experiment exist before any job starts: parallel jobs on a fresh
            # SQLite file would race on its schema migration.
            with self.client() as (client, exp_id):
                # A resumed sweep goes on under its parent run, if this store holds it.
                if not (state["run_id"] and runs.reopen_parent(client, state["run_id"])):
                    state["run_id"] = runs.open_parent(client, exp_id, sweep,
                                                       platform.git_commit())
                self._save_view(client, exp_id)
        except Exception as err:
            store.warn_offline(self.uri, err, sweep.path)
            # Jobs then skip the store instead of each waiting on it and warning again.
            state["offline"] = store.short_reason(err)

    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        state = self._state(sweep)
        if state.get("offline"):  # the sweep already warned, naming its folder for sync
            return
        if not (Path(output_dir) / RESULTS_FILE).exists():
            result.save(output_dir)  # the run's artifact and identity
        try:
            with self.client() as (client, exp_id):
                runs.log_result(client, exp_id, result, output_dir,
                                parent_run_id=state.get("run_id"),
                                sweep_name=sweep.name if sweep else "")
                self._save_view(client, exp_id)
                if sweep is None:  # a sweep's link comes once, at its end
                    self._print_link(exp_id)
        except Exception as err:
            store.warn_offline(self.uri, err, output_dir)

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        run_id = self._state(sweep).get("run_id")
        if not run_id:
            return
        try:
            with self.client() as (client, exp_id):
                runs.close_parent(client, run_id, jobs, sweep.path)
                self._print_link(exp_id)
        except Exception as err:
            store.warn_offline(self.uri, err, sweep.path)

    def on_abort(self, sweep: Sweep, result: Result) -> None:
        """Hydra ends a sweep cut short without `on_multirun_end`: end the parent run too
        (FAILED or KILLED, with the reason) rather than leave it RUNNING."""
        run_id = self._state(sweep).get("run_id")
        if not run_id:
            return
        try:
            with self.client() as (client, _):
                runs.end_parent(client, run_id, result)
        except Exception as err:
            store.warn_offline(self.uri, err, sweep.path)

    def _save_view(self, client, exp_id: str) -> None:
        """The experiment's saved view (view.py), once per process: a failure to store it
        costs one warning line, never a run."""
        key = (self.uri, self.experiment)
        if key in _VIEW_SAVED:
            return
        _VIEW_SAVED[key] = False
        try:
            view.save(client, exp_id)
            _VIEW_SAVED[key] = True
        except Exception as err:
            from rnnexp.results.report import print_warning

            print_warning(f"MLflow view '{view.SHARE_KEY}' not saved "
                          f"({credentials.redact(store.short_reason(err))}) — the runs are "
                          "recorded; pick their columns in the UI instead")

    def _print_link(self, exp_id: str) -> None:
        """`MLflow: <address of the saved view>` (of the runs table where the store lacks
        it), and for a database store how to serve it."""
        from rnnexp.config.schema import PROJECT_TRACKING_URI
        from rnnexp.results.report import console

        url = view.link(self.uri, exp_id, shared=_VIEW_SAVED.get((self.uri, self.experiment),
                                                                  False))
        if url is None:
            return
        if self.uri.split(":", 1)[0].lower() in ("http", "https"):
            serve = ""
        elif self.uri == PROJECT_TRACKING_URI:
            serve = "  (make ui)"
        else:
            serve = f"  (mlflow ui --backend-store-uri {credentials.redact(self.uri)})"
        console.print(f"MLflow: {url}{serve}", highlight=False, markup=False, soft_wrap=True)

    def upload(self, jobs: Jobs, sweep: Optional[Sweep]) -> tuple[int, int]:
        """Upload saved results (a run folder, or a sweep's jobs under its parent run, made if
        the store has none); skips what the store already holds. (uploaded, skipped)."""
        from rnnexp.results.report import console

        done = []
        with self.client() as (client, exp_id):
            parent = new_parent = None
            if sweep is not None:
                parent = runs.find_parent(client, exp_id, sweep.sweep_id)
            for folder, result in jobs:
                existing = runs.find_recorded(client, exp_id,
                                              runs.result_id(folder / RESULTS_FILE))
                if existing:
                    console.print(f"  already recorded  {result.label}  (run {existing})",
                                  highlight=False, markup=False)
                    done.append(False)
                    continue
                if sweep is not None and parent is None:  # made once a job needs it
                    parent = new_parent = runs.open_parent(client, exp_id, sweep,
                                                           jobs[0][1].git_commit)
                run_id = runs.log_result(client, exp_id, result, folder, parent_run_id=parent,
                                         sweep_name=sweep.name if sweep else "")
                console.print(f"  uploaded          {result.label}  → run {run_id}",
                              highlight=False, markup=False)
                done.append(True)
            if parent and (new_parent or any(done)):
                runs.close_parent(client, parent, jobs, sweep.path,  # type: ignore[union-attr]
                                  read_only=True)
            self._save_view(client, exp_id)
            self._print_link(exp_id)
        return sum(done), len(done) - sum(done)

