"""One `Result` (+ its job folder) → one MLflow run: params, tags, metrics, samples, artifacts;
and a sweep's parent run."""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Sequence

from rnnexp.machine import scheduler
from rnnexp.results import summary
from rnnexp.results.identity import WORK_BENCH
from rnnexp.results.report import job_name
from rnnexp.results.result import (
    FAILED_STATUSES,
    INTERRUPTED,
    INVALID,
    OK,
    RECOMPILED,
    RESULTS_FILE,
    UNSUPPORTED,
    Result,
)
from rnnexp.results.sinks import Sweep

# MLflow's limits (mlflow/utils/validation.py).
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
PHASE_PREFIX = {"forward": "fwd", "backward": "bwd", "total": "total"}
# Statuses other than these are a crash ("crashed").
# A declined combination (unsupported here, said before any timing) ran as designed: it ends
# FINISHED with status=unsupported and "(declined)" in its name, so a red FAILED run is a
# crash or a result that is wrong.
RUN_STATUS = {OK: "FINISHED", INVALID: "FAILED", RECOMPILED: "FAILED", UNSUPPORTED: "FINISHED",
              INTERRUPTED: "KILLED"}
# Tags of our own (MLflow's are mlflow.*).
TAG_RESULT_ID = "rnnexp.result_id"
TAG_SWEEP_ID = "rnnexp.sweep_id"
TAG_KIND = "rnnexp.kind"  # "job" or "sweep"
TAG_GROUPS = "rnnexp.groups"  # the config groups, comma-separated: the comparable choices
TAG_SWEEP = "sweep"  # a job's sweep, by name


def run_status(result: Result) -> str:
    return RUN_STATUS.get(result.status, "FAILED")


# Overrides of what a measurement is (rnnexp.results.identity) that its label does not show:
# jobs of a sweep over them would otherwise share one name.
NAMED_OVERRIDES = ("seed", *(f"bench.{name}" for name in WORK_BENCH))


def run_name(result: Result) -> str:
    """The job's name as its table row shows it — the backend that ran after the one asked
    for (`lstm·auto→aten·small·cpu`) — with any override of the measurement its label does
    not show (`… seed=1`), and `(declined)` for a job that did not run here."""
    extra = [o for o in result.overrides if o.lstrip("+~").split("=", 1)[0] in NAMED_OVERRIDES]
    name = " ".join([job_name(result), *extra])
    return f"{name} (declined)" if result.status == UNSUPPORTED else name


def result_id(results_file: Path) -> str:
    """The content hash of a saved results.json: the same result is never uploaded twice."""
    return hashlib.sha256(Path(results_file).read_bytes()).hexdigest()[:20]


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    value = json.dumps(node) if isinstance(node, (list, tuple)) else str(node)
    return {prefix[:-1]: value[:MAX_PARAM_VALUE]}


def params_of(result: Result) -> dict[str, str]:
    """What a person filters runs on: the resolved config flattened and each chosen group
    option as its own column — less what only wires the code (`_target_`s, where results go)
    and the DeepBench fields of a run that ran no DeepBench problem (all zeros)."""
    params = {k: v for k, v in flatten(result.config).items() if filterable(k, result)}
    params.update({group: str(option) for group, option in result.choices.items()})
    env = result.environment
    if env is not None:  # what the machine offered: cores, threads, frequency policy
        params.update({"env.cores": str(env.cores), "env.torch_threads": str(env.torch_threads),
                       "env.interop_threads": str(env.interop_threads),
                       "env.governor": env.governor or "unreadable",
                       "env.cpu_max_mhz": str(env.cpu_max_mhz),
                       **{f"env.{k}": v for k, v in env.thread_env.items()}})
    return params


def filterable(key: str, result: Result) -> bool:
    if key.endswith("_target_") or key.startswith("sinks.") or key == "resume":
        return False
    return not key.startswith("deepbench.") or bool(result.choices.get("deepbench"))


