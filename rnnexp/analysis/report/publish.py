"""A report where a person finishes work: written beside the outputs, its path printed, and
logged to the MLflow parent run of each sweep it reads, where the MLflow UI opens it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from rnnexp.analysis.report import render
from rnnexp.analysis.report.model import Report
from rnnexp.analysis.sweeps import Sweep
from rnnexp.results.report import console


def write(report: Report, path: Path, sweeps: Sequence[Sweep], client: Optional[object],
          artifact_path: str) -> Path:
    """Write the report; log it under `artifact_path` of each sweep's parent run (sweeps read
    from MLflow); print where it is."""
    path = render.write(report, path)
    runs = [s.run_id for s in sweeps if s.run_id]
    if client is not None:
        for run_id in runs:
            client.log_artifact(run_id, str(path), artifact_path)  # type: ignore[attr-defined]
    logged = (f" (also logged to run {', '.join(runs)} under {artifact_path}/)"
              if runs and client is not None else "")
    console.print(f"report: {path}{logged}", highlight=False, markup=False, soft_wrap=True)
    return path
