"""`python -m rnnexp.sync FOLDER...`: upload saved results to MLflow, e.g. after working offline.

A FOLDER is a run folder (holds results.json) or a sweep folder (its jobs become children of
the sweep's parent run, created if the store has none). Idempotent: every run carries the
content hash of its results.json, and a result already in the store is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape

from rnnexp.errors import RnnexpError
from rnnexp.report import console, print_error
from rnnexp.results import RESULTS_FILE, Result
from rnnexp.schema import DEFAULT_TRACKING_URI
from rnnexp.tracking import callback, mlflow_sink, naming, store, summary


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rnnexp.sync", description=__doc__.split(
        "\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep folders")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: the one the results were configured for, "
                             f"else {DEFAULT_TRACKING_URI})")
    parser.add_argument("--experiment", default=None,
                        help="experiment name (default: as configured, else rnnexp)")
    return parser.parse_args(argv)


def configured(result: Result, key: str, default: str) -> str:
    return str(result.config.get("tracking", {}).get(key) or default)


def find_parent(client, exp_id: str, sweep_id: str) -> Optional[str]:
    runs = client.search_runs([exp_id], filter_string=f"tags.`{naming.TAG_SWEEP_ID}` = "
                                                      f"'{sweep_id}'", max_results=1)
    return runs[0].info.run_id if runs else None


def upload(client, exp_id: str, folder: Path, result: Result, parent: Optional[str]) -> bool:
    """True if uploaded, False if the store already holds this result."""
    existing = mlflow_sink.find_recorded(client, exp_id,
                                         naming.result_id(folder / RESULTS_FILE))
    if existing:
        console.print(f"  already recorded  {escape(result.label)}  (run {existing})",
                      highlight=False)
        return False
    run_id = mlflow_sink.log_result(client, exp_id, result, folder, parent_run_id=parent)
    console.print(f"  uploaded          {escape(result.label)}  → run {run_id}", highlight=False)
    return True


def sync_folder(folder: Path, uri: Optional[str], experiment: Optional[str]) -> tuple[int, int]:
    folder = folder.resolve()
    if not folder.is_dir():
        raise RnnexpError(f"{folder}: no such folder — give a run or sweep folder under outputs/")
    single = (folder / RESULTS_FILE).is_file()
    jobs = [(folder, Result.load(folder / RESULTS_FILE))] if single else \
        summary.load_sweep(folder)
    if not jobs:
        raise RnnexpError(f"{folder}: no {RESULTS_FILE} in it or below — give a run or "
                          "sweep folder")
    first = jobs[0][1]
    uri = uri or configured(first, "uri", DEFAULT_TRACKING_URI)
    experiment = experiment or configured(first, "experiment", "rnnexp")
    console.print(f"{folder} → {uri} (experiment {experiment})", highlight=False)
    try:
        with store.http_limits():
            client, exp_id = store.connect(uri, experiment)
            parent = None
            if not single:
                info = callback.read_sweep_file(folder)
                sweep_id = info.get("sweep_id") or hashlib.sha256(
                    str(folder).encode()).hexdigest()[:20]
                parent = find_parent(client, exp_id, sweep_id)
                new_parent = parent is None
                if new_parent:
                    info = {"name": info.get("name") or f"sweep {folder.name} (synced)",
                            "overrides": info.get("overrides", []), "sweep_dir": str(folder),
                            "sweep_id": sweep_id}
                    parent = callback.open_parent(client, exp_id, info)
            done = [upload(client, exp_id, f, r, parent) for f, r in jobs]
            if parent and (new_parent or any(done)):
                callback.close_parent(client, parent, jobs, folder)
    except RnnexpError:
        raise
    except Exception as err:
        raise RnnexpError(f"MLflow store {uri}: {store.short_reason(err)}") from None
    return sum(done), len(done) - sum(done)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    uploaded = skipped = 0
    try:
        for folder in args.folders:
            up, skip = sync_folder(folder, args.tracking_uri, args.experiment)
            uploaded, skipped = uploaded + up, skipped + skip
    except RnnexpError as err:
        print_error(str(err))
        return 2
    console.print(f"{uploaded} uploaded, {skipped} already recorded", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
