"""`python -m rnnexp sync FOLDER...`: upload saved results to MLflow, e.g. after working offline.

A FOLDER is a run folder (holds results.json) or a sweep folder (its jobs become children of
the sweep's parent run, created if the store has none). Idempotent: every run carries the
content hash of its results.json, and a result already in the store is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.config.schema import PROJECT_TRACKING_URI
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.report import console
from rnnexp.results.result import RESULTS_FILE, BrokenResults, Result
from rnnexp.results.sinks import Sweep, load_jobs
from rnnexp.results.sinks.mlflow import Mlflow, store


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = OneLineParser(prog="rnnexp sync", description=__doc__.split(
        "\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep folders")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: MLFLOW_TRACKING_URI, else the one the "
                             "results were recorded for, else the project's mlflow.db)")
    parser.add_argument("--experiment", default=None,
                        help="experiment name (default: as configured, else rnnexp)")
    return parser.parse_args(argv)


def configured(result: Result, key: str) -> Optional[str]:
    """A setting of the MLflow sink the result was recorded with (sinks.mlflow.<key>)."""
    value = result.config.get("sinks", {}).get("mlflow", {}).get(key)
    return str(value) if value else None


def sync_folder(folder: Path, uri: Optional[str], experiment: Optional[str]) -> tuple[int, int]:
    folder = folder.resolve()
    if not folder.is_dir():
        raise RnnexpError(f"{folder}: no such folder — give a run or sweep folder under outputs/")
    single = (folder / RESULTS_FILE).is_file()
    broken: list[BrokenResults] = []
    jobs = [(folder, Result.load_checked(folder / RESULTS_FILE))] if single else \
        load_jobs(folder, broken)
    if broken:  # never uploaded as results; named before anything is
        first = broken[0]
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        raise RnnexpError(f"{first.path}: {first.problem}{more} — nothing uploaded; rerun "
                          "or remove the broken job folder")
    if not jobs:
        raise RnnexpError(f"{folder}: no {RESULTS_FILE} in it or below — give a run or "
                          "sweep folder")
    first = jobs[0][1]
    # An explicit store wins: the flag, then MLflow's own variable; else the recorded one.
    sink = Mlflow(uri or os.environ.get("MLFLOW_TRACKING_URI") or configured(first, "uri")
                  or PROJECT_TRACKING_URI,
                  experiment or configured(first, "experiment") or "rnnexp")
    sweep = None
    if not single:
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


