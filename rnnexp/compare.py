"""`python -m rnnexp.compare`: a sweep's medians, spread and speedups, from the MLflow store.

Reads only the store (MLflow's search API), so it works for runs recorded on other machines
against the same server. The sweep is the latest one, or one named by parent run id or name.
`--baseline KEY=VALUE` (e.g. backend=cudnn, model=lstm) compares every run with the run that
differs from it only in KEY; if no such run exists and exactly one run matches, that run is the
baseline for all. The fwd/bwd bar chart is saved and logged to the sweep's parent run, and with
`--roofline` the sweep's roofline chart (rnnexp.roofline_chart) too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp import roofline_chart, summary
from rnnexp.errors import RnnexpError
from rnnexp.report import console, print_error
from rnnexp.results import Row, format_ms, label
from rnnexp.schema import default_store_uri
from rnnexp.sinks.mlflow import runs, store

PHASES = (("fwd", "forward"), ("bwd", "backward"))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rnnexp.compare",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("sweep", nargs="?", default=None,
                        help="parent run id or run name of the sweep (default: the latest)")
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="e.g. backend=cudnn or model=lstm: speedups against it")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=None,
                        help="chart PNG path (default: outputs/compare/<sweep run id>.png)")
    parser.add_argument("--roofline", action="store_true",
                        help="also draw the roofline chart: <sweep folder>/summary/roofline.png "
                             "when the folder is on this machine, else beside the chart")
    return parser.parse_args(argv)


def find_sweep(client, exp_id: str, name: Optional[str]):
    sweeps = client.search_runs([exp_id], filter_string=f"tags.`{runs.TAG_KIND}` = 'sweep'",
                                order_by=["attributes.start_time DESC"], max_results=1000)
    if not sweeps:
        raise RnnexpError("no sweep recorded in this experiment — run one with "
                          "python -m rnnexp -m model=lstm,jit ...")
    if name is None:
        return sweeps[0]
    for run in sweeps:
        if name in (run.info.run_id, run.info.run_name):
            return run
    raise RnnexpError(f"sweep '{name}': no parent run with that id or name — latest is "
                      f"'{sweeps[0].info.run_name}' ({sweeps[0].info.run_id})")


def children(client, exp_id: str, parent_id: str) -> list[Row]:
    found = client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = "
                                                       f"'{parent_id}'", max_results=10000)
    rows = []
    for run in found:
        groups = run.data.tags.get(runs.TAG_GROUPS, "")
        choices = {g: run.data.params.get(g, "?") for g in groups.split(",") if g}
        m = run.data.metrics
        rows.append(Row(job=run.info.run_name or "", label=label(choices), choices=choices,
                        status=run.data.tags.get("status", run.info.status.lower()),
                        reason=run.data.tags.get("reason", ""), run_id=run.info.run_id,
                        **{f"{p}_{s}": m.get(f"{p}_{s}") for p, _ in PHASES
                           for s in ("median_ms", "iqr_ms")}))
    return sorted(rows, key=lambda r: r.job)


def median(row: Row, phase: str) -> Optional[float]:
    return getattr(row, f"{phase}_median_ms")


def parse_baseline(text: str, rows: list[Row]) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise RnnexpError(f"--baseline '{text}': expected KEY=VALUE, e.g. model=lstm")
    keys = sorted({k for r in rows for k in r.choices})
    if key not in keys:
        raise RnnexpError(f"--baseline {key}: not a config group of this sweep — use one of "
                          f"{', '.join(keys)}")
    values = sorted({r.choices.get(key, "?") for r in rows})
    if not any(r.choices.get(key) == value and r.fwd_median_ms is not None for r in rows):
        raise RnnexpError(f"--baseline {text}: matches no timed run of this sweep — "
                          f"{key} was {', '.join(values)}")
    return key, value


Speedups = dict[str, dict[str, Optional[float]]]  # run id → phase → speedup


def speedups(rows: list[Row], key: str, value: str) -> Speedups:
    """speedup = baseline median / run median (>1: faster than the baseline)."""
    def rest(r: Row):
        return tuple(sorted((k, v) for k, v in r.choices.items() if k != key))

    timed = [r for r in rows if r.fwd_median_ms is not None]
    single = [r for r in timed if r.choices.get(key) == value]
    base_of = {rest(r): r for r in single}
    out: Speedups = {}
    for r in rows:
        base = base_of.get(rest(r)) or (single[0] if len(single) == 1 else None)
        out[r.run_id] = {}
        for p, _ in PHASES:
            b, x = (median(base, p) if base else None), median(r, p)
            out[r.run_id][p] = b / x if b and x else None
    return out


ORDER = ("model", "backend", "shape", "device", "bench", "sinks")


def varying(rows: list[Row]) -> list[str]:
    keys = sorted({k for r in rows for k in r.choices},
                  key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    return [k for k in keys if len({r.choices.get(k) for r in rows}) > 1] or keys[:1]


def table(rows: list[Row], title: str, keys: Sequence[str], baseline: Optional[str],
          ratios: Optional[Speedups] = None) -> Table:
    t = Table(title=title, caption="median ± IQR/2 in ms" + (
        f"; speedup = time of {baseline} ÷ time (>1 is faster)" if baseline else ""))
    for k in keys:
        t.add_column(k)
    for p, _ in PHASES:
        t.add_column(f"{p} ms", justify="right")
        if baseline:
            t.add_column(f"{p} speedup", justify="right")
    t.add_column("status")
    for r in rows:
        cells = [r.choices.get(k, "?") for k in keys]
        for p, _ in PHASES:
            cells.append(format_ms(median(r, p), getattr(r, f"{p}_iqr_ms")))
            if baseline:
                s = (ratios or {}).get(r.run_id, {}).get(p)
                cells.append("—" if s is None else f"{s:.2f}×")
        status = "[green]ok[/]" if r.status == "ok" else \
            f"[yellow]{escape(r.status)}[/]: {escape(r.reason)}"
        t.add_row(*cells, status)
    return t


def compare(args: argparse.Namespace) -> Path:
    with store.http_limits():
        client, exp_id = store.connect(args.tracking_uri, args.experiment, create=False)
        sweep = find_sweep(client, exp_id, args.sweep)
        rows = children(client, exp_id, sweep.info.run_id)
        if not rows:
            raise RnnexpError(f"sweep '{sweep.info.run_name}' has no job runs (yet)")
        baseline, ratios = None, None
        if args.baseline:
            key, value = parse_baseline(args.baseline, rows)
            ratios = speedups(rows, key, value)
            baseline = f"{key}={value}"
        keys = varying(rows)
        console.print(table(rows, f"{sweep.info.run_name}  ({sweep.info.run_id})", keys,
                            baseline, ratios))
        png = args.output or Path("outputs/compare") / f"{sweep.info.run_id}.png"
        title = f"{sweep.info.run_name}: median ms" + (f" (baseline {baseline})"
                                                       if baseline else "")
        ok = [r for r in rows if r.status == "ok"]
        summary.chart(ok, png, title, labels=[label(r.choices, keys) for r in ok])
        client.log_artifact(sweep.info.run_id, str(png), "compare")
        if args.roofline:
            roof = roofline_path(sweep, png)
            pts, missing = roofline_chart.points(client, exp_id, sweep.info.run_id, keys)
            roofline_chart.draw(pts, roof, f"{sweep.info.run_name}: roofline")
            client.log_artifact(sweep.info.run_id, str(roof), "compare")
    console.print(f"chart: {png} (also logged to run {sweep.info.run_id} under compare/)",
                  highlight=False)
    if args.roofline:
        console.print(f"roofline: {roof} ({len(pts)} jobs"
                      + (f"; {missing} without roofline metrics left out" if missing else "")
                      + ", also logged under compare/)", highlight=False)
    return png


def roofline_path(sweep, chart: Path) -> Path:
    """In the sweep's folder when it is on this machine, else beside the fwd/bwd chart."""
    folder = Path(sweep.data.tags.get("sweep_dir") or "")
    if sweep.data.tags.get("sweep_dir") and folder.is_dir():
        return folder / summary.SUMMARY_DIR / roofline_chart.CHART
    return chart.with_name(f"{chart.stem}-{roofline_chart.CHART}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        compare(args)
    except RnnexpError as err:
        print_error(str(err))
        return 2
    except Exception as err:
        print_error(f"MLflow store {args.tracking_uri}: {store.short_reason(err)}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
