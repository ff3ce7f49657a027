"""The chart of a comparison: what the table's speedup column says, drawn — every compared
cell's speedup (baseline ÷ candidate) as a point with its 95% interval, one panel per phase.

It is read at a glance: a linear axis with the line of no difference at 1× and the
±min-effect band around it, each row named by what varies, the cell's verdict written beside
it exactly as the table writes it ("1.31× (1.22–1.40)", "~", "cannot tell ±18%"), a title that
says what is asked (no run ids), and what the marks mean under the plot rather than a legend
over the data. A cell with no interval ("cannot tell") is a hollow point.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.analysis.significance import Difference
from rnnexp.analysis.sweeps import PHASES, Run
from rnnexp.results.result import label
from rnnexp.results.summary import finish, panel, plain_title, save

COLORS = {"faster": "#1a7f37", "slower": "#cf222e", "~": "#6e7781", "?": "#bf8700"}
MEANING = ("dot: speedup = baseline ÷ candidate (>1: faster) · line: its 95% interval · "
           "hollow: no interval · grey band, where drawn: ±min-effect")


def file_name(sweep_name: str, baseline: Optional[str] = None,
              against: Optional[str] = None) -> str:
    """A short file name that says what the chart compares: the sweep's date and time
    (or its folder's name), then `-vs-<baseline value>` or `-vs-<baseline sweep>`."""
    def token(text: str) -> str:
        when = re.search(r"(\d{4})-(\d{2})-(\d{2})[ /_T]+(\d{2})[-:](\d{2})[-:](\d{2})", text)
        if when:
            return "{}{}{}-{}{}{}".format(*when.groups())
        found = re.search(r"\b[0-9a-f]{32}\b", text)
        if found:
            return found.group(0)[:8]
        return Path(plain_title(text).split("  ")[0]).name or "sweep"

    name = token(sweep_name)
    if against:
        name += f"-vs-{token(str(against))}"
    elif baseline:
        name += f"-vs-{baseline.partition('=')[2] or baseline}"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] + ".png"


def figure(runs: Sequence[Run], bases: Sequence[Optional[Run]],
           cells: dict[tuple[int, str], Difference], keys: Sequence[str], title: str,
           min_effect: Optional[float] = None):
    """The matplotlib figure: one panel per phase compared, one row per compared run;
    `min_effect` (a fraction, as the cells were judged with) draws its band."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    compared = [i for i, (r, b) in enumerate(zip(runs, bases, strict=True))
                if b is not None and b is not r and any((i, p) in cells for p, _ in PHASES)]
    phases = [(p, name) for p, name in PHASES if any((i, p) in cells for i in compared)]
    names = [label(runs[i].config, keys) for i in compared]
    y = np.arange(len(compared))
    fig, axes = plt.subplots(1, max(1, len(phases)), sharey=True, squeeze=False,
                             figsize=(3.4 + 4.2 * max(1, len(phases)),
                                      max(2.6, 0.34 * len(compared) + 2.0)))
    for ax, (p, name) in zip(axes[0], phases, strict=False):
        if min_effect is not None:
            ax.axvspan(1 - min_effect, 1 + min_effect, color="#d0d7de", alpha=0.5, lw=0)
        ax.axvline(1.0, color="#57606a", lw=1)
        ends = [1.0] + ([1 + min_effect, 1 - min_effect] if min_effect is not None else [])
        for yi, i in zip(y, compared, strict=True):
            d = cells.get((i, p))
            if d is None:
                continue
            color = COLORS.get(d.verdict, COLORS["?"])
            interval = math.isfinite(d.low) and math.isfinite(d.high)
            if interval:
                ax.hlines(yi, d.low, d.high, color=color, lw=2)
                ends += [d.low, d.high]
            ax.plot([d.speedup], [yi], "o", color=color, markersize=6,
                    markerfacecolor=color if interval else "white")
            ends.append(d.speedup)
        low, high = min(ends), max(ends)
        pad = 0.1 * (high - low)
        ax.set_xlim(max(0.0, low - pad), high + pad)
        for yi, i in zip(y, compared, strict=True):
            d = cells.get((i, p))
            if d is not None:  # beside the panel, never over a point
                ax.annotate(d.cell(), (1, yi), xycoords=("axes fraction", "data"),
                            xytext=(4, 0), textcoords="offset points", ha="left",
                            va="center", fontsize=7, color=COLORS.get(d.verdict, "#333"))
        panel(ax, name, "speedup over the baseline (×)")
    return finish(fig, names, "How much faster than the baseline is each run?\n"
                  + textwrap.fill(plain_title(title), 110), MEANING)


def draw(runs: Sequence[Run], bases: Sequence[Optional[Run]],
         cells: dict[tuple[int, str], Difference], keys: Sequence[str], path: Path,
         title: str, min_effect: Optional[float] = None) -> Path:
    return save(figure(runs, bases, cells, keys, title, min_effect), path)
