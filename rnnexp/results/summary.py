"""A sweep's summary: one row per job, written as JSON/CSV/markdown plus a fwd/bwd chart."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.results import files
from rnnexp.results.result import OK, Result, Row, status_text

SUMMARY_DIR = "summary"
CHART = "fwd_bwd.png"
# The sweep's HTML report, written there by the report sink (rnnexp.analysis.report.sink).
REPORT = "report.html"
MARKDOWN_HIDDEN = ("flags", "fwd_q1_ms", "fwd_q3_ms", "bwd_q1_ms", "bwd_q3_ms")


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
    # The markdown table is for people: the status carries its flags, quartiles stay in the
    # JSON and CSV.
    shown = [c for c in Row.COLUMNS if c not in MARKDOWN_HIDDEN]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(_cell(status_text(row.status, row.flags) if c == "status"
                                      else r[c]) for c in shown) + " |"
              for row, r in zip(rows, table, strict=True)]
    files.write_text(paths[2], "\n".join(lines) + "\n")
    return paths


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
            chart(rows, folder / CHART, f"sweep {Path(sweep_dir).name}: median ms")
    return paths


def written(folder: Path, paths: Sequence[Path], rows: Sequence[Row]) -> bool:
    """The folder's summary is that of `rows`, every file of it present."""
    try:
        same = (folder / SUMMARY_FILES[0]).read_text() == _json([r.columns() for r in rows])
    except OSError:
        return False
    return same and all(p.exists() for p in paths)


DECADE = 10.0  # values spanning more than this ratio get a log axis
WHISKERS = "whiskers: 25th–75th percentile of iterations"


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


def bar_chart(labels: Sequence[str], fwd: Sequence[Optional[float]],
              bwd: Sequence[Optional[float]], path: Path, title: str,
              fwd_range: Sequence[tuple] = (), bwd_range: Sequence[tuple] = ()) -> Path:
    """Horizontal bars of fwd/bwd medians (ms), one pair per row — any number of rows stays
    readable, labels never overlap — with asymmetric whiskers from each (low, high) range;
    missing values are gaps; a log axis when the values span more than a decade."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    def arr(values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    def whiskers(medians, ranges):
        if not len(ranges):
            return None
        low = arr([r[0] for r in ranges])
        high = arr([r[1] for r in ranges])
        return np.nan_to_num(np.vstack([medians - low, high - medians]).clip(min=0))

    names, common = split_common(labels)
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(9.0, max(3.0, 0.32 * len(names) + 1.6)))
    values = []
    for offset, series, ranges, name in ((-0.2, fwd, fwd_range, "forward"),
                                         (0.2, bwd, bwd_range, "backward")):
        med = arr(series)
        err = whiskers(med, ranges)
        ax.barh(y + offset, med, height=0.4, label=name, xerr=err, capsize=2)
        values += [v for v in med if v > 0]
        ends = med + (err[1] if err is not None else 0)  # past the whisker, not on it
        for yi, v, end in zip(y + offset, med, ends, strict=True):
            if v > 0:
                ax.annotate(f"{v:.3g}", (end, yi), xytext=(4, 0), textcoords="offset points",
                            va="center", fontsize=6)
    if values and max(values) / min(values) > DECADE:
        ax.set_xscale("log")
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()  # the first job on top, as in the table
    ax.set_xlabel("median time per iteration (ms)" + (", log scale" if values and
                                                       max(values) / min(values) > DECADE
                                                       else ""))
    ax.set_title(textwrap.fill(title + (f" — all {common}" if common else ""), 90),
                 fontsize=9)  # sweep names can be long
    ax.legend(fontsize=8, title=WHISKERS, title_fontsize=7, loc="best")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with files.replaced(path) as tmp:
            fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path


def chart(rows: Sequence[Row], path: Path, title: str,
          labels: Optional[Sequence[str]] = None) -> Path:
    """The chart of the timed (ok) rows; `labels` replaces their own labels."""
    ok = [r for r in rows if r.status == OK]
    return bar_chart(list(labels) if labels is not None else [r.label for r in ok],
                     [r.fwd_median_ms for r in ok], [r.bwd_median_ms for r in ok], path, title,
                     [(r.fwd_q1_ms, r.fwd_q3_ms) for r in ok],
                     [(r.bwd_q1_ms, r.bwd_q3_ms) for r in ok])
