"""`rnnexp compare`: a sweep's medians and spread, and differences with their
significance — within one sweep against a baseline option, or between two sweeps (A/B).

A sweep is a results folder (outputs/sweeps/<date>/<time>, or one run's folder) or a sweep
recorded in MLflow (parent run id or name; default: the latest). `--baseline KEY=VALUE`
compares every run with the run of the same sweep that differs from it only in KEY (if none
exists and exactly one run matches, that run is the baseline for all). `--against SWEEP`
compares every run with the run of the other sweep that measured the same configuration.

KEY is any config field or group (`model`, `seed`, `shape.seq_len`, `bench.python`).

Every cell gets the speedup (baseline ÷ candidate) with its 95% interval, judged at the unit
of replication, the process (rnnexp.analysis.significance): paired by round for jobs measured
in the same interleaved window (and by process where they shared worker processes), run
against run — between-process spread plus the drift between runs — otherwise;
Holm-corrected across all cells. A cell is a speedup, "~" (the interval lies within
±`--min-effect`) or "cannot tell ±X%" (the interval is that wide here); a run timed on a
busy machine, or one process a side with no spread between processes known, cannot tell.
Beside each speedup the table shows the two levels it is the ratio of, and how many
processes each side had.
`--fail-on-regression PCT` exits with code 3 when any cell is significantly slower than its
baseline by PCT% or more, for CI gates.
A second table shows each run's peak memory per phase and start-up (time to first result,
compile time, steady iteration) and, against a baseline, the break-even: after how many
iterations the run, start-up included, has cost less than its baseline (rnnexp.models.compile_cost).
The chart is saved (and logged to the sweep's parent run when it is in MLflow): with a
baseline, both sides of every cell and the speedup; with `--roofline` the sweep's roofline
chart (rnnexp.analysis.roofline_chart) too. Beside the chart, the comparison's HTML report
(rnnexp.analysis.report: matrix, forest plot, roofline, every cell's details), logged there
too.

The command reads its arguments and sets the exit status; what it compares is
rnnexp.analysis.compare_select's, how runs are paired and judged rnnexp.analysis.compare's,
and what it shows rnnexp.analysis.compare_render's.
"""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.config.credentials import redact
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import console, print_error

# What reads and judges results (torch, SciPy and MLflow come with them) is imported by the
# functions that use it: an argument error and --help answer without them.

EXIT_USER_ERROR = exit_codes.USER_ERROR


EXIT_REGRESSION = exit_codes.REGRESSION


# rnnexp.analysis.significance.MIN_EFFECT in %, repeated here so that parsing the arguments
# needs no SciPy (tests/analysis/test_compare.py holds the two equal).
MIN_EFFECT_PCT = 3.0


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = OneLineParser(prog="rnnexp compare",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("sweeps", nargs="*", default=[], metavar="SWEEP",
                        help="a results.json, a run or sweep folder (or a folder of them: "
                             "outputs/runs), or an MLflow sweep's parent run id or name "
                             "(default: the latest sweep in the store); two: the first is "
                             "the baseline of the second, as --against (pyperf compare_to)")
    add_judging_options(parser)
    add_store_options(parser)
    parser.add_argument("--output", type=Path, default=None,
                        help="chart PNG path (default: outputs/compare/<sweep>.png)")
    parser.add_argument("--roofline", action="store_true",
                        help="also draw the roofline chart: <sweep folder>/summary/roofline.png "
                             "when the folder is on this machine, else beside the chart")
    args = parser.parse_args(argv)
    two_given(args)
    check_judging(args, "one sweep")
    return args


def add_judging_options(parser: argparse.ArgumentParser) -> None:
    """--baseline, --against, --min-effect and --fail-on-regression: how `compare` and
    `report` judge a comparison (checked by `check_judging`)."""
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="e.g. backend=cudnn or model=lstm: every run against the run "
                             "that differs from it only in KEY")
    parser.add_argument("--against", default=None, metavar="SWEEP",
                        help="a baseline sweep (folder, parent run id or name): every run "
                             "against the run of it that measured the same configuration")
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT_PCT,
                        metavar="PCT", help="smallest difference shown, in %% (default: "
                                            f"{MIN_EFFECT_PCT:g})")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help=f"exit {EXIT_REGRESSION} if a cell is significantly slower than "
                             "its baseline by PCT%% or more")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """--tracking-uri and --experiment: where `compare` and `report` read MLflow sweeps."""
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")


def check_judging(args: argparse.Namespace, within: str) -> None:
    """--baseline or --against (a baseline option `within` the sweeps, or a baseline sweep),
    --min-effect and --fail-on-regression, as `compare` and `report` take them."""
    if args.baseline and args.against:
        raise RnnexpError("--baseline and --against: choose one (a baseline option within "
                          f"{within}, or a baseline sweep)")
    if args.fail_on_regression is not None and not (args.baseline or args.against):
        raise RnnexpError("--fail-on-regression needs a baseline — add --against SWEEP or "
                          "--baseline KEY=VALUE")
    for name in ("min_effect", "fail_on_regression"):
        value = getattr(args, name)
        if value is not None and not 0 <= value < 100:
            raise RnnexpError(f"--{name.replace('_', '-')} {value:g}: a percentage in "
                              "[0, 100) — e.g. 5 for 5%")


