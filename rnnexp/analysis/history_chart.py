"""The chart of one series: each run's level with its 95% interval (log axis), in the order
the runs started, coloured by the torch version that took it; the commits named where they change;
each change point a vertical line with the levels of the segments it separates."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from rnnexp.analysis.history import Series


def file_name(series: Series) -> str:
    text = f"{series.name}-{series.machine}"
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_")[:150] + ".png"


def draw(series: Series, path: Path, phase: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    pts = series.points
    x = list(range(len(pts)))
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, 0.12 * len(pts) + 5)), 4.2))
    torches = sorted({p.torch for p in pts})
    colours = plt.get_cmap("tab10")
    for n, torch in enumerate(torches):
        xs = [i for i in x if pts[i].torch == torch]
        levels = [pts[i].level for i in xs]
        spans = [pts[i].interval() for i in xs]
        ax.errorbar(xs, levels, yerr=[[lv - lo for lv, (lo, _) in zip(levels, spans,
                                                                      strict=True)],
                                      [hi - lv for lv, (_, hi) in zip(levels, spans,
                                                                      strict=True)]],
                    fmt="o", ms=3.5, lw=0.8, capsize=2, color=colours(n % 10),
                    label=f"torch {torch or '?'}")
    # Segment levels between change points, and the change points themselves.
    bounds = [0, *(c.index for c in series.changes), len(pts)]
    for n, change in enumerate(series.changes):
        ax.axvline(change.index - 0.5, color="crimson", ls="--", lw=1.2)
        ax.annotate(change.size_text().split(" (")[0], (change.index - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color="crimson", fontsize=8)
        for lo, hi, level in ((bounds[n], change.index, change.shift.before_ms),
                              (change.index, bounds[n + 2], change.shift.after_ms)):
            ax.hlines(level, lo - 0.4, hi - 0.6, color="crimson", lw=1, alpha=0.6)
    # Commits named where they change (at most ~12 labels).
    starts = [i for i in x if i == 0 or pts[i].commit != pts[i - 1].commit]
    step = max(1, len(starts) // 12)
    ax.set_xticks(starts[::step])
    ax.set_xticklabels([pts[i].commit[:7] or "?" for i in starts[::step]], rotation=45,
                       ha="right", fontsize=7)
    ax.set_xlabel("runs in the order they started (commit where it changes)")
    # Changes are relative: a log axis shows +10% as the same step at any level.
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel(f"{phase} {series.unit}, log scale")
    ax.set_title("\n".join(textwrap.wrap(f"{series.name} on {series.machine}", 90)),
                 fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