def tags_of(result: Result) -> dict[str, str]:
    plat = result.platform
    vendor = str(plat.cudnn_version or "") if plat else ""
    hip = bool(plat and plat.hip_version)
    tags = {
        TAG_KIND: "job",
        TAG_GROUPS: ",".join(result.choices),
        "status": result.status,
        "reason": result.reason,
        "overrides": " ".join(result.overrides),
        "verification": result.verification.status if result.verification else "",
        "device": result.device,
        "device_name": result.device_name,
        "dtype": result.dtype,
        "backend_resolved": result.backend.name,
        "torch": plat.torch_version if plat else "",
        "cuda": (plat.cuda_version or "") if plat else "",
        "hip": (plat.hip_version or "") if plat else "",
        # cuDNN on CUDA builds, MIOpen on ROCm builds (torch reports both as cudnn).
        "cudnn": "" if hip else vendor,
        "miopen": vendor if hip else "",
        "cpu_name": plat.cpu_name if plat else "",
        "host": plat.host if plat else "",
        "python": (plat.extra.get("python", "") if plat else ""),
        "git_commit": result.git_commit,
        "mlflow.source.git.commit": result.git_commit.removesuffix("-dirty"),
        "mlflow.source.name": "rnnexp",
        "backend_info": json.dumps(result.backend.to_json(), default=str),
        **environment_tags(result),
    }
    return {k: str(v)[:MAX_TAG_VALUE] for k, v in tags.items() if v not in ("", None)}


def environment_tags(result: Result) -> dict[str, str]:
    """Whether the machine was fit to time on: flags (busy, oversubscribed, high_spread,
    drifting, gpu_throttled; "none"), why, the busiest other processes, GPU clocks; and the
    cluster node and task it ran in."""
    env = result.environment
    if env is None:
        return {}
    tags = {"env.flags": ",".join(env.flags) or "none", "env.warning": env.warning_line(),
            "env.quiet": env.quiet}
    for when, seen in (("before", env.before), ("after", env.after)):
        if seen is not None:
            tags[f"env.busy_{when}"] = seen.summary(env.cores)
    if env.gpu:
        tags["env.gpu"] = json.dumps(env.gpu, default=str)
    if env.scheduler:  # the cluster node and task it ran in: runs filter and group by them
        tags["node"] = env.scheduler.get("node", "")
        tags["slurm_job"] = scheduler.task_name(env.scheduler)
    return tags


def environment_metrics(result: Result) -> dict[str, float]:
    env = result.environment
    if env is None:
        return {}
    metrics = {"env/waited_s": float(env.waited_s)}
    if env.drift is not None:  # the median's drift between runs (rnnexp.run.drift)
        metrics.update({"env/drift": float(env.drift), "env/drift_runs": float(env.drift_runs)})
    for when, seen in (("before", env.before), ("after", env.after)):
        if seen is not None:
            metrics[f"env/other_cores_{when}"] = float(seen.other_cores)
            if seen.load_avg:
                metrics[f"env/load1_{when}"] = float(seen.load_avg[0])
    return metrics


# The metrics a person looks for first, named without a section: MLflow's chart view opens
# on them (its first section holds the names without a "/") and its column picker lists them
# apart from the sections (fwd/, bwd/, total/, roofline/, env/, samples/) holding the rest.
KEY_RATES = ("tokens_per_s", "gflops", "gbps")
KEY_ROOFLINE = ("pct_peak_flops", "pct_peak_bandwidth")
# Every name key_metrics can give, in the order the UI's saved view shows them (view.py).
KEY_METRICS = (*(f"{p}_median_ms" for p in PHASE_PREFIX.values()), *KEY_RATES, *KEY_ROOFLINE)


# The key metrics are for reading in MLflow's table and charts, which show every digit a
# float has (1568.5855614999582): they are logged to this many significant digits. The
# sections (fwd/median_ms, total/tokens_per_s, roofline/...) and results.json keep them all.
KEY_DIGITS = 4


