"""One `Result` (+ its job folder) → one MLflow run: params, tags, metrics, samples, artifacts."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from rnnexp.results import INTERRUPTED, INVALID, OK, RESULTS_FILE, UNSUPPORTED, Result
from rnnexp.tracking import naming

# MLflow's limits (mlflow/utils/validation.py).
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
PHASE_PREFIX = {"forward": "fwd", "backward": "bwd", "total": "total"}
# Statuses other than these are a crash ("crashed") or Ctrl-C ("interrupted").
RUN_STATUS = {OK: "FINISHED", INVALID: "FAILED", UNSUPPORTED: "FAILED", INTERRUPTED: "KILLED"}


def run_status(result: Result) -> str:
    return RUN_STATUS.get(result.status, "FAILED")


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    value = json.dumps(node) if isinstance(node, (list, tuple)) else str(node)
    return {prefix[:-1]: value[:MAX_PARAM_VALUE]}


def params_of(result: Result) -> dict[str, str]:
    """The resolved config flattened, plus each chosen group option as its own column."""
    params = flatten(result.config)
    params.update({group: str(option) for group, option in result.choices.items()})
    return params


def tags_of(result: Result) -> dict[str, str]:
    plat, backend = result.platform, result.backend
    extra = plat.get("extra") or {}
    tags = {
        naming.TAG_KIND: "job",
        naming.TAG_GROUPS: ",".join(result.choices),
        "status": result.status,
        "reason": result.reason,
        "overrides": " ".join(result.overrides),
        "verification": result.verification.get("status", ""),
        "device": result.device,
        "device_name": result.device_name,
        "dtype": result.dtype,
        "backend_resolved": backend.get("name", ""),
        "torch": plat.get("torch_version", ""),
        "cuda": plat.get("cuda_version") or "",
        "hip": plat.get("hip_version") or "",
        # cuDNN on CUDA builds, MIOpen on ROCm builds (torch reports both as cudnn).
        "cudnn": (str(plat.get("cudnn_version") or "") if not plat.get("hip_version") else ""),
        "miopen": (str(plat.get("cudnn_version") or "") if plat.get("hip_version") else ""),
        "cpu_name": plat.get("cpu_name", ""),
        "host": plat.get("host", ""),
        "python": extra.get("python", ""),
        "git_commit": extra.get("git_commit", ""),
        "mlflow.source.git.commit": extra.get("git_commit", "").removesuffix("-dirty"),
        "mlflow.source.name": "rnnexp",
        "backend_info": json.dumps(backend, default=str),
    }
    return {k: str(v)[:MAX_TAG_VALUE] for k, v in tags.items() if v not in ("", None)}


def metrics_of(result: Result) -> dict[str, float]:
    """Every statistic and rate of every phase (fwd_median_ms, bwd_gflops, ...)."""
    metrics: dict[str, float] = {}
    for phase, prefix in PHASE_PREFIX.items():
        for key, value in result.phases.get(phase, {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[f"{prefix}_{key}"] = float(value)
    err = result.verification.get("max_abs_error")
    if isinstance(err, (int, float)):
        metrics["verify_max_abs_error"] = float(err)
    if result.duration_s:
        metrics["duration_s"] = float(result.duration_s)
    return metrics


def sample_series(result: Result, timestamp: int) -> list:
    """Per-iteration samples as step series fwd_ms / bwd_ms (step = iteration)."""
    from mlflow.entities import Metric

    series = []
    for phase, name in (("forward", "fwd_ms"), ("backward", "bwd_ms")):
        for step, value in enumerate(result.phases.get(phase, {}).get("samples_ms", [])):
            series.append(Metric(name, float(value), timestamp, step))
    return series


def _epoch_ms(iso: str) -> Optional[int]:
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000)
    except (TypeError, ValueError):
        return None


def find_recorded(client, exp_id: str, rid: str) -> Optional[str]:
    """The run that already holds this result, if any."""
    runs = client.search_runs([exp_id], filter_string=f"tags.`{naming.TAG_RESULT_ID}` = '{rid}'",
                              max_results=1)
    return runs[0].info.run_id if runs else None


def log_result(client, exp_id: str, result: Result, output_dir: Path,
               parent_run_id: Optional[str] = None) -> str:
    """Create, fill and terminate the run of a saved result; returns its run id.

    The client API (not fluent start_run) keeps no active run in the process, so the basic
    launcher (jobs in the callback's process) and reused loky workers leak nothing. The
    result-id tag is set last: a run left half-written by a failure is not taken as done.
    """
    from mlflow.entities import Metric, Param, RunTag

    output_dir = Path(output_dir)
    rid = naming.result_id(output_dir / RESULTS_FILE)
    start = _epoch_ms(result.started_at) or int(time.time() * 1000)
    tags = tags_of(result)
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(exp_id, start_time=start, tags=tags,
                            run_name=naming.run_name(result))
    run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in metrics_of(result).items()]
        # log_batch splits into MLflow's per-request limits (1000 metrics, 100 params).
        client.log_batch(run_id, metrics=metrics + sample_series(result, now),
                         params=[Param(k, v) for k, v in params_of(result).items()])
        client.log_dict(run_id, result.config, "config/resolved.yaml")
        if (output_dir / ".hydra").is_dir():
            client.log_artifacts(run_id, str(output_dir / ".hydra"), ".hydra")
        client.log_artifact(run_id, str(output_dir / RESULTS_FILE))
        client.log_batch(run_id, tags=[RunTag(naming.TAG_RESULT_ID, rid)])
        end = start + int(result.duration_s * 1000) if result.started_at else None
        client.set_terminated(run_id, status=run_status(result), end_time=end)
    except BaseException:
        # Half a run is worse than none: sync will upload the whole result later.
        try:
            client.delete_run(run_id)
        except Exception:
            pass
        raise
    return run_id
