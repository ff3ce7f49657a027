"""`python -m rnnexp sync FOLDER...`: upload saved results to MLflow, e.g. after working offline.

A FOLDER is a run folder (holds results.json; or that file itself) or a sweep folder (its
jobs become children of the sweep's parent run, created if the store has none). Idempotent:
every run carries the content hash of its results.json, and a result already in the store is
skipped. Read-only: nothing is written into the folders synced, and a folder holding any
file that is no valid result (rnnexp.results.result.Result.load_checked) is named, with the
field, and nothing of it is uploaded. What is uploaded where: rnnexp.results.sync.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.errors import ConfigError, OneLineParser, RnnexpError
from rnnexp.results import sync
from rnnexp.results.report import console
from rnnexp.results.sinks.mlflow import Mlflow


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


def sync_folder(path: Path, uri: Optional[str], experiment: Optional[str]) -> tuple[int, int]:
    """Upload what `path` holds, saying where it goes: (uploaded, already recorded)."""
    upload = sync.upload_of(path, uri, experiment)
    console.print(f"{upload.folder} → {upload.sink.uri} (experiment {upload.sink.experiment})",
                  highlight=False, markup=False)
    return upload.run()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    uploaded = skipped = 0
    for folder in args.folders:
        up, skip = sync_folder(folder, args.tracking_uri, args.experiment)
        uploaded, skipped = uploaded + up, skipped + skip
    console.print(f"{uploaded} uploaded, {skipped} already recorded", highlight=False)
    return 0
