"""Hydra callback for sweeps (`-m`): the store and a parent run before any job, a summary after.

Registered in conf/config.yaml under hydra.callbacks. The multirun events run in the
launching process; jobs (in that process with the basic launcher, in workers with joblib)
find the parent through a file in the sweep folder, which works for every launcher that
shares the filesystem and leaves no state behind in the process.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rnnexp.results import OK, Result
from rnnexp.tracking import config_of, naming, summary

SWEEP_FILE = "mlflow_sweep.json"


def read_sweep_file(sweep_dir: Path) -> dict:
    try:
        return json.loads((Path(sweep_dir) / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return {}


def open_parent(client, exp_id: str, info: dict) -> str:
    run = client.create_run(exp_id, run_name=info["name"], tags={
        naming.TAG_KIND: "sweep", naming.TAG_SWEEP_ID: info["sweep_id"],
        "overrides": " ".join(info.get("overrides", [])), "sweep_dir": info.get("sweep_dir", ""),
        "git_commit": naming.git_commit(), "mlflow.source.name": "rnnexp"})
    return run.info.run_id


def close_parent(client, run_id: str, jobs: Sequence[tuple[Path, Result]], sweep_dir: Path
                 ) -> None:
    """Summary table (JSON/CSV/markdown) and chart as artifacts; then the run ends."""
    rows = summary.rows_of(jobs, sweep_dir)
    folder = sweep_dir / "summary"
    for path in summary.write_files(rows, folder):
        client.log_artifact(run_id, str(path), "summary")
    if any(r["status"] == OK for r in rows):
        png = summary.chart(rows, folder / "fwd_bwd.png", f"sweep {sweep_dir.name}: median ms")
        client.log_artifact(run_id, str(png), "summary")
    n_ok = sum(r["status"] == OK for r in rows)
    client.set_tag(run_id, "jobs", str(len(rows)))
    client.set_tag(run_id, "jobs_ok", str(n_ok))
    client.set_tag(run_id, "jobs_failed", str(len(rows) - n_ok))
    client.set_terminated(run_id, status="FINISHED")


def print_summary(jobs: Sequence[tuple[Path, Result]], fastrnns_format: Optional[str]) -> None:
    from rnnexp import fastrnns_json
    from rnnexp.report import console, results_table

    results = [r for _, r in jobs]
    console.print(results_table(results, title=f"rnnexp sweep: {len(results)} jobs"))
    if fastrnns_format:
        print(fastrnns_json.render(results, fastrnns_format), flush=True)


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracking = config_of(config)
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = list(config.hydra.overrides.task)
        started = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        info = {"sweep_id": uuid.uuid4().hex, "name": naming.sweep_name(overrides, started),
                "overrides": overrides, "sweep_dir": str(sweep_dir), "run_id": None,
                "uri": tracking.uri, "experiment": tracking.experiment}
        if tracking.enabled:
            from rnnexp.tracking import store

            try:
                with store.http_limits():
                    # Store and experiment exist before any job starts: parallel jobs on a
                    # fresh SQLite file would race on its schema migration.
                    client, exp_id = store.connect(tracking.uri, tracking.experiment)
                    info["run_id"] = open_parent(client, exp_id, info)
            except Exception as err:
                store.warn_offline(tracking.uri, err, sweep_dir)
                # Jobs then skip the store instead of each waiting on it and warning again.
                info["offline"] = store.short_reason(err)
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(info, indent=2))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        tracking = config_of(config)
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        jobs = summary.load_sweep(sweep_dir)
        print_summary(jobs, tracking.fastrnns_json)
        run_id = read_sweep_file(sweep_dir).get("run_id")
        if not (tracking.enabled and run_id):
            return
        from rnnexp.tracking import store

        try:
            with store.http_limits():
                client, _ = store.connect(tracking.uri, tracking.experiment)
                close_parent(client, run_id, jobs, sweep_dir)
        except Exception as err:
            store.warn_offline(tracking.uri, err, sweep_dir)