def rounded(value: float, digits: int = KEY_DIGITS) -> float:
    """`value` to `digits` significant digits (1568.5855 → 1569.0, 0.0123456 → 0.01235)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def key_metrics(result: Result) -> dict[str, float]:
    """Medians of each phase, the job's rates (forward+backward, else forward) and its % of
    the measured peaks, rounded for reading (KEY_DIGITS)."""
    out = {}
    for phase, prefix in PHASE_PREFIX.items():
        if result.phase(phase).timed:
            out[f"{prefix}_median_ms"] = float(result.phase(phase).median_ms)
    rates = result.rate_phase.metrics()
    out.update({k: rates[k] for k in KEY_RATES if k in rates})
    roof = result.roofline.metrics() if result.roofline else {}
    out.update({k: roof[k] for k in KEY_ROOFLINE if k in roof})
    if result.instructions:
        for phase, prefix in PHASE_PREFIX.items():
            if phase in result.instructions.phases:
                out[f"{prefix}_instructions"] = result.instructions.phases[phase].median
    return {k: rounded(v) for k, v in out.items()}


def metrics_of(result: Result) -> dict[str, float]:
    """The key metrics (key_metrics), then every statistic and rate of every phase
    (fwd/iqr_ms, bwd/gflops, ...) with its peak memory (fwd/rss_hwm_mb, bwd/cuda_peak_mb),
    the start-up and compile cost (compile/compile_s, compile/first_call_ms, ...), the
    roofline placement (roofline/intensity, ...), the verification error and the machine's
    state, each in its section."""
    metrics = key_metrics(result)
    for phase, prefix in PHASE_PREFIX.items():
        for key, value in result.phase(phase).metrics().items():
            metrics[f"{prefix}/{key}"] = value
    if result.memory:
        metrics.update(result.memory.metrics())
    if result.compile_cost:
        metrics.update({f"compile/{k}": v for k, v in result.compile_cost.metrics().items()})
    if result.roofline:
        metrics.update({f"roofline/{k}": v for k, v in result.roofline.metrics().items()})
    if result.instructions:  # bench.metric=instructions: counts beside the times
        metrics.update({f"instructions/{k}": v
                        for k, v in result.instructions.metrics().items()})
    err = result.verification.max_abs_error if result.verification else None
    if isinstance(err, (int, float)):
        metrics["verify/max_abs_error"] = float(err)
    if result.duration_s:
        metrics["run/duration_s"] = float(result.duration_s)
    metrics.update(environment_metrics(result))
    return metrics


SAMPLE_SERIES = {"forward": "samples/fwd_ms", "backward": "samples/bwd_ms"}


def sample_series(result: Result, timestamp: int) -> list:
    """Per-iteration samples as step series samples/fwd_ms, samples/bwd_ms (step =
    iteration)."""
    from mlflow.entities import Metric

    series = []
    for phase, name in SAMPLE_SERIES.items():
        for step, value in enumerate(result.phase(phase).samples_ms):
            series.append(Metric(name, float(value), timestamp, step))
    return series


def _epoch_ms(iso: str) -> Optional[int]:
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000)
    except (TypeError, ValueError):
        return None


def find_recorded(client, exp_id: str, rid: str) -> Optional[str]:
    """The run that already holds this result, if any."""
    runs = client.search_runs([exp_id], filter_string=f"tags.`{TAG_RESULT_ID}` = '{rid}'",
                              max_results=1)
    return runs[0].info.run_id if runs else None


def log_result(client, exp_id: str, result: Result, output_dir: Path,
               parent_run_id: Optional[str] = None, sweep_name: str = "") -> str:
    """Create, fill and terminate the run of a saved result; returns its run id. A job of a
    sweep carries the sweep's name (tag `sweep`): the runs table shows jobs without their
    parents (rnnexp.results.sinks.mlflow.view).

    The client API (not fluent start_run) keeps no active run in the process, so the basic
    launcher (jobs in the callback's process) and reused loky workers leak nothing. The
    result-id tag is set last: a run left half-written by a failure is not taken as done.
    """
    from mlflow.entities import Metric, Param, RunTag

    output_dir = Path(output_dir)
    rid = result_id(output_dir / RESULTS_FILE)
    start = _epoch_ms(result.started_at) or int(time.time() * 1000)
    tags = tags_of(result)
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    if sweep_name:
        tags[TAG_SWEEP] = sweep_name[:MAX_TAG_VALUE]
    run = client.create_run(exp_id, start_time=start, tags=tags, run_name=run_name(result))
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
        if result.profile and (output_dir / result.profile.trace).is_file():
            trace = output_dir / result.profile.trace
            client.log_artifact(run_id, str(trace), str(Path(result.profile.trace).parent))
        client.log_batch(run_id, tags=[RunTag(TAG_RESULT_ID, rid)])
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


def open_parent(client, exp_id: str, sweep: Sweep, git_commit: str) -> str:
    """The sweep's run, named by what it sweeps (Sweep.name) and carrying each of its
    overrides as a param (model = lstm,py): sweeps are found and told apart by them."""
    from mlflow.entities import Param

    run = client.create_run(exp_id, run_name=sweep.name, tags={
        TAG_KIND: "sweep", TAG_SWEEP_ID: sweep.sweep_id, "overrides": " ".join(sweep.overrides),
        "sweep_dir": sweep.dir, "git_commit": git_commit, "mlflow.source.name": "rnnexp"})
    params = sweep_params(sweep.overrides)
    if params:
        client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])
    return run.info.run_id


def sweep_params(overrides: Sequence[str]) -> dict[str, str]:
    """{key: value} of a sweep's overrides, Hydra's +/~ prefixes left out of the key."""
    out = {}
    for text in overrides:
        key, sep, value = text.partition("=")
        if sep and not key.startswith(("hydra", "sinks")):
            out[key.lstrip("+~")] = value[:MAX_PARAM_VALUE]
    return out


def reopen_parent(client, run_id: str) -> bool:
    """Set a sweep's earlier parent run RUNNING again; False if this store lacks it."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
    except MlflowException:
        return False
    client.update_run(run_id, status="RUNNING")
    if "reason" in client.get_run(run_id).data.tags:  # why it ended before: no longer so
        client.delete_tag(run_id, "reason")
    return True


def find_parent(client, exp_id: str, sweep_id: str) -> Optional[str]:
    runs = client.search_runs([exp_id], filter_string=f"tags.`{TAG_SWEEP_ID}` = '{sweep_id}'",
                              max_results=1)
    return runs[0].info.run_id if runs else None


def close_parent(client, run_id: str, jobs: Sequence[tuple[Path, Result]], sweep_dir: Path,
                 read_only: bool = False) -> None:
    """Summary table (JSON/CSV/markdown), chart and, when the report sink wrote it, the HTML
    report as artifacts; then the run ends: FAILED when a job failed (verification, a
    crash), else FINISHED. A sweep folder that cannot be written costs the summary's copy
    there, not the parent's; one only read (`sync`) gets none."""
    with tempfile.TemporaryDirectory(prefix="rnnexp-summary-") as tmp:
        try:
            paths = summary.write(sweep_dir, jobs, into=Path(tmp) if read_only else None)
        except OSError:  # the tables from the temporary folder (the chart needs the sweep's)
            paths = summary.write_files(summary.rows_of(jobs, sweep_dir), Path(tmp))
        report = Path(sweep_dir) / summary.SUMMARY_DIR / summary.REPORT
        if report.is_file():
            paths.append(report)
        for path in paths:
            client.log_artifact(run_id, str(path), "summary")
    from mlflow.entities import Metric

    counts = {"jobs": len(jobs), "jobs_ok": sum(r.status == OK for _, r in jobs),
              "jobs_declined": sum(r.status == UNSUPPORTED for _, r in jobs)}
    counts["jobs_failed"] = counts["jobs"] - counts["jobs_ok"] - counts["jobs_declined"]
    for key, value in counts.items():
        client.set_tag(run_id, key, str(value))
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()])
    failed = any(r.status in FAILED_STATUSES for _, r in jobs)
    client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")


def end_parent(client, run_id: str, result: Result) -> None:
    """A sweep cut short by this job: its parent ends with the job's status and reason."""
    client.set_tag(run_id, "reason", result.reason[:MAX_TAG_VALUE])
    client.set_terminated(run_id, status=run_status(result))
