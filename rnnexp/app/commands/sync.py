"""`python -m rnnexp sync FOLDER...`: upload saved results to MLflow, e.g. after working offline.

A FOLDER is a run folder (holds results.json; or that file itself) or a sweep folder (its
jobs become children of the sweep's parent run, created if the store has none). Idempotent:
every run carries the content hash of its results.json, and a result already in the store is
skipped. Read-only: nothing is written into the folders synced, and a folder holding any
file that is no valid result (rnnexp.results.result.Result.load_checked) is named, with the
field, and nothing of it is uploaded.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.config.schema import PROJECT_TRACKING_URI
from rnnexp.errors import ConfigError, OneLineParser, RnnexpError
from rnnexp.results import saved
from rnnexp.results.report import console
from rnnexp.results.result import RESULTS_FILE, Result
from rnnexp.results.sinks import Sweep
from rnnexp.results.sinks.mlflow import Mlflow, store


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = OneLineParser(prog="rnnexp sync", description=__doc__.split(
        "\n")[0])
    parser.add_argument("folders", nargs="+", type=Path,
                        help="run or sweep folders (or a run's results.json)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: MLFLOW_TRACKING_URI, else the one the "
                             "results were recorded for, else the project's mlflow.db)")
    parser.add_argument("--experiment", default=None,
                        help="experiment name (default: as configured, else rnnexp)")
    args = parser.parse_args(argv)
    if args.experiment is not None:
        try:
            Mlflow.check_experiment(args.experiment)
        except ConfigError as err:
            raise RnnexpError(str(err).replace("sinks.mlflow.experiment", "--experiment",
                                               1)) from None
    return args


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


def sync_folder(path: Path, uri: Optional[str], experiment: Optional[str]) -> tuple[int, int]:
    """Upload what `path` holds. Its folder is only read: a sweep's summary goes to the
    store from a temporary folder, never into the folder synced."""
    what = found(path)
    folder, jobs = what.folder, what.jobs
    first = jobs[0][1]
    # An explicit store wins: the flag, then MLflow's own variable; else the recorded one.
    sink = Mlflow(uri or os.environ.get("MLFLOW_TRACKING_URI") or configured(first, "uri")
                  or PROJECT_TRACKING_URI,
                  experiment or configured(first, "experiment") or "rnnexp")
    sweep = None
    if not what.single:
        sweep = Sweep.load(folder) or Sweep(
            dir=str(folder), name=f"sweep {folder.name} (synced)",
            sweep_id=hashlib.sha256(str(folder).encode()).hexdigest()[:20])
    console.print(f"{folder} → {sink.uri} (experiment {sink.experiment})", highlight=False,
                  markup=False)
    try:
        return sink.upload(jobs, sweep)
    except RnnexpError:
        raise
    except Exception as err:
        raise RnnexpError(f"MLflow store {sink.uri}: {store.short_reason(err)}") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    uploaded = skipped = 0
    for folder in args.folders:
        up, skip = sync_folder(folder, args.tracking_uri, args.experiment)
        uploaded, skipped = uploaded + up, skipped + skip
    console.print(f"{uploaded} uploaded, {skipped} already recorded", highlight=False)
    return 0


