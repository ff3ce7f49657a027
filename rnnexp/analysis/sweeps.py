"""A sweep's runs — each its Result, read from a results folder on disk or from the
results.json each job logged to the MLflow store (a sweep's parent run) — with their
configurations: what `rnnexp.analysis.compare` compares."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rnnexp.analysis import significance
from rnnexp.errors import RnnexpError
from rnnexp.results import saved
from rnnexp.results.identity import MeasurementKey
from rnnexp.results.result import (
    RESULTS_FILE,
    BrokenResults,
    PhaseStats,
    Result,
    Roofline,
    Row,
    format_quartiles,
)
from rnnexp.results.sinks.mlflow import runs, store

# Phases compared: table prefix → Result phase.
PHASES = (("fwd", "forward"), ("bwd", "backward"))


@dataclass
class Run:
    row: Row
    result: Result
    # What it measured and how (rnnexp.results.identity), whatever code took it: runs of two sweeps
    # (or a run and its baseline option) pair up by it.
    key: MeasurementKey
    # The resolved config flattened (shape.hidden_size, ...) and the group choices: what
    # the table shows and `--baseline KEY=VALUE` selects on.
    config: dict[str, str] = field(default_factory=dict)
    # The environment flags the run was timed with (busy, oversubscribed, high_spread, ...).
    flags: list[str] = field(default_factory=list)
    # Where the run sits against its device's measured peaks, and that device and dtype.
    roofline: Optional[Roofline] = None
    where: str = ""
    # Other runs of the same configuration (a baseline sweep's repeats): more runs of it.
    repeats: list[Run] = field(default_factory=list)

    @classmethod
    def of(cls, job: str, result: Result, run_id: Optional[str] = None) -> Run:
        config = runs.flatten(result.config)
        config.update({g: str(v) for g, v in result.choices.items()})
        config.update({WHEN: result.started_at[:19].replace("T", " "),
                       COMMIT: result.git_commit[:10]})
        row = Row.of(job, result)
        row.run_id = run_id or ""
        return cls(row=row, result=result,
                   key=MeasurementKey.of_result(result).without_versions(),
                   config=comparable(config),
                   flags=list(result.environment.flags) if result.environment else [],
                   roofline=result.roofline,
                   where=f"{result.device_name or result.device} {result.dtype}".strip())

    @property
    def identity(self) -> dict[str, str]:
        """Its key as flat config fields, with how it was taken (bench.iters, ...): the
        entries that pair runs up."""
        return self.key.fields(method=True)

    @property
    def window(self) -> Optional[str]:
        """The interleaved window it was measured in (None: not interleaved): its name, seed
        and jobs — the tasks of a SLURM sweep each number their windows from 0."""
        i = self.result.interleaving
        return f"{i.window}|{i.seed}|{','.join(map(str, i.jobs))}" if i else None

    def stats(self, phase: str) -> PhaseStats:
        return self.result.phase(dict(PHASES)[phase])

    def shown_ms(self, phase: str, level: Optional[float] = None,
                 unit: Optional[str] = None) -> str:
        """Its figure beside a comparison: the `level` the comparison's speedup is a ratio
        of (significance.Difference.baseline_ms / candidate_ms, in its `unit`), else its
        median [q1, q3]."""
        if unit == "instructions" and level is not None:
            return f"{level / 1e6:,.3f}M instr"
        if level is not None and level == level:  # not NaN
            return format_quartiles(level, None, None)
        return format_quartiles(*(getattr(self.row, f"{phase}_{s}_ms")
                                  for s in ("median", "q1", "q3")))

    def side(self, phase: str) -> significance.Side:
        """Its side of a paired comparison in its window: round medians, worker processes,
        and the spread between processes its drift history bounds."""
        s, env = self.stats(phase), self.result.environment
        workers = self.result.interleaving.workers if self.result.interleaving else []
        return significance.Side(rounds_ms=s.rounds_ms, workers=workers,
                                 spread=s.between_drift,
                                 spread_runs=env.drift_runs if env else 0)

    def counts(self, phase: str) -> list[float]:
        """Its instructions per iteration in a phase, one per counting process, its repeats'
        too (bench.metric=instructions; empty without counts)."""
        name = dict(PHASES)[phase]
        return [m for r in (self, *self.repeats) if r.result.instructions
                and name in r.result.instructions.phases
                for m in r.result.instructions.phases[name].process_medians]

    def level(self, phase: str) -> Optional[significance.Level]:
        """Its level in a phase for a comparison between runs (None: not timed)."""
        s = self.stats(phase)
        if not s.timed:
            return None
        runs = [r.stats(phase) for r in (self, *self.repeats)]
        medians = [m for r in runs if r.timed for m in (r.process_medians_ms or [r.median_ms])]
        env = self.result.environment
        return significance.Level(process_medians_ms=medians, drift=s.between_drift,
                                  drift_runs=env.drift_runs if env else 0)


@dataclass
class Sweep:
    name: str
    runs: list[Run]
    run_id: Optional[str] = None  # the MLflow parent run (charts are logged there)
    folder: Optional[Path] = None  # the sweep's folder, when it is on this machine


def comparable(flat: dict[str, str]) -> dict[str, str]:
    """Config entries that describe what was measured (not where results went, nor the
    machine's state recorded beside them)."""
    return {k: v for k, v in flat.items() if not k.startswith(("sinks", "env."))}


def from_folder(path: Path) -> Sweep:
    """The results a path names (rnnexp.results.saved): a results file, a run folder, a sweep
    folder, or any folder of them (outputs/runs: every run in it)."""
    found = saved.read(Path(path))
    return Sweep(name=str(Path(path)), folder=found.folder,
                 runs=[Run.of(str(folder.relative_to(found.folder)) or ".", result)
                       for folder, result in found.jobs])


def looks_like_a_path(name: str) -> bool:
    """A name someone meant as a file or folder, not an MLflow run id or name."""
    return "/" in name or name.startswith((".", "~")) or name.endswith(".json")


# Shown when runs would read alike: when and from which code each was measured.
WHEN, COMMIT = "date", "commit"


def told_apart(runs: list[Run], keys: list[str]) -> list[str]:
    """`keys`, with the date and commit of each run after them when runs would otherwise
    show the same values (a folder of repeated runs, outputs/runs)."""
    shown = [tuple(r.config.get(k) for k in keys) for r in runs]
    if len(set(shown)) == len(shown):
        return keys
    return [*keys, *[k for k in (WHEN, COMMIT) if len({r.config.get(k) for r in runs}) > 1
                     or k == WHEN]]


def find_parent(client, exp_id: str, name: Optional[str]):
    sweeps = client.search_runs([exp_id], filter_string=f"tags.`{runs.TAG_KIND}` = 'sweep'",
                                order_by=["attributes.start_time DESC"], max_results=1000)
    if not sweeps:
        raise RnnexpError("no sweep recorded in this experiment — run one with "
                          "python -m rnnexp -m model=lstm,jit ...")
    if name is None:  # the latest sweep that has jobs: a launch that failed has none
        for n, run in enumerate(sweeps):
            if has_jobs(client, exp_id, run.info.run_id):
                if n:
                    say_skipped(sweeps[:n])
                return run
        raise RnnexpError(f"no sweep recorded in this experiment has job runs — the latest, "
                          f"'{sweeps[0].info.run_name}', ended {ended(sweeps[0])}")
    for run in sweeps:
        if name in (run.info.run_id, run.info.run_name):
            return run
    raise RnnexpError(f"sweep '{name}': no parent run with that id or name — latest is "
                      f"'{sweeps[0].info.run_name}' ({sweeps[0].info.run_id})")


def has_jobs(client, exp_id: str, parent_id: str) -> bool:
    return bool(client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = "
                                                          f"'{parent_id}'", max_results=1))


