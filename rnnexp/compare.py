"""`python -m rnnexp.compare`: a sweep's medians, spread and speedups, from the MLflow store.

Reads only the store (MLflow's search API), so it works for runs recorded on other machines
against the same server. The sweep is the latest one, or one named by parent run id or name.
`--baseline KEY=VALUE` (e.g. backend=cudnn, model=lstm) compares every run with the run that
differs from it only in KEY; if no such run exists and exactly one run matches, that run is the
baseline for all. The fwd/bwd bar chart is saved and logged to the sweep's parent run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.errors import RnnexpError
from rnnexp.report import console, print_error
from rnnexp.schema import DEFAULT_TRACKING_URI
from rnnexp.tracking import naming, store, summary

PHASES = (("fwd", "forward"), ("bwd", "backward"))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rnnexp.compare",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("sweep", nargs="?", default=None,
                        help="parent run id or run name of the sweep (default: the latest)")
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="e.g. backend=cudnn or model=lstm: speedups against it")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                        help=f"MLflow store (default: {DEFAULT_TRACKING_URI})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=None,
                        help="chart PNG path (default: outputs/compare/<sweep run id>.png)")
    return parser.parse_args(argv)


def find_sweep(client, exp_id: str, name: Optional[str]):
    sweeps = client.search_runs([exp_id], filter_string=f"tags.`{naming.TAG_KIND}` = 'sweep'",
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


def children(client, exp_id: str, parent_id: str) -> list[dict]:
    runs = client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = "
                                                      f"'{parent_id}'", max_results=10000)
    rows = []
    for run in runs:
        groups = run.data.tags.get(naming.TAG_GROUPS, "")
        choices = {g: run.data.params.get(g, "?") for g in groups.split(",") if g}
        m = run.data.metrics
        rows.append({"run_id": run.info.run_id, "name": run.info.run_name, "choices": choices,
                     "status": run.data.tags.get("status", run.info.status.lower()),
                     "reason": run.data.tags.get("reason", ""),
                     **{f"{p}_{s}": m.get(f"{p}_{s}") for p, _ in PHASES
                        for s in ("median_ms", "iqr_ms")}})
    return sorted(rows, key=lambda r: r["name"] or "")


def parse_baseline(text: str, rows: list[dict]) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise RnnexpError(f"--baseline '{text}': expected KEY=VALUE, e.g. model=lstm")
    keys = sorted({k for r in rows for k in r["choices"]})
    if key not in keys:
        raise RnnexpError(f"--baseline {key}: not a config group of this sweep — use one of "
                          f"{', '.join(keys)}")
    values = sorted({r["choices"].get(key) for r in rows})
    if not any(r["choices"].get(key) == value and r["fwd_median_ms"] is not None
               for r in rows):
        raise RnnexpError(f"--baseline {text}: matches no timed run of this sweep — "
                          f"{key} was {', '.join(values)}")
    return key, value


def add_speedups(rows: list[dict], key: str, value: str) -> None:
    """speedup = baseline median / run median (>1: faster than the baseline)."""
    def rest(r):
        return tuple(sorted((k, v) for k, v in r["choices"].items() if k != key))

    timed = [r for r in rows if r["fwd_median_ms"] is not None]
    base_of = {rest(r): r for r in timed if r["choices"].get(key) == value}
    single = [r for r in timed if r["choices"].get(key) == value]
    for r in rows:
        base = base_of.get(rest(r)) or (single[0] if len(single) == 1 else None)
        for p, _ in PHASES:
            b, x = (base or {}).get(f"{p}_median_ms"), r[f"{p}_median_ms"]
            r[f"{p}_speedup"] = b / x if b and x else None


ORDER = ("model", "backend", "shape", "device", "bench", "tracking")


def varying(rows: list[dict]) -> list[str]:
    keys = sorted({k for r in rows for k in r["choices"]},
                  key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    return [k for k in keys if len({r["choices"].get(k) for r in rows}) > 1] or keys[:1]


def config_label(r: dict, keys: Sequence[str]) -> str:
    return "·".join(r["choices"].get(k, "?") for k in keys)


def table(rows: list[dict], title: str, keys: Sequence[str], baseline: Optional[str]) -> Table:
    t = Table(title=title, caption="median ± IQR/2 in ms" + (
        f"; speedup = time of {baseline} ÷ time (>1 is faster)" if baseline else ""))
    for k in keys:
        t.add_column(k)
    for p, _ in PHASES:
        t.add_column(f"{p} ms", justify="right")
        if baseline:
            t.add_column(f"{p} speedup", justify="right")
    t.add_column("status")

    def ms(r, p):
        med, iqr = r[f"{p}_median_ms"], r[f"{p}_iqr_ms"]
        return "—" if med is None else f"{med:.3f} ± {(iqr or 0) / 2:.3f}"

    for r in rows:
        cells = [r["choices"].get(k, "?") for k in keys]
        for p, _ in PHASES:
            cells.append(ms(r, p))
            if baseline:
                s = r.get(f"{p}_speedup")
                cells.append("—" if s is None else f"{s:.2f}×")
        status = "[green]ok[/]" if r["status"] == "ok" else \
            f"[yellow]{escape(r['status'])}[/]: {escape(r['reason'])}"
        t.add_row(*cells, status)
    return t


def compare(args: argparse.Namespace) -> Path:
    with store.http_limits():
        client, exp_id = store.connect(args.tracking_uri, args.experiment, create=False)
        sweep = find_sweep(client, exp_id, args.sweep)
        rows = children(client, exp_id, sweep.info.run_id)
        if not rows:
            raise RnnexpError(f"sweep '{sweep.info.run_name}' has no job runs (yet)")
        baseline = None
        if args.baseline:
            key, value = parse_baseline(args.baseline, rows)
            add_speedups(rows, key, value)
            baseline = f"{key}={value}"
        keys = varying(rows)
        console.print(table(rows, f"{sweep.info.run_name}  ({sweep.info.run_id})", keys,
                            baseline))
        timed = [r for r in rows if r["fwd_median_ms"] is not None]
        png = args.output or Path("outputs/compare") / f"{sweep.info.run_id}.png"
        title = f"{sweep.info.run_name}: median ms" + (f" (baseline {baseline})"
                                                       if baseline else "")
        summary.bar_chart([config_label(r, keys) for r in timed],
                          [r["fwd_median_ms"] for r in timed],
                          [r["bwd_median_ms"] for r in timed], png, title,
                          [r["fwd_iqr_ms"] for r in timed], [r["bwd_iqr_ms"] for r in timed])
        client.log_artifact(sweep.info.run_id, str(png), "compare")
    console.print(f"chart: {png} (also logged to run {sweep.info.run_id} under compare/)",
                  highlight=False)
    return png


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
