"""A sweep's summary: one row per job, written as JSON/CSV/markdown plus a fwd/bwd chart."""

from __future__ import annotations

import csv
import json
import re
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.results import files
from rnnexp.results.result import (
    LABEL_KEYS,
    OK,
    QUARTILES_NOTE,
    Result,
    Row,
    format_quartiles,
    status_text,
)

SUMMARY_DIR = "summary"
CHART = "fwd_bwd.png"
# The sweep's HTML report, written there by the report sink (rnnexp.analysis.report.sink).
REPORT = "report.html"
# The markdown table is for people: each time as the console shows it, the status with its
# flags; every figure on its own is in the JSON and CSV.
MARKDOWN = ("job", "label", "status", "fwd ms", "bwd ms", "tokens_per_s", "reason")


def rows_of(jobs: Sequence[tuple[Path, Result]], sweep_dir: Path) -> list[Row]:
    return [Row.of(str(Path(folder).relative_to(sweep_dir)), r) for folder, r in jobs]


def _cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


SUMMARY_FILES = ("summary.json", "summary.csv", "summary.md")


def write_files(rows: Sequence[Row], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in SUMMARY_FILES]
    table = [r.columns() for r in rows]
    files.write_text(paths[0], _json(table))
    with files.replaced(paths[1]) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=Row.COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    lines = ["| " + " | ".join(MARKDOWN) + " |", "|" + "---|" * len(MARKDOWN)]
    lines += ["| " + " | ".join(_markdown_cell(row, r, c) for c in MARKDOWN) + " |"
              for row, r in zip(rows, table, strict=True)]
    files.write_text(paths[2], "\n".join([*lines, "", f"ms: {QUARTILES_NOTE}"]) + "\n")
    return paths


def _markdown_cell(row: Row, columns: dict, name: str) -> str:
    if name == "status":
        return status_text(row.status, row.flags)
    if name in ("fwd ms", "bwd ms"):
        p = name[:3]
        return format_quartiles(*(getattr(row, f"{p}_{s}_ms") for s in ("median", "q1", "q3")))
    if name == "tokens_per_s" and columns[name] is not None:
        return f"{columns[name]:,.0f}"
    return _cell(columns[name]).replace("|", "\\|")


def _json(table: list[dict]) -> str:
    return json.dumps(table, indent=2)


def write(sweep_dir: Path, jobs: Sequence[tuple[Path, Result]],
          into: Optional[Path] = None) -> list[Path]:
    """summary.{json,csv,md} and, when any job was timed, the chart, in <sweep>/summary/ (or
    `into`: a sweep folder only read) — unless the folder holds them for these rows already:
    the json sink and the MLflow sink both need the summary at a sweep's end, and drawing
    the chart twice cost a second."""
    rows = rows_of(jobs, sweep_dir)
    folder = Path(into) if into is not None else Path(sweep_dir) / SUMMARY_DIR
    paths = [folder / name for name in SUMMARY_FILES]
    if any(r.status == OK for r in rows):
        paths.append(folder / CHART)
    if not written(folder, paths, rows):
        write_files(rows, folder)
        if len(paths) > len(SUMMARY_FILES):
            chart(rows, folder / CHART, f"sweep {'/'.join(Path(sweep_dir).parts[-2:])}")
    return paths


def written(folder: Path, paths: Sequence[Path], rows: Sequence[Row]) -> bool:
    """The folder's summary is that of `rows`, every file of it present."""
    try:
        same = (folder / SUMMARY_FILES[0]).read_text() == _json([r.columns() for r in rows])
    except OSError:
        return False
    return same and all(p.exists() for p in paths)


# Charts are read at a glance: points on a linear axis that starts at zero, the spread the
# table shows (the quartiles of the timed iterations), titles that say what is asked and no
# legend over the data (what the marks mean is written under the plot).
SPREAD = "dot: median · bar: 25th–75th percentile of the timed iterations"
FORWARD, BACKWARD = "#1f77b4", "#ff7f0e"
# A run id in a title (an MLflow sweep is named "<name>  (<run id>)") says nothing to a reader.
_RUN_ID = re.compile(r"\s*\(?\b[0-9a-f]{32}\b\)?")


def plain_title(title: str) -> str:
    """`title` without run ids, its spaces single."""
    return " ".join(_RUN_ID.sub("", title).split())


