"""Saved results uploaded to MLflow (`rnnexp sync`), e.g. after working offline.

A run folder's result becomes a run; a sweep folder's jobs become children of the sweep's
parent run, created if the store has none. Idempotent: every run carries the content hash of
its results.json, and a result already in the store is skipped. Read-only: the folder is
only read (a sweep's summary goes to the store from a temporary folder), and a folder holding
any file that is no valid result (rnnexp.results.result.Result.load_checked) is named, with
the field, and nothing of it is uploaded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rnnexp.config.schema import PROJECT_TRACKING_URI
from rnnexp.errors import RnnexpError
from rnnexp.results import saved
from rnnexp.results.result import RESULTS_FILE, Result
from rnnexp.results.sinks import Sweep
from rnnexp.results.sinks.mlflow import Mlflow, store


def configured(result: Result, key: str) -> Optional[str]:
    """A setting of the MLflow sink the result was recorded with (sinks.mlflow.<key>)."""
    value = result.config.get("sinks", {}).get("mlflow", {}).get(key)
    return str(value) if value else None


def found(path: Path) -> saved.Saved:
    """A run or sweep folder (or a run's results.json), each result in it checked; nothing
    uploaded when one is no result."""
    what = saved.read(path)
    if what.file and what.path.name != RESULTS_FILE:
        raise RnnexpError(f"{what.path}: sync takes a run or sweep folder, or a run's "
                          f"{RESULTS_FILE} — not a file of another name")
    return what


@dataclass
class Upload:
    """What one folder holds and the store it goes to."""

    folder: Path
    jobs: list
    sink: Mlflow
    sweep: Optional[Sweep]  # None: a single run

    def run(self) -> tuple[int, int]:
        """(uploaded, already recorded)."""
        try:
            return self.sink.upload(self.jobs, self.sweep)
        except RnnexpError:
            raise
        except Exception as err:
            raise RnnexpError(f"MLflow store {self.sink.uri}: {store.short_reason(err)}"
                              ) from None


def upload_of(path: Path, uri: Optional[str], experiment: Optional[str]) -> Upload:
    """The upload of `path`, its results checked. An explicit store wins: `uri`, then
    MLflow's own variable; else the store and experiment the results were recorded for."""
    what = found(path)
    folder, jobs = what.folder, what.jobs
    first = jobs[0][1]
    sink = Mlflow(uri or os.environ.get("MLFLOW_TRACKING_URI") or configured(first, "uri")
                  or PROJECT_TRACKING_URI,
                  experiment or configured(first, "experiment") or "rnnexp")
    sweep = None
    if not what.single:
        sweep = Sweep.load(folder) or Sweep(
            dir=str(folder), name=f"sweep {folder.name} (synced)",
            sweep_id=hashlib.sha256(str(folder).encode()).hexdigest()[:20])
    return Upload(folder, jobs, sink, sweep)
