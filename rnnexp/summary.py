"""A sweep's summary: one row per job, written as JSON/CSV/markdown plus a fwd/bwd chart."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.results import OK, Result, Row

SUMMARY_DIR = "summary"
CHART = "fwd_bwd.png"


def rows_of(jobs: Sequence[tuple[Path, Result]], sweep_dir: Path) -> list[Row]:
    return [Row.of(str(Path(folder).relative_to(sweep_dir)), r) for folder, r in jobs]


def _cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_files(rows: Sequence[Row], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "summary.json", folder / "summary.csv", folder / "summary.md"]
    table = [r.columns() for r in rows]
    paths[0].write_text(json.dumps(table, indent=2))
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=Row.COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    lines = ["| " + " | ".join(Row.COLUMNS) + " |", "|" + "---|" * len(Row.COLUMNS)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in Row.COLUMNS) + " |" for r in table]
    paths[2].write_text("\n".join(lines) + "\n")
    return paths


# What this process last wrote for a sweep: the json sink and the MLflow sink both need the
# summary at a sweep's end, and drawing the chart twice cost a second each.
_WRITTEN: dict[str, tuple[str, list[Path]]] = {}


def write(sweep_dir: Path, jobs: Sequence[tuple[Path, Result]]) -> list[Path]:
    """summary.{json,csv,md} and, when any job was timed, the chart, in <sweep>/summary/."""
    rows = rows_of(jobs, sweep_dir)
    folder = Path(sweep_dir) / SUMMARY_DIR
    signature = json.dumps([r.columns() for r in rows], default=str)
    done = _WRITTEN.get(str(folder.resolve()))
    if done and done[0] == signature and all(p.exists() for p in done[1]):
        return list(done[1])
    paths = write_files(rows, folder)
    if any(r.status == OK for r in rows):
        paths.append(chart(rows, folder / CHART, f"sweep {Path(sweep_dir).name}: median ms"))
    _WRITTEN[str(folder.resolve())] = (signature, list(paths))
    return paths


def bar_chart(labels: Sequence[str], fwd: Sequence[Optional[float]],
              bwd: Sequence[Optional[float]], path: Path, title: str,
              fwd_err: Sequence[Optional[float]] = (), bwd_err: Sequence[Optional[float]] = ()
              ) -> Path:
    """Grouped bars of fwd/bwd medians (ms) with IQR/2 whiskers; missing values are gaps."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    def arr(values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 4.5))
    for offset, values, err, name in ((-0.2, fwd, fwd_err, "forward"),
                                      (0.2, bwd, bwd_err, "backward")):
        errors = arr(err) / 2 if len(err) else None
        ax.bar(x + offset, arr(values), width=0.4, label=name, yerr=errors, capsize=3)
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("median time per iteration (ms)")
    ax.set_title(textwrap.fill(title, 70), fontsize=9)  # sweep names can be long
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart(rows: Sequence[Row], path: Path, title: str,
          labels: Optional[Sequence[str]] = None) -> Path:
    """The chart of the timed (ok) rows; `labels` replaces their own labels."""
    ok = [r for r in rows if r.status == OK]
    return bar_chart(list(labels) if labels is not None else [r.label for r in ok],
                     [r.fwd_median_ms for r in ok], [r.bwd_median_ms for r in ok], path, title,
                     [r.fwd_iqr_ms for r in ok], [r.bwd_iqr_ms for r in ok])
