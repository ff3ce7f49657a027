"""The report sink (`sinks=[json,console,report,mlflow]`, the default): at a sweep's end,
the sweep's HTML report in <sweep>/summary/report.html (the console names it with the sweep's
other files). Listed before
`mlflow`, the MLflow sink logs it with the summary to the sweep's parent run. A single run
gets none (its table says everything); `sinks=[json,console,mlflow]` leaves it out."""

from __future__ import annotations

from rnnexp.errors import crash_line, full_error
from rnnexp.results import summary
from rnnexp.results.sinks import Jobs, Sink, Sweep


class Report(Sink):
    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        if not jobs:
            return
        try:
            self.write(sweep, jobs)
        except OSError:
            raise  # an unwritable sweep folder: the sweep's end says so, as for the summary
        except Exception as err:  # the report is derived from results that are recorded
            if full_error():
                raise
            from rnnexp.results.report import print_warning

            print_warning(f"report not written ({crash_line(err)}) — the results are "
                          f"recorded; rnnexp report {sweep.dir} tries again")

    def warm(self) -> None:
        # What `write` imports (SciPy among them: ~1 s), ahead of the sweep's end.
        from rnnexp.analysis import compare_render, sweeps  # noqa: F401
        from rnnexp.analysis.report import build, render  # noqa: F401

    @staticmethod
    def write(sweep: Sweep, jobs: Jobs) -> None:
        # Imported at the end of a sweep (or by `warm`), not when the sinks are built for
        # every job.
        from rnnexp.analysis import sweeps
        from rnnexp.analysis.compare_render import varying
        from rnnexp.analysis.report import build, render

        runs = []
        for folder, result in jobs:
            try:
                job = str(folder.relative_to(sweep.path))
            except ValueError:  # kept outside the sweep's folder
                job = str(folder)
            runs.append(sweeps.Run.of(job, result))
        report = build.report(f"sweep {sweep.name}", [sweep.dir], runs, None, {}, varying(runs))
        render.write(report, sweep.path / summary.SUMMARY_DIR / summary.REPORT)
