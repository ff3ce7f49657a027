"""`rnnexp history [KEY=VALUE ...]`: every selected measurement's series over commits, torch
versions and dates from the MLflow store, the changes in its level, and a chart per series.

KEY=VALUE selects runs as `compare --baseline` does (any config group or field: `model=lstm`,
`backend=aten`, `shape.seq_len=20`); several must all hold. A series is one measurement on
one machine (device name and thread count): runs of another machine or device are never one
series. The interpreter a run was measured under (`bench.python`) is treated like its torch
version: a point of the same series. Each run is a point with its 95% interval from its
processes; the changes are found and sized on those replicates (rnnexp.analysis.history).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.analysis import history, history_chart, store_runs
from rnnexp.analysis.compare_select import from_the_store
from rnnexp.analysis.sweeps import Run
from rnnexp.config.credentials import redact
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.identity import MeasurementKey
from rnnexp.results.report import console
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
    parser.add_argument("--alpha", type=float, default=history.ALPHA,
                        help=f"significance of a change (default {history.ALPHA:g}, as "
                             "Otava's)")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=Path("outputs/history"),
                        help="folder for the charts (default: outputs/history)")
    args = parser.parse_args(argv)
    if not 0 < args.alpha < 0.5:
        raise RnnexpError(f"--alpha {args.alpha:g}: a significance level in (0, 0.5) — "
                          "e.g. 0.001")
    args.choices = store_runs.parse(args.choices)
    return args


def series_key(run: Run) -> MeasurementKey:
    """The measurement, whatever interpreter took it (bench.python is an environment, as
    the torch version is)."""
    return dataclasses.replace(run.key, bench=tuple(
        (k, v) for k, v in run.key.bench if k != "python"))


def names(runs: Sequence[Run]) -> dict[MeasurementKey, str]:
    """Each measurement by its job label, with the key's fields that tell apart
    measurements whose labels read alike."""
    first: dict[MeasurementKey, Run] = {}
    for r in runs:
        first.setdefault(r.key, r)
    out = {k: r.row.label for k, r in first.items()}
    fields = {k: k.fields() for k in first}
    for label in {v for v in out.values() if list(out.values()).count(v) > 1}:
        same = [k for k, v in out.items() if v == label]
        vary = sorted({f for k in same for f in fields[k]
                       if len({fields[o].get(f) for o in same}) > 1})
        for k in same:
            out[k] = f"{label} " + " ".join(f"{f}={fields[k].get(f, '?')}" for f in vary)
    return out


def series_table(all_series: Sequence[history.Series], phase: str) -> Table:
    t = Table(title=f"series ({PHASES[phase]}): one measurement on one machine",
              caption="level = the median of the run's process medians")
    for col in ("measurement", "machine", "runs", "from", "to", "commits", "torch",
                "last level ms", "changes"):
        t.add_column(col, justify="right" if col in ("runs", "commits", "changes",
                                                     "last level ms") else "left")
    for s in all_series:
        pts = s.points
        t.add_row(escape(s.name), escape(str(s.machine)), str(len(pts)), pts[0].day,
                  pts[-1].day, str(len({p.commit for p in pts})),
                  ", ".join(sorted({p.torch for p in pts})), f"{pts[-1].level:.3f}",
                  str(len(s.changes)))
    return t


def changes_table(all_series: Sequence[history.Series]) -> Table:
    t = Table(title="changes: from → to, size with its 95% interval, first run after it",
              caption="size = level after ÷ before − 1, tested on the runs' replicates "
                      "(random effects between runs); same code = the commit and torch "
                      "did not change: the machine did")
    for col in ("measurement", "from", "to", "before ms", "after ms", "size (95%)", "p",
                "first run after it"):
        t.add_column(col)
    for s in all_series:
        for c in s.changes:
            to = "[yellow]same code[/]" if c.same_code else escape(c.after.version)
            first = f"{c.after.day} {escape(c.after.run_id[:12] or c.after.name)}"
            t.add_row(escape(s.name), escape(c.before.version), to,
                      f"{c.shift.before_ms:.3f}", f"{c.shift.after_ms:.3f}", c.size_text(),
                      f"{c.shift.pvalue:.1e}", first)
    return t


def show(args) -> int:
    with store.http_limits():
        client, exp_id = store.connect(args.tracking_uri, args.experiment, create=False)
        runs = store_runs.select(client, exp_id, args.choices)
    keyed = [dataclasses.replace(r, key=series_key(r)) for r in runs]
    phase = args.phase
    found = [history.detect(s, args.alpha) for s in history.build(keyed, phase, names(keyed))]
    if not found:
        raise RnnexpError(f"--phase {phase}: no selected run timed it — try --phase auto")
    console.print(series_table(found, phase))
    if any(s.changes for s in found):
        console.print(changes_table(found))
    else:
        console.print(f"no change in any series at p ≤ {args.alpha:g}", highlight=False)
    for s in found:
        png = history_chart.draw(s, args.output / history_chart.file_name(s), PHASES[phase])
        console.print(f"chart: {png}", highlight=False, markup=False)
    return 0


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
