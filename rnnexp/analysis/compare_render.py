"""How `rnnexp compare` shows a comparison (rnnexp.analysis.compare): the table of medians and
speedups with their intervals, how the cells were judged, the chart (logged to the sweep's
parent run when it is in MLflow), the roofline chart, and the HTML report's data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.analysis.compare import (
    Cells,
    Comparison,
    doubtful_cells,
    flagged,
    linked,
    regressions,
)
from rnnexp.results.report import console

if TYPE_CHECKING:
    from rnnexp.analysis.report.model import Report
    from rnnexp.analysis.sweeps import Run, Sweep


ORDER = ("model", "backend", "shape", "deepbench", "device", "bench", "sinks")


# Fields that vary with a group of another name: a DeepBench problem sets the shape.
LINKED = {"deepbench": ("shape",)}


def varying(runs: list[Run]) -> list[str]:
    """The config fields that tell the runs apart (groups first), at least one. When and
    from which commit each was measured are not among them (sweeps.told_apart adds them
    where nothing else does)."""
    from rnnexp.analysis.sweeps import COMMIT, WHEN

    keys = sorted({k for r in runs for k in r.config} - {WHEN, COMMIT},
                  key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    vary = [k for k in keys if len({r.config.get(k) for r in runs}) > 1]
    # A group's own sub-fields vary with it: the group names the row already.
    groups = [k for k in vary if k in ORDER]
    owners = [(g, o) for g in groups for o in (g, *LINKED.get(g, ()))]
    vary = [k for k in vary if not any(linked(o, k) and o != k and k != g
                                       for g, o in owners)]
    return vary or [k for k in keys if k in ORDER][:1]


def caption(compared: bool) -> str:
    if not compared:
        from rnnexp.results.result import QUARTILES_NOTE

        return f"ms: {QUARTILES_NOTE}"
    return ("baseline and ms: the two levels a speedup compares, in ms — paired by round "
            "(rounds' level removed by median polish, then the mean of the processes' "
            "levels) for jobs measured interleaved, the geometric mean of the process "
            "medians otherwise — and median [q1, q3] of the samples where nothing "
            "is compared; speedup = baseline ÷ candidate of those levels (>1: faster) with its "
            "95% interval over the processes (t; and the drift between runs for runs "
            "measured apart, + the spread between nodes for runs of different cluster "
            "nodes); Holm-corrected; ~ = the interval lies within ±min-effect; "
            "cannot tell ±X% = the interval is that wide here; cannot tell = nothing can be "
            "said (a busy machine, one process a side: see the line below); processes: the "
            "baseline's/the candidate's, shared = the same worker processes, paired by "
            "process; ! = a run of this cell was flagged (oversubscribed, high spread, "
            "drifting)")


def processes_cell(cells: Cells, i: int) -> str:
    from rnnexp.analysis.sweeps import PHASES

    d = next((cells[(i, p)] for p, _ in PHASES if (i, p) in cells), None)
    return "—" if d is None else d.processes_text


def table(runs: list[Run], bases: Optional[list[Optional[Run]]], cells: Cells, title: str,
          keys: Sequence[str]) -> Table:
    from rnnexp.analysis.sweeps import PHASES

    t = Table(title=title, caption=caption(bases is not None))
    for k in keys:
        t.add_column(k)
    for p, _ in PHASES:
        if bases is not None:
            t.add_column(f"{p} baseline", justify="right")
        t.add_column(f"{p} ms", justify="right")
        if bases is not None:
            t.add_column(f"{p} speedup", justify="right")
    if bases is not None:
        t.add_column("processes", justify="right")
    t.add_column("status")
    for i, r in enumerate(runs):
        base = bases[i] if bases is not None else None
        row = [r.config.get(k, "?") for k in keys]
        for p, _ in PHASES:
            d = cells.get((i, p))
            if bases is not None:
                row.append("(this run)" if base is r else base.shown_ms(
                    p, d and d.baseline_ms, d and d.unit) if base else "no match")
            row.append(r.shown_ms(p, d and d.candidate_ms, d and d.unit))
            if bases is not None:
                mark = " !" if d and (flagged(r) or flagged(base)) else ""
                row.append("base" if base is r else d.cell() + mark if d else "—")
        if bases is not None:
            row.append(processes_cell(cells, i))
        t.add_row(*row, status_cell(r))
    return t


def status_cell(r: Run) -> str:
    from rnnexp.results.result import OK

    if r.row.status != OK:
        return f"[yellow]{escape(r.row.status)}[/]: {escape(r.row.reason)}"
    return "[green]ok[/]" + (f" [yellow]({escape(', '.join(r.flags))})[/]" if r.flags else "")


def how_judged(cells: Cells) -> str:
    """One line: how many cells were judged which way, and why some could not be."""
    from rnnexp.analysis import significance

    methods = Counter(d.method for d in cells.values())
    parts = [f"{n} {m}" for m, n in sorted(methods.items())]
    reasons = Counter(d.why_not for d in cells.values() if d.why_not)
    line = "cells judged: " + ", ".join(parts)
    disagree = sum(d.note.startswith("counts disagree") for d in cells.values())
    if disagree:
        line += (f"; instruction counts disagree with time in {disagree} cell"
                 f"{'s' * (disagree > 1)}, judged by time there")
    if reasons:
        line += "; nothing said for " + "; ".join(f"{n} ({why})" for why, n in
                                                   reasons.most_common())
    if methods.get(significance.RUNS):
        line += (" — runs measured at different times meet the machine's drift between "
                 "runs: measure A and B in one interleaved sweep to resolve smaller "
                 "differences (docs: comparing)")
    return line


def draw_chart(c: Comparison, keys: list[str], png: Path, client) -> None:
    """Both sides of every cell and the speedup, or the medians alone without a baseline;
    logged to the sweep's parent run when it is in MLflow."""
    from rnnexp.analysis import compare_chart
    from rnnexp.results import summary
    from rnnexp.results.result import OK, label

    ok = [r for r in c.runs if r.row.status == OK]
    if not ok:
        return
    if c.bases is not None:
        compare_chart.draw(c.runs, c.bases, c.cells, keys, png, c.title)
    else:
        summary.chart([r.row for r in ok], png, f"{c.title}: median ms",
                      labels=[label(r.config, keys) for r in ok])
    where = ""
    if c.sweep.run_id and client is not None:
        client.log_artifact(c.sweep.run_id, str(png), "compare")
        where = f" (also logged to run {c.sweep.run_id} under compare/)"
    console.print(f"chart: {png}{where}", highlight=False)


