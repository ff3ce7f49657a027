"""`python -m rnnexp.compare`: a sweep's medians and spread, and differences with their
significance — within one sweep against a baseline option, or between two sweeps (A/B).

A sweep is a results folder (outputs/sweeps/<date>/<time>, or one run's folder) or a sweep
recorded in MLflow (parent run id or name; default: the latest). `--baseline KEY=VALUE`
compares every run with the run of the same sweep that differs from it only in KEY (if none
exists and exactly one run matches, that run is the baseline for all). `--against SWEEP`
compares every run with the run of the other sweep that measured the same configuration.

Every cell gets the speedup (baseline median ÷ median) with a 95% bootstrap interval from
the raw samples and a Mann-Whitney U test, Holm-corrected across all cells; a difference that
is not significant or smaller than `--min-effect` shows as "~" (rnnexp.significance).
`--fail-on-regression PCT` exits with code 3 when any cell is significantly slower than its
baseline by PCT% or more, for CI gates.
The fwd/bwd bar chart is saved (and logged to the sweep's parent run when it is in MLflow), and
with `--roofline` the sweep's roofline chart (rnnexp.roofline_chart) too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp import exit_codes, roofline_chart, significance, summary, sweeps
from rnnexp.credentials import redact
from rnnexp.errors import RnnexpError
from rnnexp.report import console, print_error, print_warning
from rnnexp.results import OK, format_ms, label
from rnnexp.schema import default_store_uri
from rnnexp.significance import Difference
from rnnexp.sinks.mlflow import store
from rnnexp.sweeps import PHASES, Run, Sweep

EXIT_USER_ERROR = exit_codes.USER_ERROR
EXIT_REGRESSION = exit_codes.REGRESSION


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rnnexp.compare",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("sweep", nargs="?", default=None,
                        help="results folder, or MLflow parent run id or name of the sweep "
                             "(default: the latest sweep in the store)")
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="e.g. backend=cudnn or model=lstm: differences against it")
    parser.add_argument("--against", default=None, metavar="SWEEP",
                        help="a second sweep (folder, parent run id or name) as the baseline: "
                             "A/B by matching configurations")
    parser.add_argument("--min-effect", type=float, default=100 * significance.MIN_EFFECT,
                        metavar="PCT", help="smallest difference shown, in %% (default: "
                                            f"{100 * significance.MIN_EFFECT:g})")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help=f"exit {EXIT_REGRESSION} if a cell is significantly slower than "
                             "its baseline by PCT%% or more")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=None,
                        help="chart PNG path (default: outputs/compare/<sweep>.png)")
    parser.add_argument("--roofline", action="store_true",
                        help="also draw the roofline chart: <sweep folder>/summary/roofline.png "
                             "when the folder is on this machine, else beside the chart")
    args = parser.parse_args(argv)
    if args.baseline and args.against:
        raise RnnexpError("--baseline and --against: choose one (a baseline option within "
                          "one sweep, or a baseline sweep)")
    if args.fail_on_regression is not None and not (args.baseline or args.against):
        raise RnnexpError("--fail-on-regression needs a baseline — add --against SWEEP or "
                          "--baseline KEY=VALUE")
    for name in ("min_effect", "fail_on_regression"):
        value = getattr(args, name)
        if value is not None and not 0 <= value < 100:
            raise RnnexpError(f"--{name.replace('_', '-')} {value:g}: a percentage in "
                              "[0, 100) — e.g. 5 for 5%")
    return args


class Stores:
    """The MLflow store, opened only if a sweep is named by run id or name."""

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment, self._conn = uri, experiment, None

    def load(self, name: Optional[str]) -> Sweep:
        if name is not None and Path(name).is_dir():
            return sweeps.from_folder(Path(name))
        if self._conn is None:
            self._conn = store.connect(self.uri, self.experiment, create=False)
        return sweeps.from_store(*self._conn, name)

    @property
    def client(self):
        return self._conn[0] if self._conn else None


def median(run: Run, phase: str) -> Optional[float]:
    return getattr(run.row, f"{phase}_median_ms")


def parse_baseline(text: str, runs: list[Run]) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise RnnexpError(f"--baseline '{text}': expected KEY=VALUE, e.g. model=lstm")
    keys = sorted({k for r in runs for k in r.row.choices})
    if key not in keys:
        raise RnnexpError(f"--baseline {key}: not a config group of this sweep — use one of "
                          f"{', '.join(keys)}")
    values = sorted({r.row.choices.get(key, "?") for r in runs})
    if not any(r.row.choices.get(key) == value and r.row.fwd_median_ms is not None
               for r in runs):
        raise RnnexpError(f"--baseline {text}: matches no timed run of this sweep — "
                          f"{key} was {', '.join(values)}")
    return key, value


def baselines_within(runs: list[Run], key: str, value: str) -> list[Optional[Run]]:
    """Each run's baseline: the run that differs from it only in `key`."""
    def rest(r: Run):
        return tuple(sorted((k, v) for k, v in r.row.choices.items() if k != key))

    single = [r for r in runs if r.row.fwd_median_ms is not None and
              r.row.choices.get(key) == value]
    base_of = {rest(r): r for r in single}
    return [base_of.get(rest(r)) or (single[0] if len(single) == 1 else None) for r in runs]