def by_what(choices: Sequence[dict]) -> str:
    """What varies among the rows' config groups, in words: `by model and backend`."""
    varying = [k for k in LABEL_KEYS if len({str(c.get(k)) for c in choices}) > 1]
    if not varying:
        return "per job"
    return "by " + (" and ".join(varying) if len(varying) < 3 else
                    ", ".join(varying[:-1]) + " and " + varying[-1])


def split_common(labels: Sequence[str], sep: str = "·") -> tuple[list[str], str]:
    """Labels without the parts every label shares, and those parts: a sweep's rows are told
    apart by what varies, and 110 rows of lstm·auto·default·cpu tell nothing."""
    parts = [lb.split(sep) for lb in labels]
    if len(parts) < 2 or len({len(p) for p in parts}) != 1:
        return list(labels), ""
    same = [all(p[i] == parts[0][i] for p in parts) for i in range(len(parts[0]))]
    if all(same):
        return list(labels), ""
    short = [sep.join(x for x, s in zip(p, same, strict=True) if not s) for p in parts]
    return short, sep.join(x for x, s in zip(parts[0], same, strict=True) if s)


def warm() -> None:
    """Import what `figure` draws with (matplotlib: ~1 s), ahead of the sweep's end."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot


def figure(labels: Sequence[str], phases: Sequence[tuple[str, Sequence[Optional[float]],
                                                         Sequence[tuple]]],
           question: str, context: str = ""):
    """One panel per phase (name, medians, (q1, q3) ranges), the rows told apart by what
    varies in their labels: each row's median as a dot on its quartile range, on a linear
    axis from zero, its value written beside it. Missing values are gaps. Returns the
    matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    names, common = split_common(labels)
    shown = [(name, meds, ranges) for name, meds, ranges in phases
             if any(v is not None for v in meds)]
    y = np.arange(len(names))
    fig, axes = plt.subplots(1, max(1, len(shown)), sharey=True, squeeze=False,
                             figsize=(3.2 + 3.6 * max(1, len(shown)),
                                      max(2.6, 0.3 * len(names) + 1.9)))
    for ax, (name, meds, ranges), color in zip(axes[0], shown, (FORWARD, BACKWARD, "#2ca02c"),
                                               strict=False):
        ends = []
        for yi, med, (q1, q3) in zip(y, meds, [tuple(r) for r in ranges] or
                                     [(None, None)] * len(meds), strict=True):
            if med is None:
                continue
            if q1 is not None and q3 is not None:
                ax.hlines(yi, q1, q3, color=color, alpha=0.35, linewidth=6)
            ax.plot([med], [yi], "o", color=color, markersize=5)
            end = max(v for v in (med, q3) if v is not None)
            ends.append(end)
            ax.annotate(f"{med:.3g}", (end, yi), xytext=(5, 0), textcoords="offset points",
                        va="center", fontsize=7)
        ax.set_xlim(0, max(ends) * 1.22)  # room for the values written beside the ends
        panel(ax, name, "ms per iteration")
    context = plain_title(context)
    lines = [question, *([f"all {common}"] if common else []), *([context] if context else [])]
    return finish(fig, names, textwrap.fill(lines[0], 90) + "".join(f"\n{t}" for t in lines[1:]),
                  SPREAD)


def panel(ax, title: str, xlabel: str) -> None:
    """A panel of a row chart: its title, its axis named, a light grid along it."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(labelsize=7)


def finish(fig, names: Sequence[str], title: str, meaning: str):
    """A row chart's rows named, the first on top as in the table; its title; what its marks
    mean written under the plot, never in a legend over the data."""
    ax = fig.axes[0]
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    fig.suptitle(title, fontsize=9)
    fig.text(0.01, 0.01, meaning, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with files.replaced(path) as tmp:
            fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path


def chart(rows: Sequence[Row], path: Path, context: str = "",
          labels: Optional[Sequence[str]] = None) -> Path:
    """The chart of the timed (ok) rows — how long each takes per iteration, forward and
    backward; `labels` replaces their own labels, `context` (the sweep) goes under the
    question."""
    ok = [r for r in rows if r.status == OK]
    question = f"Time per iteration {by_what([r.choices for r in ok])}: forward and backward"
    fig = figure(list(labels) if labels is not None else [r.label for r in ok], [
        ("forward", [r.fwd_median_ms for r in ok], [(r.fwd_q1_ms, r.fwd_q3_ms) for r in ok]),
        ("backward", [r.bwd_median_ms for r in ok], [(r.bwd_q1_ms, r.bwd_q3_ms) for r in ok]),
    ], question, context)
    return save(fig, path)