def report_of(c: Comparison, keys: list[str], baseline: Optional[str], against: Optional[str],
              min_effect_pct: float, gate_pct: Optional[float],
              sources: Sequence[str] = ()) -> Report:
    """The comparison as an HTML report's data (rnnexp.analysis.report), judged as above:
    `baseline` (KEY=VALUE) or `against` (a baseline sweep), the smallest effect shown and
    the regression gate, in %."""
    from rnnexp.analysis.report import build

    gate = None if gate_pct is None else gate_pct / 100
    return build.report(
        c.title, sources or [c.sweep.name], c.runs, c.bases, c.cells, keys,
        baseline=baseline or f"sweep {against}", min_effect=min_effect_pct / 100,
        gate=gate, how_judged=how_judged(c.cells) if c.cells else "",
        regressions=regressions(c.runs, c.cells, gate_pct) if gate_pct is not None else [],
        flagged=doubtful_cells(c.runs, c.bases, c.cells),
        sides=(f"baseline sweep {against}", "this sweep") if against else
        (f"baseline {baseline}", "the rest"))


def chart_name(sweep: Sweep, baseline: Optional[str], against: Optional[str]) -> str:
    """What the chart shows, in a short file name (rnnexp.analysis.compare_chart)."""
    from rnnexp.analysis import compare_chart

    return compare_chart.file_name(sweep.name, baseline, against)


def roofline_path(sweep: Sweep, chart: Path) -> Path:
    """In the sweep's folder when it is on this machine, else beside the fwd/bwd chart."""
    from rnnexp.analysis import roofline_chart
    from rnnexp.results import summary

    if sweep.folder is not None and sweep.folder.is_dir():
        return sweep.folder / summary.SUMMARY_DIR / roofline_chart.CHART
    return chart.with_name(f"{chart.stem}-{roofline_chart.CHART}")


def draw_roofline(sweep: Sweep, runs: list[Run], keys: list[str], chart: Path, client) -> None:
    from rnnexp.analysis import roofline_chart

    pts, missing = roofline_chart.points(runs, keys)
    roof = roofline_chart.draw(pts, roofline_path(sweep, chart), f"{sweep.name}: roofline")
    logged = ""
    if sweep.run_id and client is not None:
        client.log_artifact(sweep.run_id, str(roof), "compare")
        logged = ", also logged under compare/"
    console.print(f"roofline: {roof} ({len(pts)} jobs"
                  + (f"; {missing} without roofline metrics left out" if missing else "")
                  + f"{logged})", highlight=False)
