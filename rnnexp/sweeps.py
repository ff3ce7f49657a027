"""A sweep's runs with their raw per-iteration samples and configurations, from a results
folder on disk (results.json files) or from the MLflow store (a sweep's parent run): what
`rnnexp.compare` compares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rnnexp import sinks
from rnnexp.errors import RnnexpError
from rnnexp.results import Row, label
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


@dataclass
class Sweep:
    name: str
    runs: list[Run]
    run_id: Optional[str] = None  # the MLflow parent run (charts are logged there)


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
                         flags=list(result.environment.flags) if result.environment else []))
    return Sweep(name=str(folder), runs=found)


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
        out.append(Run(row=row, samples=samples, config=comparable(dict(run.data.params)),
                       flags=[] if flags == "none" else flags.split(",")))
    if not out:
        raise RnnexpError(f"sweep '{parent.info.run_name}' has no job runs (yet)")
    return Sweep(name=f"{parent.info.run_name}  ({parent.info.run_id})",
                 runs=sorted(out, key=lambda r: r.row.job), run_id=parent.info.run_id)
