"""The chart of a comparison: for every compared row and phase, the baseline's and the
candidate's medians side by side, each with its interval, and the speedup cell above them.

Whiskers are asymmetric and say what they are: the between-process 95% interval where the
run measured one (3+ processes), else the median's 95% confidence interval from its samples.
A log scale is used when the values span more than a decade.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.analysis.significance import Difference
from rnnexp.analysis.sweeps import PHASES, Run
from rnnexp.results.result import PhaseStats, label

DECADE = 10.0


def interval(s: PhaseStats) -> tuple[float, float]:
    """(low, high) whisker ends of a phase: between processes, else the median's CI."""
    for low, high in ((s.between_low_ms, s.between_high_ms),
                      (s.median_ci_low_ms, s.median_ci_high_ms)):
        if low is not None and high is not None:
            return low, high
    return s.median_ms, s.median_ms


def draw(runs: Sequence[Run], bases: Sequence[Optional[Run]],
         cells: dict[tuple[int, str], Difference], keys: Sequence[str], path: Path,
         title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    compared = [i for i, (r, b) in enumerate(zip(runs, bases, strict=True))
                if b is not None and b is not r and any((i, p) in cells for p, _ in PHASES)]
    phases = [(p, name) for p, name in PHASES if any((i, p) in cells for i in compared)]
    fig, axes = plt.subplots(1, max(1, len(phases)), squeeze=False,
                             figsize=(max(6.0, 1.1 * len(compared) + 2) * max(1, len(phases)),
                                      4.8))
    for ax, (p, _) in zip(axes[0], phases, strict=False):
        # A row compared in one phase only (a forward-only model) has no bar in the other.
        rows = [i for i in compared if (i, p) in cells]
        x = np.arange(len(rows))
        values = []
        for offset, side, color, name in ((-0.2, "base", "#8c8c8c", "baseline"),
                                          (0.2, "cand", "#1f77b4", "candidate")):
            meds, lows, highs = [], [], []
            for i in rows:
                run = bases[i] if side == "base" else runs[i]
                s = run.stats(p)
                lo, hi = interval(s)
                meds.append(s.median_ms)
                lows.append(s.median_ms - lo)
                highs.append(hi - s.median_ms)
            values += meds + [m + h for m, h in zip(meds, highs, strict=True)]
            ax.bar(x + offset, meds, width=0.4, color=color, label=name,
                   yerr=[lows, highs], capsize=3)
        top = max(v for v in values if v is not None)
        low = min(v for v in values if v)
        if top / low > DECADE:
            ax.set_yscale("log")
        for xi, i in zip(x, rows, strict=True):
            d = cells.get((i, p))
            if d is not None:
                ax.annotate(d.cell(), (xi, top), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(x, [label(runs[i].config, keys) for i in rows], rotation=30,
                      ha="right", fontsize=8)
        ax.set_ylabel(f"{p} median per iteration (ms)")
        ax.margins(y=0.15)
    handles, names = axes[0][0].get_legend_handles_labels()
    # Below the plots: a legend inside would cover the speedups written above the bars.
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8,
               title="bars: median · whiskers: 95% interval", title_fontsize=7)
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

