"""A history's series and a bisection's probes as the HTML report's history section
(rnnexp.analysis.report: its `Series` hook): one page a person opens in a browser or a CI job
keeps as an artifact.

- `history`: each series, its points (run level with its 95% interval, named by commit and
  torch) and its change points (size with interval, p, the first run after it);
- `bisection`: the probes in environment order (each probe's slowdown against the good end
  with its interval), the culprit as the change point, and the posterior over the first slow
  environment after the last probe.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from rnnexp.analysis.bisect import Bisection, Probe
from rnnexp.analysis.history import Series
from rnnexp.analysis.report import model
from rnnexp.analysis.report.build import generated

NO_MATRIX = model.Matrix([], "", [""], [])


def _page(title: str, sources: Sequence[str], series: list[model.Series]) -> model.Report:
    return model.Report(title=title, generated=generated(), sources=list(sources), cells=[],
                        matrix=NO_MATRIX, series=series)


def history(all_series: Sequence[Series], phase: str, sources: Sequence[str]) -> model.Report:
    """The page of `rnnexp history`: a section per series."""
    out = []
    for s in all_series:
        points = []
        for n, p in enumerate(s.points, 1):
            low, high = p.interval()
            # Numbered: runs of one commit in one minute are still points of their own.
            points.append(model.SeriesPoint(
                at=f"{n}: {p.version}", median_ms=p.level, low_ms=low, high_ms=high,
                note=f"{p.day}, run {p.run_id[:12] or p.name}, {len(p.replicates)} "
                     "replicates"))
        changes = [model.ChangePoint(
            index=c.index, before_ms=c.shift.before_ms, after_ms=c.shift.after_ms,
            note=f"{c.size_text()}, p={c.shift.pvalue:.1e}; first run after it "
                 f"{c.after.run_id[:12] or c.after.name}"
                 + (" (same code: the machine changed)" if c.same_code else ""))
            for c in s.changes]
        out.append(model.Series(
            title=f"{s.name} {phase} on {s.machine}", points=points, change_points=changes,
            unit=s.unit, note="change points: Otava's E-divisive candidates tested on the "
                              "runs' replicates"))
    return _page("rnnexp history", sources, out)


def _ratio(p: Probe) -> tuple[float, float, float]:
    """The probe's time (or count) over the good end's, with its 95% interval."""
    d = p.difference
    return 1 / d.speedup, 1 / d.high, 1 / d.low


def bisection(b: Bisection, names: Sequence[str], title: str,
              culprit: Optional[int] = None) -> model.Report:
    """The page of `rnnexp bisect`: the probes by environment and the posterior."""
    probed = sorted({p.index for p in b.probes if p.usable})
    points, note = [], {}
    for m in probed:
        last = [p for p in b.probes if p.index == m and p.usable][-1]
        ratio, low, high = _ratio(last)
        points.append(model.SeriesPoint(at=f"{m}: {names[m]}", median_ms=ratio, low_ms=low,
                                        high_ms=high, note=f"{len(b.probes)} probes in all"))
        note[m] = len(points) - 1
    changes = []
    if culprit is not None:
        after = [i for m, i in note.items() if m >= culprit]
        before = [i for m, i in note.items() if m < culprit]
        if after and before:
            changes.append(model.ChangePoint(
                index=after[0], before_ms=float(np.mean([points[i].median_ms for i in before])),
                after_ms=float(np.mean([points[i].median_ms for i in after])),
                note=f"culprit: {culprit}: {names[culprit]}"))
    failed = ", ".join(f"{p.index} ({p.failed})" for p in b.probes if p.failed)
    probes = model.Series(
        title="probes: each environment against the good end", points=points,
        change_points=changes, unit="× good end",
        note="the last probe of each environment, its ratio to the good end with its 95% "
             "interval" + (f"; failed probes, never read as slower: {failed}" if failed else ""))
    post = b.posterior()
    posterior = model.Series(
        title="P(first slow environment) after the last probe",
        points=[model.SeriesPoint(at=f"{m}: {names[m]}", median_ms=float(post[m - 1]))
                for m in range(1, b.n)], unit="probability",
        note=f"stopping at P ≥ {b.confidence:g}" + (
            "" if math.isfinite(b.effect()[0]) else "; the bad end was never measured"))
    return _page(title, [], [probes, posterior])