def two_given(args: argparse.Namespace) -> None:
    """SWEEP, or BASELINE SWEEP (what `pyperf compare_to a.json b.json` users type): the
    sweep compared (`args.sweep`) and the baseline sweep (`args.against`)."""
    if len(args.sweeps) > 2:
        raise RnnexpError(f"{len(args.sweeps)} sweeps given: compare one, or a baseline and a "
                          "candidate (rnnexp compare BASELINE CANDIDATE)")
    if len(args.sweeps) == 2 and args.against:
        raise RnnexpError("two sweeps and --against: the first of the two is the baseline "
                          "already — drop --against, or give one sweep")
    if len(args.sweeps) == 2 and args.baseline:
        raise RnnexpError("two sweeps and --baseline: the first of the two is the baseline "
                          "— drop --baseline, or give one sweep")
    args.sweep = args.sweeps[-1] if args.sweeps else None
    if len(args.sweeps) == 2:
        args.against = args.sweeps[0]
    check_output(args.output)


def check_output(png: Optional[Path]) -> None:
    """--output names a file that can be made, before anything is read or drawn (a bad
    argument: exit 2, as for hydra.run.dir)."""
    if png is None:
        return
    if png.is_dir():
        raise RnnexpError(f"--output {png}: is a folder — name a .png file in it")
    parent = png.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".rnnexp-check-", suffix=".png")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise RnnexpError(f"--output {png}: cannot be written in {parent} "
                          f"({err.strerror or err}) — choose a writable folder") from None


def run(args: argparse.Namespace) -> int:
    """The comparison: selected, judged, shown; the exit status (the gate's, or a chart
    that could not be written)."""
    from rnnexp.analysis import compare_costs, nodes, sweeps
    from rnnexp.analysis.compare import judge, sweeps_of, verdict
    from rnnexp.analysis.compare_render import (
        chart_name,
        draw_chart,
        draw_roofline,
        how_judged,
        report_of,
        table,
        varying,
    )
    from rnnexp.analysis.compare_select import Stores, selected
    from rnnexp.analysis.report import publish
    from rnnexp.analysis.sweeps import PHASES
    from rnnexp.results.result import label
    from rnnexp.results.sinks.mlflow import store

    with store.http_limits():
        stores = Stores(args.tracking_uri, args.experiment)
        c = selected(stores, args.sweep, args.against, args.baseline)
        if c.bases is not None:
            c.cells = judge(c.runs, c.bases, args.min_effect / 100,
                            (args.fail_on_regression or 0) / 100)
        keys = sweeps.told_apart(c.runs, varying(c.runs))
        console.print(table(c.runs, c.bases, c.cells, c.title, keys))
        if c.cells:
            console.print(how_judged(c.cells), highlight=False, markup=False)
            crossed = nodes.crossings_line(
                c.runs, c.bases or [], lambda r: label(r.config, keys),
                {p: nodes.spread(sweeps_of(c.runs, c.bases or []), p) for p, _ in PHASES})
            if crossed:
                console.print(crossed, highlight=False, markup=False, soft_wrap=True)
        if compare_costs.recorded(c.runs):
            console.print(compare_costs.table(c.runs, c.bases, keys, c.title))
        png = args.output or \
            Path("outputs/compare") / chart_name(c.sweep, args.baseline, args.against)
        try:
            draw_chart(c, keys, png, stores.client)
            if args.roofline:
                draw_roofline(c.sweep, c.runs, keys, png, stores.client)
            report = report_of(c, keys, args.baseline, args.against, args.min_effect,
                               args.fail_on_regression)
            publish.write(report, png.with_suffix(".html"), [c.sweep], stores.client,
                          "compare")
        except OSError as err:  # a full disk, a folder gone: the tables above stand
            print_error(f"cannot write {err.filename or png} ({err.strerror or err}) — the "
                        "comparison above is complete, its chart is not saved")
            # A regression found is the gate's answer, and wins.
            return verdict(c, args.fail_on_regression) or exit_codes.OUTPUT_FAILED
    return verdict(c, args.fail_on_regression)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp compare ARGS`; errors reach rnnexp.app.commands' boundary."""
    args = parse_args(argv)
    try:
        return run(args)
    except Exception as err:
        from rnnexp.analysis.compare_select import from_the_store

        if not from_the_store(err) or isinstance(err, RnnexpError):
            raise
        from rnnexp.results.sinks.mlflow import store

        raise RnnexpError(f"MLflow store {redact(str(args.tracking_uri))}: "
                          f"{redact(store.short_reason(err))}") from None
