"""`rnnexp history [KEY=VALUE ...]`: every selected measurement's series over commits, torch
versions and dates from the MLflow store, the changes in its level, and a chart per series.

KEY=VALUE selects runs as `compare --baseline` does (any config group or field: `model=lstm`,
`backend=aten`, `shape.seq_len=20`); several must all hold. A series is one measurement on
one machine (device name and thread count): runs of another machine or device are never one
series. The interpreter a run was measured under (`bench.python`) is treated like its torch
version: a point of the same series. Each run is a point with its 95% interval from its
processes; the changes are found and sized on those replicates (rnnexp.analysis.history).
With `--metric instructions` the level is the runs' instruction counts (runs taken with
bench.metric=instructions). `--report PATH` writes the series as an HTML page;
`--fail-on-change PCT` exits 3 (as compare's --fail-on-regression) when one of the latest
runs starts a change of at least PCT%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.analysis import history, history_chart, history_page, store_runs
from rnnexp.analysis.compare_select import from_the_store
from rnnexp.analysis.report import render
from rnnexp.app.commands import check_page_path
from rnnexp.config.credentials import redact
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import console, print_error
from rnnexp.results.sinks.mlflow import store

PHASES = {"auto": "fwd+bwd", "total": "fwd+bwd", "forward": "fwd", "backward": "bwd"}


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = OneLineParser(prog="rnnexp history",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("choices", nargs="*", metavar="KEY=VALUE",
                        help="select runs by config group or field, e.g. model=lstm "
                             "backend=aten (default: every measurement in the store)")
    parser.add_argument("--phase", choices=list(PHASES), default="auto",
                        help="phase whose level is followed (default: fwd+bwd, forward where "
                             "no backward ran)")
    parser.add_argument("--metric", choices=list(history.METRICS), default=history.TIME,
                        help="the level followed: time (ms) or instructions (the counts of "
                             "runs taken with bench.metric=instructions)")
    parser.add_argument("--alpha", type=float, default=history.ALPHA,
                        help=f"significance of a change (default {history.ALPHA:g}, as "
                             "Otava's)")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=Path("outputs/history"),
                        help="folder for the charts (default: outputs/history)")
    parser.add_argument("--report", type=Path, default=None, metavar="PATH",
                        help="also write the series as an HTML page (e.g. history.html)")
    parser.add_argument("--fail-on-change", type=float, default=None, metavar="PCT",
                        help=f"exit {exit_codes.REGRESSION} when a change of at least PCT%% "
                             "(in --direction) starts in one of the --latest runs of a series")
    parser.add_argument("--direction", choices=[history.SLOWER, history.FASTER,
                                                history.EITHER], default=history.SLOWER,
                        help="which changes --fail-on-change fails on (default: slower)")
    parser.add_argument("--latest", type=int, default=5, metavar="N",
                        help="--fail-on-change looks at changes starting in a series' last N "
                             "runs (default 5)")
    args = parser.parse_args(argv)
    if not 0 < args.alpha < 0.5:
        raise RnnexpError(f"--alpha {args.alpha:g}: a significance level in (0, 0.5) — "
                          "e.g. 0.001")
    if args.fail_on_change is not None and not 0 < args.fail_on_change < 1000:
        raise RnnexpError(f"--fail-on-change {args.fail_on_change:g}: a size in percent "
                          "above 0, e.g. 5")
    if args.latest < 1:
        raise RnnexpError(f"--latest {args.latest}: at least 1 run, e.g. 5")
    check_page_path("--report", args.report)
    args.choices = store_runs.parse(args.choices)
    return args


def series_table(all_series: Sequence[history.Series], phase: str) -> Table:
    unit = all_series[0].unit
    t = Table(title=f"series ({PHASES[phase]}): one measurement on one machine",
              caption="level = the median of the run's process medians"
                      + (" (counts per iteration)" if unit != "ms" else ""))
    last = f"last level {unit}"
    for col in ("measurement", "machine", "runs", "from", "to", "commits", "torch", last,
                "changes"):
        t.add_column(col, justify="right" if col in ("runs", "commits", "changes", last)
                     else "left")
    for s in all_series:
        pts = s.points
        t.add_row(escape(s.name), escape(str(s.machine)), str(len(pts)), pts[0].day,
                  pts[-1].day, str(len({p.commit for p in pts})),
                  ", ".join(sorted({p.torch for p in pts})), f"{pts[-1].level:.4g}",
                  str(len(s.changes)))
    return t


def changes_table(all_series: Sequence[history.Series]) -> Table:
    t = Table(title="changes: from → to, size with its 95% interval, first run after it",
              caption="size = level after ÷ before − 1, tested on the runs' replicates "
                      "(random effects between runs); same code = the commit and torch "
                      "did not change: the machine did")
    unit = all_series[0].unit
    for col in ("measurement", "from", "to", f"before {unit}", f"after {unit}", "size (95%)",
                "p", "first run after it"):
        t.add_column(col)
    for s in all_series:
        for c in s.changes:
            to = "[yellow]same code[/]" if c.same_code else escape(c.after.version)
            first = f"{c.after.day} {escape(c.after.run_id[:12] or c.after.name)}"
            t.add_row(escape(s.name), escape(c.before.version), to,
                      f"{c.shift.before_ms:.4g}", f"{c.shift.after_ms:.4g}", c.size_text(),
                      f"{c.shift.pvalue:.1e}", first)
    return t


def show(args) -> int:
    with store.http_limits():
        client, exp_id = store.connect(args.tracking_uri, args.experiment, create=False)
        runs = store_runs.select(client, exp_id, args.choices)
    found = history.find(runs, args.phase, args.metric, args.alpha)
    console.print(series_table(found, args.phase))
    if any(s.changes for s in found):
        console.print(changes_table(found))
    else:
        console.print(f"no change in any series at p ≤ {args.alpha:g}", highlight=False)
    for s in found:
        png = history_chart.draw(s, args.output / history_chart.file_name(s),
                                 PHASES[args.phase])
        console.print(f"chart: {png}", highlight=False, markup=False)
    if args.report is not None:
        page = history_page.history(found, PHASES[args.phase],
                                    [f"{redact(str(args.tracking_uri))} {args.experiment}"])
        console.print(f"report: {render.write(page, args.report)} (open in a browser)",
                      highlight=False, markup=False)
    return gate(found, args)


def gate(found, args) -> int:
    """--fail-on-change: one line per change that fires, and the regression exit code."""
    if args.fail_on_change is None:
        return 0
    fired = history.gate(found, args.fail_on_change / 100, args.direction, args.latest)
    for s, c in fired:
        print_error(f"change: {s.name} on {s.machine} {c.size_text()} from "
                    f"{c.before.version} to {c.after.version}, first run after it "
                    f"{c.after.day} {c.after.run_id[:12] or c.after.name}")
    return exit_codes.REGRESSION if fired else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp history ARGS`; errors reach rnnexp.app.commands' boundary."""
    args = parse_args(argv)
    try:
        return show(args)
    except Exception as err:
        if not from_the_store(err) or isinstance(err, RnnexpError):
            raise
        raise RnnexpError(f"MLflow store {redact(str(args.tracking_uri))}: "
                          f"{redact(store.short_reason(err))}") from None
