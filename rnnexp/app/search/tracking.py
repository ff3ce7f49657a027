"""The search in MLflow: a parent run for the search, and every trial a child run of it —
a measured cell with its result logged as any job's (rnnexp.results.sinks.mlflow.runs), a
refused one with its reason — carrying the trial's number, what Optuna was told and the
constraint it failed. The confirmation's measurements are children too, tagged `confirm`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from optuna.trial import FrozenTrial

from rnnexp.app.search import precheck, window
from rnnexp.app.search.space import Space
from rnnexp.machine import platform
from rnnexp.results.sinks.mlflow import runs, store

KIND = "search"
METRICS = ("speedup", "low", "high", "peak_mb", "compile_s", "median_ms")


class Tracker:
    def __init__(self, uri: str, experiment: str):
        self.client, self.exp_id = store.connect(uri, experiment)
        self.parent: Optional[str] = None

    def start(self, space: Space, folder: Path, settings: dict[str, str]) -> str:
        """The search's parent run (a search that goes on reopens its own)."""
        found = self.client.search_runs(
            [self.exp_id], filter_string=f"tags.`{runs.TAG_KIND}` = '{KIND}' and "
                                         f"tags.search_dir = '{folder.resolve()}'",
            max_results=1)
        if found:
            self.parent = found[0].info.run_id
            self.client.update_run(self.parent, status="RUNNING")
            return self.parent
        run = self.client.create_run(self.exp_id, run_name=f"search {folder.name}", tags={
            runs.TAG_KIND: KIND, "search_dir": str(folder.resolve()),
            "space": " ".join([*space.fixed, *(f"{d.name}={','.join(map(str, d.values()))}"
                                               for d in space.dimensions)])[:5000],
            "baseline": space.label(space.baseline)[:5000],
            "git_commit": platform.git_commit(), "mlflow.source.name": "rnnexp search"})
        self.parent = run.info.run_id
        for k, v in settings.items():
            self.client.log_param(self.parent, k, v)
        return self.parent

    def trial(self, t: FrozenTrial, m: Optional[window.Measured],
              refused: Optional[precheck.Refusal] = None, tag: str = "trial") -> str:
        """One trial (or a confirmation's measurement) as a child run."""
        assert self.parent is not None
        a = t.user_attrs
        if m is not None and m.result is not None and m.folder is not None:
            run_id = runs.log_result(self.client, self.exp_id, m.result, m.folder, self.parent)
        else:
            run = self.client.create_run(self.exp_id, run_name=f"{a.get('cell', '')} "
                                         "(refused)", tags={"mlflow.parentRunId": self.parent})
            run_id = run.info.run_id
            self.client.set_terminated(run_id, status="FINISHED")
        self.client.set_tag(run_id, "search.role", tag)
        self.client.set_tag(run_id, "search.trial", str(t.number))
        self.client.set_tag(run_id, "search.cell", str(a.get("cell", ""))[:5000])
        if constraints_failed(t):
            reason = refused.reason if refused else a.get("reason", "")
            self.client.set_tag(run_id, "search.constraint", str(reason)[:5000])
        for name in METRICS:
            if window.finite(a.get(name)):
                self.client.log_metric(run_id, f"search.{name}", float(a[name]))
        return run_id

    def confirmed(self, trial: int, m: window.Measured, role: str) -> None:
        assert self.parent is not None
        if m.result is None or m.folder is None:
            return
        run_id = runs.log_result(self.client, self.exp_id, m.result, m.folder, self.parent)
        self.client.set_tag(run_id, "search.role", role)
        self.client.set_tag(run_id, "search.trial", str(trial))
        d = m.difference
        if d is not None:
            for name, v in (("speedup", d.speedup), ("low", d.low), ("high", d.high)):
                if window.finite(v):
                    self.client.log_metric(run_id, f"search.{name}", float(v))

    def end(self, status: str = "FINISHED", summary: Optional[dict] = None) -> None:
        if self.parent is None:
            return
        for k, v in (summary or {}).items():
            self.client.set_tag(self.parent, k, str(v)[:5000])
        self.client.set_terminated(self.parent, status=status)


def constraints_failed(t: FrozenTrial) -> bool:
    return any(v > 0 for v in t.constraints.values())
