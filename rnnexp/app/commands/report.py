"""`rnnexp report [SWEEP…] [--against SWEEP] [--baseline KEY=VALUE] [-o FILE]`: one HTML file
that shows a sweep — or several together — as a person reads it: the status matrix, the
comparison's forest plot (with a baseline), the roofline, the environments and every cell's
details with the command that measures it again. It opens offline from disk, and is logged
to each sweep's MLflow parent run (under report/) when the sweep was read from MLflow.

A SWEEP is what `rnnexp compare` takes: a results folder, or an MLflow parent run id or
name (default: the latest sweep). Comparisons are judged exactly as `rnnexp compare` judges
them (its --baseline, --against, --min-effect and --fail-on-regression).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from rnnexp.analysis import compare, compare_render, compare_select
from rnnexp.app.commands import check_page_path
from rnnexp.app.commands.compare import (
    add_judging_options,
    add_store_options,
    check_judging,
)
from rnnexp.config.credentials import redact
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import print_error

if TYPE_CHECKING:  # with torch, SciPy and MLflow: imported once the arguments are read
    from rnnexp.analysis.sweeps import Sweep

DEFAULT_FOLDER = Path("outputs/reports")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = OneLineParser(prog="rnnexp report",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP",
                        help="results folders, or MLflow parent run ids or names (default: "
                             "the latest sweep in the store); several are shown together")
    add_judging_options(parser)
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help=f"the HTML file (default: {DEFAULT_FOLDER}/<what it shows>.html)")
    add_store_options(parser)
    args = parser.parse_args(argv)
    args.sweep = args.sweeps[0] if args.sweeps else None  # compare's name for the first
    check_judging(args, "the sweeps")
    check_page_path("-o", args.output)
    return args


def together(loaded: Sequence[Sweep]) -> Sweep:
    """Several sweeps as one: their runs side by side, each numbered in turn."""
    from rnnexp.analysis.sweeps import Sweep

    if len(loaded) == 1:
        return loaded[0]
    return Sweep(name=" + ".join(s.name for s in loaded),
                 runs=[r for s in loaded for r in s.runs])


def paired(args: argparse.Namespace, stores: compare_select.Stores
           ) -> tuple[compare.Comparison, list[Sweep]]:
    """The sweeps (together) and, with --against or --baseline, each run's baseline; the
    sweeps read, whose parent runs get the report."""
    loaded = [stores.load(name) for name in args.sweeps or [None]]
    sweep = together(loaded)
    if args.against:
        base = stores.load(args.against)
        what = compare.differs(sweep.runs, base.runs)
        title = f"{sweep.name}  vs baseline  {base.name}  (" + (
            "; ".join(what) if what else "no config difference recorded") + ")"
        return compare.Comparison(sweep, sweep.runs,
                                  compare.baselines_across(sweep.runs, base.runs),
                                  title), loaded
    if args.baseline:
        key, value = compare_select.parse_baseline(args.baseline, sweep.runs)
        return compare.Comparison(sweep, sweep.runs,
                                  compare.baselines_within(sweep.runs, key, value),
                                  f"{sweep.name}  (baseline {key}={value})"), loaded
    return compare.Comparison(sweep, sweep.runs, None, sweep.name), loaded


def output(args: argparse.Namespace, loaded: Sequence[Sweep]) -> Path:
    if args.output is not None:
        return args.output
    names = [compare_render.chart_name(s, args.baseline, args.against).removesuffix(".png")
             for s in loaded[:1]]
    more = f"-and-{len(loaded) - 1}-more" if len(loaded) > 1 else ""
    return DEFAULT_FOLDER / f"{names[0]}{more}.html"


def report(args: argparse.Namespace) -> int:
    from rnnexp.analysis.report import publish

    stores = compare_select.Stores(args.tracking_uri, args.experiment)
    c, loaded = paired(args, stores)
    if c.bases is not None:
        c.cells = compare.judge(c.runs, c.bases, args.min_effect / 100,
                                (args.fail_on_regression or 0) / 100)
    keys = compare_render.varying(c.runs)
    data = compare_render.report_of(c, keys, args.baseline, args.against, args.min_effect,
                                   args.fail_on_regression, sources=[s.name for s in loaded])
    publish.write(data, output(args, loaded), loaded, stores.client, "report")
    if args.fail_on_regression is None:
        return exit_codes.OK
    found = compare.regressions(c.runs, c.cells, args.fail_on_regression)
    for line in found:
        print_error(line)
    return exit_codes.REGRESSION if found else exit_codes.OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp report ARGS`; errors reach rnnexp.app.commands' boundary."""
    args = parse_args(argv)
    from rnnexp.results.sinks.mlflow import store

    try:
        with store.http_limits():
            return report(args)
    except Exception as err:
        if not compare_select.from_the_store(err) or isinstance(err, RnnexpError):
            raise
        raise RnnexpError(f"MLflow store {redact(str(args.tracking_uri))}: "
                          f"{redact(store.short_reason(err))}") from None