def match_keys(*groups: Sequence[Run]) -> list[str]:
    """Config entries that vary inside either sweep: they tell configurations apart. An entry
    constant inside each sweep but different between them (a git commit, a torch version, a
    changed option) is what the A/B comparison is about."""
    keys = set()
    for runs in groups:
        for k in {k for r in runs for k in r.config}:
            if len({r.config.get(k) for r in runs}) > 1:
                keys.add(k)
    return sorted(keys)


def baselines_across(runs: list[Run], base: list[Run]) -> list[Optional[Run]]:
    """Each run's counterpart in the baseline sweep (same values of the varying entries);
    several counterparts (repeats) are pooled into one."""
    keys = match_keys(runs, base)

    def key(r: Run):
        return tuple(r.config.get(k) for k in keys)

    found: dict[tuple, Run] = {}
    for b in base:
        if b.row.status != OK:
            continue
        if key(b) in found:  # pool repeats of one configuration
            pooled = found[key(b)]
            for p, values in b.samples.items():
                pooled.samples[p] = pooled.samples.get(p, []) + list(values)
        else:
            found[key(b)] = Run(row=b.row, samples={p: list(v) for p, v in b.samples.items()},
                                config=b.config)
    return [found.get(key(r)) for r in runs]


Cells = dict[tuple[int, str], Difference]  # (run index, phase) → difference


def judge(runs: list[Run], bases: list[Optional[Run]], min_effect: float) -> Cells:
    """Every timed run against its baseline, per phase, Holm-corrected across all cells."""
    where, pairs = [], []
    for i, (run, base) in enumerate(zip(runs, bases, strict=True)):
        if base is None or base is run or run.row.status != OK or base.row.status != OK:
            continue
        for p, _ in PHASES:
            a, b = base.samples.get(p) or [], run.samples.get(p) or []
            if a and b:
                where.append((i, p))
                pairs.append((a, b))
    diffs = significance.judge(pairs, min_effect=min_effect) if pairs else []
    return dict(zip(where, diffs, strict=True))


ORDER = ("model", "backend", "shape", "device", "bench", "sinks")


def varying(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.row.choices},
                  key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    return [k for k in keys if len({r.row.choices.get(k) for r in runs}) > 1] or keys[:1]


def table(runs: list[Run], bases: Optional[list[Optional[Run]]], cells: Cells, title: str,
          keys: Sequence[str], against: Optional[str]) -> Table:
    caption = "median ± IQR/2 in ms"
    if bases is not None:
        caption += ("; vs baseline: speedup = baseline median ÷ median (>1 is faster) with its "
                    "95% interval; ~ = no significant difference of at least --min-effect "
                    "(Mann-Whitney U, Holm-corrected); ! = a run of this cell was timed on a "
                    "machine flagged busy, oversubscribed or with high spread")
    t = Table(title=title, caption=caption)
    for k in keys:
        t.add_column(k)
    for p, _ in PHASES:
        if against:
            t.add_column(f"{p} ms (baseline)", justify="right")
        t.add_column(f"{p} ms", justify="right")
        if bases is not None:
            t.add_column(f"{p} vs baseline", justify="right")
    t.add_column("status")
    for i, r in enumerate(runs):
        base = bases[i] if bases is not None else None
        row = [r.row.choices.get(k, "?") for k in keys]
        for p, _ in PHASES:
            if against:
                row.append(format_ms(median(base, p), getattr(base.row, f"{p}_iqr_ms"))
                           if base else "no match")
            row.append(format_ms(median(r, p), getattr(r.row, f"{p}_iqr_ms")))
            if bases is not None:
                d = cells.get((i, p))
                mark = " !" if d and (flagged(r) or flagged(base)) else ""
                row.append("base" if base is r else d.cell() + mark if d else "—")
        status = "[green]ok[/]" if r.row.status == OK else \
            f"[yellow]{escape(r.row.status)}[/]: {escape(r.row.reason)}"
        t.add_row(*row, status)
    return t


