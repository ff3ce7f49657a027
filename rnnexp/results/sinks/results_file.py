"""results.json in each job's folder; after a sweep, its summary files and chart, and its jobs
linked by name (rnnexp.results.job_links)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rnnexp.results import job_links, summary
from rnnexp.results.result import Result
from rnnexp.results.sinks import Jobs, Sink, Sweep


class ResultsFile(Sink):
    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        result.save(output_dir)

    def warm(self) -> None:
        summary.warm()

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        summary.write(sweep.path, jobs)
        job_links.link(sweep.path, jobs)
