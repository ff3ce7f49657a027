"""Which runs `rnnexp compare` and the tools beside it read: a sweep from a results folder or
from MLflow (parent run id or name; the latest by default), a baseline sweep, and `KEY=VALUE`
choices on any config field or group, checked against the runs (a misspelt field gets a
one-line answer naming what would work)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from rnnexp.analysis.compare import Comparison, baselines_across, baselines_within, differs
from rnnexp.errors import RnnexpError

# What reads results (torch, MLflow) is imported by the functions that use it.
if TYPE_CHECKING:
    from rnnexp.analysis.sweeps import Run, Sweep


class Stores:
    """The MLflow store, opened only if a sweep is named by run id or name."""

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment, self._conn = uri, experiment, None

    def load(self, name: Optional[str]) -> Sweep:
        """Results on disk when `name` is a path that exists or is plainly meant as one, else
        the sweep recorded in MLflow under that run id or name (None: the latest)."""
        from rnnexp.analysis import sweeps
        from rnnexp.results.sinks.mlflow import store

        if name is not None and (Path(name).expanduser().exists() or
                                 sweeps.looks_like_a_path(name)):
            return sweeps.from_folder(Path(name))
        if self._conn is None:
            try:
                self._conn = store.connect(self.uri, self.experiment, create=False)
            except store.StoreError as err:
                if name is None:
                    raise
                raise RnnexpError(f"{name}: no such file or folder, nor a sweep to look up in "
                                  f"MLflow ({err})") from None
        return sweeps.from_store(*self._conn, name)

    @property
    def client(self):
        return self._conn[0] if self._conn else None


def parse_baseline(text: str, runs: list[Run]) -> tuple[str, str]:
    """--baseline KEY=VALUE on any config field or group of the sweep."""
    return parse_choice(text, runs, "--baseline", "this sweep")


def parse_choice(text: str, runs: list[Run], option: str, scope: str) -> tuple[str, str]:
    """KEY=VALUE on any config field or group of `runs` (`option` and `scope` name them in
    errors) that some timed run has: how compare, and the tools beside it, select runs."""
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise RnnexpError(f"{option} '{text}': expected KEY=VALUE, e.g. model=lstm or "
                          "shape.seq_len=20")
    fields = sorted({k for r in runs for k in r.config})
    if key not in fields:
        varied = [k for k in fields if len({r.config.get(k) for r in runs}) > 1]
        raise RnnexpError(f"{option} {key}: not a config field of {scope} — "
                          + (f"it varies in {', '.join(varied)}" if varied else
                             "nothing varies in it") + _did_you_mean(key, fields))
    values = sorted({r.config.get(key, "?") for r in runs})
    if not any(r.config.get(key) == value and r.row.fwd_median_ms is not None for r in runs):
        raise RnnexpError(f"{option} {text}: matches no timed run of {scope} — "
                          f"{key} was {', '.join(values)}")
    return key, value


def _did_you_mean(key: str, fields: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, fields, n=1)
    return f" — did you mean {close[0]}?" if close else ""


def from_the_store(err: BaseException) -> bool:
    """An error of the MLflow store or the way to it (its client, HTTP, the database)."""
    from mlflow.exceptions import MlflowException

    return isinstance(err, MlflowException) or type(err).__module__.split(".")[0] in (
        "mlflow", "requests", "urllib3", "sqlalchemy", "sqlite3")


def selected(stores: Stores, sweep: Optional[str], against: Optional[str] = None,
             baseline: Optional[str] = None) -> Comparison:
    """The sweep and, with `against` (a baseline sweep) or `baseline` (KEY=VALUE within the
    sweep), each run's baseline (rnnexp.analysis.compare)."""
    loaded = stores.load(sweep)
    runs = loaded.runs
    if against:
        base_sweep = stores.load(against)
        what = differs(runs, base_sweep.runs)
        return Comparison(loaded, runs, baselines_across(runs, base_sweep.runs),
                          f"{loaded.name}  vs baseline  {base_sweep.name}  ("
                          + ("; ".join(what) if what else "no config difference recorded")
                          + ")")
    if baseline:
        key, value = parse_baseline(baseline, runs)
        return Comparison(loaded, runs, baselines_within(runs, key, value),
                          f"{loaded.name}  (baseline {key}={value}; rows differ from it in "
                          f"{key})")
    return Comparison(loaded, runs, None, loaded.name)

