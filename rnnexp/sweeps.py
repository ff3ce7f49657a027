"""A sweep's runs with their raw per-iteration samples and configurations, from a results
folder on disk (results.json files) or from the MLflow store (a sweep's parent run): what
`rnnexp.compare` compares."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

from rnnexp import sinks
from rnnexp.errors import RnnexpError
from rnnexp.results import Roofline, Row, label
from rnnexp.sinks.mlflow import runs

# Phases compared: table prefix → Result phase.
PHASES = (("fwd", "forward"), ("bwd", "backward"))
SERIES = {"fwd": "fwd_ms", "bwd": "bwd_ms"}  # the MLflow step series of the samples


@dataclass
class Run:
    row: Row
    samples: dict[str, list[float]] = field(default_factory=dict)  # "fwd"/"bwd" → ms
    # The resolved config flattened (shape.hidden_size, ...) and the group choices: what
    # decides which runs of two sweeps measure the same configuration.
    config: dict[str, str] = field(default_factory=dict)
    # The environment flags the run was timed with (busy, oversubscribed, high_spread, ...).
    flags: list[str] = field(default_factory=list)
    # Where the run sits against its device's measured peaks, and that device and dtype.
    roofline: Optional[Roofline] = None
    where: str = ""


@dataclass
class Sweep:
    name: str
    runs: list[Run]
    run_id: Optional[str] = None  # the MLflow parent run (charts are logged there)
    folder: Optional[Path] = None  # the sweep's folder, when it is on this machine


def roofline_of_metrics(metrics: dict[str, float]) -> Optional[Roofline]:
    """The roofline the MLflow sink logged as roofline_* metrics, if any."""
    known = {f.name for f in fields(Roofline)}
    found = {k[len("roofline_"):]: v for k, v in metrics.items() if k.startswith("roofline_")
             and k[len("roofline_"):] in known}
    return Roofline(**found) if found else None


def comparable(flat: dict[str, str]) -> dict[str, str]:
    """Config entries that describe what was measured (not where results went, nor the
    machine's state recorded beside them)."""
    return {k: v for k, v in flat.items() if not k.startswith(("sinks", "env."))}


def from_folder(folder: Path) -> Sweep:
    """Every results.json under `folder` (a sweep folder, or one run's folder)."""
    folder = Path(folder)
    jobs = sinks.load_jobs(folder)
    if not jobs:
        raise RnnexpError(f"{folder}: no results.json under this folder — name a run or "
                          "sweep folder from outputs/, or a sweep recorded in MLflow")
    found = []
    for path, result in jobs:
        config = runs.flatten(result.config)
        config.update({g: str(v) for g, v in result.choices.items()})
        found.append(Run(row=Row.of(str(path.relative_to(folder)) or ".", result),
                         samples={p: list(result.phase(name).samples_ms) for p, name in PHASES},
                         config=comparable(config),
                         flags=list(result.environment.flags) if result.environment else [],
                         roofline=result.roofline,
                         where=f"{result.device_name or result.device} {result.dtype}".strip()))
    return Sweep(name=str(folder), runs=found, folder=folder)


def find_parent(client, exp_id: str, name: Optional[str]):
    sweeps = client.search_runs([exp_id], filter_string=f"tags.`{runs.TAG_KIND}` = 'sweep'",
                                order_by=["attributes.start_time DESC"], max_results=1000)
    if not sweeps:
        raise RnnexpError("no sweep recorded in this experiment — run one with "
                          "python -m rnnexp -m model=lstm,jit ...")
    if name is None:
        return sweeps[0]
    for run in sweeps:
        if name in (run.info.run_id, run.info.run_name):
            return run
    raise RnnexpError(f"sweep '{name}': no parent run with that id or name — latest is "
                      f"'{sweeps[0].info.run_name}' ({sweeps[0].info.run_id})")


def from_store(client, exp_id: str, name: Optional[str]) -> Sweep:
    """The sweep with this parent run id or name (default: the latest) and its job runs."""
    parent = find_parent(client, exp_id, name)
    found = client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = "
                                                       f"'{parent.info.run_id}'",
                               max_results=10000)
    out = []
    for run in found:
        groups = run.data.tags.get(runs.TAG_GROUPS, "")
        choices = {g: run.data.params.get(g, "?") for g in groups.split(",") if g}
        m = run.data.metrics
        row = Row(job=run.info.run_name or "", label=label(choices), choices=choices,
                  status=run.data.tags.get("status", run.info.status.lower()),
                  reason=run.data.tags.get("reason", ""), run_id=run.info.run_id,
                  **{f"{p}_{s}": m.get(f"{p}_{s}") for p, _ in PHASES
                     for s in ("median_ms", "iqr_ms")})
        samples = {}
        for p, series in SERIES.items():
            if m.get(series) is not None:
                history = client.get_metric_history(run.info.run_id, series)
                samples[p] = [x.value for x in sorted(history, key=lambda x: x.step)]
        flags = run.data.tags.get("env.flags", "none")
        tags = run.data.tags
        out.append(Run(row=row, samples=samples, config=comparable(dict(run.data.params)),
                       flags=[] if flags == "none" else flags.split(","),
                       roofline=roofline_of_metrics(m),
                       where=f"{tags.get('device_name') or tags.get('device', '?')} "
                             f"{tags.get('dtype', '')}".strip()))
    if not out:
        raise RnnexpError(f"sweep '{parent.info.run_name}' has no job runs (yet)")
    folder = parent.data.tags.get("sweep_dir")
    return Sweep(name=f"{parent.info.run_name}  ({parent.info.run_id})",
                 runs=sorted(out, key=lambda r: r.row.job), run_id=parent.info.run_id,
                 folder=Path(folder) if folder and Path(folder).is_dir() else None)
