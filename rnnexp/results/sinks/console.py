"""The results table on the console: after each job, and for the whole sweep at its end."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rnnexp.results.report import console, print_warning, results_table
from rnnexp.results.result import INTERRUPTED, RESULTS_FILE, Result
from rnnexp.results.sinks import Jobs, Sink, Sweep


class Console(Sink):
    """`wide`: the table adds dtype, GFLOP/s, GB/s and the verification error
    (sinks.console.wide=true)."""

    def __init__(self, wide: bool = False):
        self.wide = bool(wide)

    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        if result.status == INTERRUPTED:
            return  # the process says so in one line as it exits
        console.print(results_table([result], wide=self.wide))
        if result.environment is not None and result.environment.warnings:
            print_warning(result.environment.warning_line())
        if (Path(output_dir) / RESULTS_FILE).exists():
            console.print(f"results: {Path(output_dir) / RESULTS_FILE}", highlight=False)

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        console.print(results_table([r for _, r in jobs],
                                    title=f"rnnexp sweep: {len(jobs)} jobs",
                                    wide=self.wide, shorten=True))
