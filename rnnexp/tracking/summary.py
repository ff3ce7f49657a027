"""A sweep's summary: one row per job, written as JSON/CSV/markdown plus a fwd/bwd chart."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.results import OK, RESULTS_FILE, Result

COLUMNS = ("job", "label", "status", "fwd_median_ms", "fwd_iqr_ms", "bwd_median_ms",
           "bwd_iqr_ms", "tokens_per_s", "reason")


def load_sweep(sweep_dir: Path) -> list[tuple[Path, Result]]:
    """(job folder, result) for every job of a sweep that saved one, in job order."""
    found = []
    for path in Path(sweep_dir).rglob(RESULTS_FILE):
        try:
            found.append((path.parent, Result.load(path)))
        except (OSError, ValueError, TypeError):
            continue  # not one of ours
    key = lambda item: [int(p) if p.isdigit() else p  # noqa: E731 — 2 before 10
                        for p in item[0].relative_to(sweep_dir).parts]
    return sorted(found, key=key)


def row(job: str, r: Result) -> dict:
    fwd, bwd = r.phases.get("forward", {}), r.phases.get("backward", {})
    rate = r.phases.get("total") or fwd
    return {"job": job, "label": r.label, "status": r.status,
            "fwd_median_ms": fwd.get("median_ms"), "fwd_iqr_ms": fwd.get("iqr_ms"),
            "bwd_median_ms": bwd.get("median_ms"), "bwd_iqr_ms": bwd.get("iqr_ms"),
            "tokens_per_s": rate.get("tokens_per_s"), "reason": r.reason}


def rows_of(jobs: Sequence[tuple[Path, Result]], sweep_dir: Path) -> list[dict]:
    return [row(str(folder.relative_to(sweep_dir)), r) for folder, r in jobs]


def _cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_files(rows: list[dict], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "summary.json", folder / "summary.csv", folder / "summary.md"]
    paths[0].write_text(json.dumps(rows, indent=2))
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    paths[2].write_text("\n".join(lines) + "\n")
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


def chart(rows: list[dict], path: Path, title: str) -> Path:
    ok = [r for r in rows if r["status"] == OK]
    return bar_chart([r["label"] for r in ok], [r["fwd_median_ms"] for r in ok],
                     [r["bwd_median_ms"] for r in ok], path, title,
                     [r["fwd_iqr_ms"] for r in ok], [r["bwd_iqr_ms"] for r in ok])
