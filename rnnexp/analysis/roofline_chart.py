"""The roofline chart of a sweep (from its folder or its MLflow runs): arithmetic intensity
(FLOP/byte) against achieved GFLOP/s, log-log, one labelled point per job, under the measured
ceilings min(peak GFLOP/s, intensity × peak GB/s) of each device and dtype the sweep ran on."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rnnexp.analysis.sweeps import Run
from rnnexp.errors import RnnexpError
from rnnexp.results.result import OK, attainable, label

CHART = "roofline.png"
# What a point needs of a run's rnnexp.results.result.Roofline.
NEEDED = ("intensity", "gflops", "peak_gflops", "peak_gbps")


@dataclass(frozen=True)
class Point:
    label: str
    intensity: float
    gflops: float
    peak_gflops: float
    peak_gbps: float
    where: str  # the device and dtype whose ceilings apply


def points(runs: Sequence[Run], keys: Sequence[str]) -> tuple[list[Point], int]:
    """The sweep's ok jobs that carry a roofline, and how many ok jobs carry none."""
    out, missing = [], 0
    for run in runs:
        if run.row.status != OK:
            continue
        roof = run.roofline
        if roof is None or any(getattr(roof, k) is None for k in NEEDED):
            missing += 1
            continue
        out.append(Point(label=label(run.config, keys), intensity=roof.intensity,
                         gflops=roof.gflops, peak_gflops=roof.peak_gflops,
                         peak_gbps=roof.peak_gbps, where=run.where))
    if not out:
        raise RnnexpError("--roofline: no timed job of this sweep carries roofline metrics — "
                          "record it with bench.roofline=true (the default)")
    return out, missing


def draw(pts: Sequence[Point], path: Path, title: str) -> Path:
    """Each point numbered on the chart and named in a key beside it: points of one shape sit
    at one intensity, and their names written beside them overlapped into one smear."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    import numpy as np

    from rnnexp.results.summary import split_common

    names, common = split_common([p.label for p in pts])
    # One pair of ceilings per device·dtype (and per measurement, should it differ).
    ceilings = sorted({(p.where, p.peak_gflops, p.peak_gbps) for p in pts})
    ridges = [f / b for _, f, b in ceilings]
    xs = [p.intensity for p in pts] + ridges
    x = np.geomspace(min(xs) / 4, max(xs) * 4, 256)
    fig, (ax, key) = plt.subplots(1, 2, figsize=(12.0, max(5.5, 0.17 * len(pts) + 1.5)),
                                  gridspec_kw={"width_ratios": [2.2, 1]})
    for i, (where, peak_f, peak_b) in enumerate(ceilings):
        color = f"C{i}"
        ax.plot(x, [attainable(v, peak_f, peak_b) for v in x], color=color,
                label=f"{where}: GEMM {peak_f:.3g} GFLOP/s, copy {peak_b:.3g} GB/s")
    for n, p in enumerate(pts, 1):
        color = f"C{ceilings.index((p.where, p.peak_gflops, p.peak_gbps))}"
        ax.scatter([p.intensity], [p.gflops], color=color, zorder=3, s=18)
        # Alternate sides so that neighbours at one intensity do not cover each other.
        ax.annotate(str(n), (p.intensity, p.gflops), textcoords="offset points",
                    xytext=(5 if n % 2 else -5, 0), ha="left" if n % 2 else "right",
                    va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=max(f for _, f, _ in ceilings) * 2)  # room above the compute ceiling
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic)")
    ax.set_ylabel("achieved GFLOP/s (at the median)")
    ax.set_title(textwrap.fill(title, 80), fontsize=9)  # sweep names can be long
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, title="measured ceilings", title_fontsize=7)
    key.axis("off")
    lines = [f"{n:>3}  {name}" for n, name in enumerate(names, 1)]
    key.text(0, 1, ("all: " + common + "\n\n" if common else "") + "\n".join(lines),
             va="top", ha="left", fontsize=7, family="monospace", transform=key.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
