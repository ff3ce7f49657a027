"""The report sink (`sinks=[json,console,report,mlflow]`, the default): at a sweep's end,
the sweep's HTML report in <sweep>/summary/report.html, its path printed. Listed before
`mlflow`, the MLflow sink logs it with the summary to the sweep's parent run. A single run
gets none (its table says everything); `sinks=[json,console,mlflow]` leaves it out."""

from __future__ import annotations

from pathlib import Path

from rnnexp.results import summary
from rnnexp.results.sinks import Jobs, Sink, Sweep


class Report(Sink):
    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        if not jobs:
            return
        # Imported at the end of a sweep, not when the sinks are built for every job.
        from rnnexp.analysis import sweeps
        from rnnexp.analysis.compare import varying
        from rnnexp.analysis.report import build, publish

        runs = [sweeps.Run.of(str(Path(folder).relative_to(sweep.path)), result)
                for folder, result in jobs]
        keys = varying(runs)
        report = build.report(f"sweep {sweep.name}", [sweep.dir], runs, None, {}, keys)
        publish.write(report, sweep.path / summary.SUMMARY_DIR / summary.REPORT, [], None, "")
