"""MLflow tracking: every job a run, every sweep a parent run.

Everything here derives from a `Result` and the job's output folder, so a job logs live what
`rnnexp.sync` can upload later. Models and the timer know nothing of MLflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from rnnexp.results import Result
from rnnexp.schema import TrackingConfig


def config_of(cfg: DictConfig) -> TrackingConfig:
    return OmegaConf.to_object(cfg.tracking)  # type: ignore[return-value]


def record_job(result: Result, output_dir: Path, tracking: TrackingConfig,
               sweep_dir: Optional[Path] = None) -> Optional[str]:
    """Log one job's saved result as an MLflow run (a child when its sweep has a parent).

    Never raises: an unreachable store costs a one-line warning, the results stay on disk.
    """
    if not tracking.enabled:
        return None
    from rnnexp.tracking import callback, mlflow_sink, store  # mlflow imports are slow

    parent = callback.read_sweep_file(sweep_dir) if sweep_dir else {}
    if parent.get("offline"):  # the sweep already warned, naming its folder for sync
        return None
    try:
        with store.http_limits():
            client, exp_id = store.connect(tracking.uri, tracking.experiment)
            return mlflow_sink.log_result(client, exp_id, result, output_dir,
                                          parent_run_id=parent.get("run_id"))
    except Exception as err:
        store.warn_offline(tracking.uri, err, output_dir)
        return None



def abort_sweep(result: Result, tracking: TrackingConfig, sweep_dir: Path) -> None:
    """A job crashed or was interrupted, so Hydra ends the sweep without `on_multirun_end`:
    end the parent run too (FAILED or KILLED, with the reason) rather than leave it RUNNING."""
    if not tracking.enabled:
        return
    from rnnexp.tracking import callback, mlflow_sink, store

    parent = callback.read_sweep_file(sweep_dir)
    if not parent.get("run_id") or parent.get("offline"):
        return
    try:
        with store.http_limits():
            client, _ = store.connect(tracking.uri, tracking.experiment)
            client.set_tag(parent["run_id"], "reason", result.reason[:mlflow_sink.MAX_TAG_VALUE])
            client.set_terminated(parent["run_id"], status=mlflow_sink.run_status(result))
    except Exception as err:
        store.warn_offline(tracking.uri, err, sweep_dir)