def flagged(run: Optional[Run]) -> bool:
    return bool(run and run.flags)


def doubtful_cells(runs: list[Run], bases: Optional[list[Optional[Run]]], cells: Cells) -> int:
    """How many cells involve a run whose environment was flagged."""
    if bases is None:
        return 0
    return sum(flagged(runs[i]) or flagged(bases[i]) for i, _ in cells)


def regressions(runs: list[Run], cells: Cells, pct: float) -> list[str]:
    """One line per cell significantly slower than its baseline by at least pct %."""
    lines = []
    for (i, p), d in sorted(cells.items()):
        if d.verdict == "slower" and 100 * d.slowdown >= pct:
            lines.append(f"regression: {runs[i].row.label} {p} {100 * d.slowdown:.1f}% slower "
                         f"than its baseline (speedup {d.speedup:.3f}×, 95% interval "
                         f"{d.low:.3f}–{d.high:.3f}, Holm-corrected p={d.p_holm:.2g})")
    return lines


def compare(args: argparse.Namespace) -> int:
    with store.http_limits():
        stores = Stores(args.tracking_uri, args.experiment)
        sweep = stores.load(args.sweep)
        runs, bases = sweep.runs, None
        title = sweep.name
        if args.against:
            base_sweep = stores.load(args.against)
            bases = baselines_across(runs, base_sweep.runs)
            title = f"{sweep.name}  vs baseline  {base_sweep.name}"
        elif args.baseline:
            key, value = parse_baseline(args.baseline, runs)
            bases = baselines_within(runs, key, value)
            title += f"  (baseline {key}={value})"
        cells = judge(runs, bases, args.min_effect / 100) if bases is not None else {}
        keys = varying(runs)
        console.print(table(runs, bases, cells, title, keys, args.against))
        ok = [r.row for r in runs if r.row.status == OK]
        png = args.output or Path("outputs/compare") / (
            f"{sweep.run_id or Path(sweep.name).name or 'sweep'}.png")
        if ok:
            summary.chart(ok, png, f"{title}: median ms",
                          labels=[label(r.choices, keys) for r in ok])
            where = ""
            if sweep.run_id and stores.client is not None:
                stores.client.log_artifact(sweep.run_id, str(png), "compare")
                where = f" (also logged to run {sweep.run_id} under compare/)"
            console.print(f"chart: {png}{where}", highlight=False)
        if args.roofline:
            draw_roofline(sweep, runs, keys, png, stores.client)
    doubtful = doubtful_cells(runs, bases, cells)
    if doubtful:
        print_warning(f"{doubtful} of {len(cells)} cells (marked !) compare runs timed on a "
                      "machine flagged busy, oversubscribed or with high spread: their "
                      "differences may come from the machine — rerun with bench.quiet=wait")
    if args.fail_on_regression is not None:
        found = regressions(runs, cells, args.fail_on_regression)
        for line in found:
            print_error(line)
        if found:
            return EXIT_REGRESSION
    return 0


def roofline_path(sweep: Sweep, chart: Path) -> Path:
    """In the sweep's folder when it is on this machine, else beside the fwd/bwd chart."""
    if sweep.folder is not None and sweep.folder.is_dir():
        return sweep.folder / summary.SUMMARY_DIR / roofline_chart.CHART
    return chart.with_name(f"{chart.stem}-{roofline_chart.CHART}")


def draw_roofline(sweep: Sweep, runs: list[Run], keys: list[str], chart: Path, client) -> None:
    pts, missing = roofline_chart.points(runs, keys)
    roof = roofline_chart.draw(pts, roofline_path(sweep, chart), f"{sweep.name}: roofline")
    logged = ""
    if sweep.run_id and client is not None:
        client.log_artifact(sweep.run_id, str(roof), "compare")
        logged = ", also logged under compare/"
    console.print(f"roofline: {roof} ({len(pts)} jobs"
                  + (f"; {missing} without roofline metrics left out" if missing else "")
                  + f"{logged})", highlight=False)


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse_args(argv)
    except RnnexpError as err:
        print_error(str(err))
        return EXIT_USER_ERROR
    try:
        return compare(args)
    except RnnexpError as err:
        print_error(str(err))
        return EXIT_USER_ERROR
    except Exception as err:
        print_error(f"MLflow store {redact(str(args.tracking_uri))}: "
                    f"{redact(store.short_reason(err))}")
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