def ended(parent) -> str:
    reason = parent.data.tags.get("reason")
    return f"{parent.info.status} with no job runs" + (f" ({reason})" if reason else "")


def say_skipped(empty: list) -> None:
    """One line for the newer sweeps left out (a launch that failed, one still starting)."""
    from rnnexp.results.report import err_console

    more = f" and {len(empty) - 1} older" if len(empty) > 1 else ""
    err_console.print(f"note: left out sweep '{empty[0].info.run_name}'{more}: "
                      f"{ended(empty[0])}", highlight=False, markup=False, soft_wrap=True)


def read_runs(client, found) -> list[Run]:
    """MLflow job runs as Runs, each read from the results.json it logged."""
    from mlflow.exceptions import MlflowException  # here: a sweep folder needs no MLflow

    out = []
    # One results file a run: MLflow's download progress bars (tqdm, where it is installed)
    # would only clutter the error stream.
    quiet = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    with tempfile.TemporaryDirectory(prefix="rnnexp-compare-") as tmp, store.http_limits(quiet):
        for run in found:
            try:
                path = client.download_artifacts(run.info.run_id, RESULTS_FILE,
                                                 f"{tmp}/{run.info.run_id}")
            except (OSError, MlflowException):
                continue  # a run that logged no result (declined before recording one)
            try:
                result = Result.load_checked(Path(path))
            except BrokenResults as err:
                raise RnnexpError(f"MLflow run {run.info.run_id} ({run.info.run_name}): its "
                                  f"{RESULTS_FILE} {err.problem}") from None
            out.append(Run.of(run.info.run_name or "", result, run.info.run_id))
    return out


def from_store(client, exp_id: str, name: Optional[str]) -> Sweep:
    """The sweep with this parent run id or name (default: the latest) and its job runs, each
    read from the results.json it logged."""
    parent = find_parent(client, exp_id, name)
    found = client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = "
                                                       f"'{parent.info.run_id}'",
                               max_results=10000)
    out = read_runs(client, found)
    if not out:
        raise RnnexpError(f"sweep '{parent.info.run_name}' has no job runs with a result "
                          "(yet)")
    folder = parent.data.tags.get("sweep_dir")
    return Sweep(name=f"{parent.info.run_name}  ({parent.info.run_id})",
                 runs=sorted(out, key=lambda r: r.row.job), run_id=parent.info.run_id,
                 folder=Path(folder) if folder and Path(folder).is_dir() else None)
