"""The report's Plotly figures, as Plotly's JSON (dicts the page hands to Plotly.newPlot):
the forest plot of a comparison, the roofline, a cell's samples over rounds, a history
series. Every point carries its cell's number (`customdata`): a click on it opens the cell.

They are written as Plotly's JSON directly rather than through `plotly.graph_objects`,
whose first figure costs half a second of a sweep's end to load its validators (and a
thousand cells' charts would cost seconds more); the tests validate every kind of figure
with `plotly.graph_objects.Figure`."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from rnnexp.analysis.report import model as m
from rnnexp.results.result import attainable

COLORS = {m.FASTER: "#1a7f37", m.SLOWER: "#cf222e", m.SAME: "#6e7781",
          m.CANNOT_TELL: "#bf8700"}
PALETTE = ("#0969da", "#8250df", "#bc4c00", "#1a7f37", "#cf222e", "#6e7781")
FONT = {"family": "system-ui, sans-serif", "size": 12}
ROW_PX = 22  # a forest plot's row; 14 px past 100 rows


AXIS = {"gridcolor": "#eaeef2", "zerolinecolor": "#d0d7de", "linecolor": "#d0d7de"}


def _figure(data: list, layout: dict) -> dict:
    """Plotly's JSON of a figure: white plot, light grid on every axis."""
    axes = {k: {**AXIS, **v} for k, v in layout.items() if k.startswith(("xaxis", "yaxis"))}
    return {"data": data, "layout": {"font": FONT, "paper_bgcolor": "white",
                                     "plot_bgcolor": "white", **layout, **axes}}


def _finite(value: float) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def forest(c: m.Comparison) -> Optional[dict]:
    """Each compared cell's speedup with its 95% interval, one panel per phase, coloured by
    its verdict; the line of no difference, the ±min-effect band and the gate."""
    if not c.verdicts:
        return None
    phases = list(dict.fromkeys(v.phase for v in c.verdicts))
    rows = list(dict.fromkeys(f"#{v.number} {v.label}" for v in c.verdicts))
    data: list[dict[str, Any]] = []
    shown = set()
    for col, phase in enumerate(phases, 1):
        axis = "" if col == 1 else str(col)
        for verdict, color in COLORS.items():
            vs = [v for v in c.verdicts if v.phase == phase and v.verdict == verdict]
            if not vs:
                continue
            data.append({
                "type": "scatter", "mode": "markers", "name": verdict,
                "legendgroup": verdict, "showlegend": verdict not in shown,
                "x": [v.speedup for v in vs], "y": [f"#{v.number} {v.label}" for v in vs],
                "xaxis": f"x{axis}", "yaxis": f"y{axis}",
                "marker": {"color": color, "size": 9,
                           "symbol": ["diamond" if v.regression else "circle" for v in vs]},
                "error_x": {"type": "data", "symmetric": False, "color": color,
                            "array": [_finite(v.high - v.speedup) for v in vs],
                            "arrayminus": [_finite(v.speedup - v.low) for v in vs]},
                "customdata": [v.number for v in vs],
                "hovertext": [f"#{v.number} {v.label} {phase}: {v.text}<br>{v.verdict}, "
                              f"{v.method}, p(Holm) {v.p_holm:.2g}"
                              + (f"<br>{v.why_not}" if v.why_not else "") for v in vs],
                "hoverinfo": "text"})
            shown.add(verdict)
    speeds = [x for v in c.verdicts for x in (v.speedup, v.low, v.high)
              if x is not None and math.isfinite(x) and x > 0]
    lo, hi = min(speeds + [1 / (1 + (c.gate or c.min_effect))]), max(speeds + [1.0])
    span = [math.log10(lo) - 0.05, math.log10(hi) + 0.05]
    shapes, notes = [], []
    layout: dict[str, Any] = {}
    width = 1 / len(phases)
    for col, phase in enumerate(phases, 1):
        axis = "" if col == 1 else str(col)
        layout[f"xaxis{axis}"] = {
            "type": "log", "range": span, "domain": [(col - 1) * width + 0.02, col * width - 0.02],
            "title": {"text": f"{phase} speedup (baseline ÷ candidate)"}, "anchor": f"y{axis}"}
        layout[f"yaxis{axis}"] = {
            "type": "category", "categoryorder": "array", "categoryarray": rows,
            "autorange": "reversed", "anchor": f"x{axis}", "automargin": True,
            **({} if col == 1 else {"matches": "y", "showticklabels": False})}
        xref, yref = f"x{axis}", f"y{axis} domain"
        shapes.append({"type": "rect", "xref": xref, "yref": yref, "x0": 1 / (1 + c.min_effect),
                       "x1": 1 + c.min_effect, "y0": 0, "y1": 1, "line": {"width": 0},
                       "fillcolor": "rgba(110,119,129,0.12)", "layer": "below"})
        shapes.append({"type": "line", "xref": xref, "yref": yref, "x0": 1, "x1": 1, "y0": 0,
                       "y1": 1, "line": {"color": "#57606a", "width": 1}})
        if c.gate is not None:
            gate = 1 / (1 + c.gate)
            shapes.append({"type": "line", "xref": xref, "yref": yref, "x0": gate, "x1": gate,
                           "y0": 0, "y1": 1, "line": {"color": COLORS[m.SLOWER], "dash": "dash",
                                                      "width": 1.5}})
            notes.append({"xref": xref, "yref": yref, "x": math.log10(gate), "y": 1,
                          "yanchor": "bottom", "showarrow": False,
                          "text": f"gate: {100 * c.gate:g}% slower",
                          "font": {"color": COLORS[m.SLOWER], "size": 11}})
    row_px = ROW_PX if len(rows) <= 100 else 14
    return _figure(data, {
        **layout, "shapes": shapes, "annotations": notes,
        "height": 140 + row_px * len(rows), "margin": {"t": 60, "r": 20, "b": 60},
        "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0,
                   "yanchor": "bottom", "yref": "paper", "title": {"text": "verdict"}},
        "hovermode": "closest"})


def roofline(r: m.Roofline) -> dict:
    """Every configuration at its intensity and rate, numbered as in the tables, under the
    measured ceilings min(peak GFLOP/s, intensity × peak GB/s) of each device and dtype."""
    ceilings = sorted({(p.where, p.peak_gflops, p.peak_gbps) for p in r.points})
    xs = [p.intensity for p in r.points] + [f / b for _, f, b in ceilings]
    x = np.geomspace(min(xs) / 4, max(xs) * 4, 64)
    data: list[dict[str, Any]] = []
    for i, (where, peak_f, peak_b) in enumerate(ceilings):
        color = PALETTE[i % len(PALETTE)]
        data.append({"type": "scatter", "mode": "lines", "x": x.tolist(),
                     "y": [attainable(v, peak_f, peak_b) for v in x], "hoverinfo": "skip",
                     "line": {"color": color},
                     "name": f"{where}: GEMM {peak_f:.3g} GFLOP/s, copy {peak_b:.3g} GB/s"})
        pts = [p for p in r.points if (p.where, p.peak_gflops, p.peak_gbps) ==
               (where, peak_f, peak_b)]
        data.append({
            "type": "scatter", "mode": "markers+text", "showlegend": False,
            "x": [p.intensity for p in pts], "y": [p.gflops for p in pts],
            "text": [str(p.number) for p in pts],
            # Alternate sides: configurations of one shape share an intensity.
            "textposition": ["middle right" if n % 2 else "middle left"
                             for n in range(len(pts))],
            "textfont": {"size": 10}, "marker": {"color": color, "size": 7},
            "customdata": [p.number for p in pts],
            "hovertext": [f"#{p.number} {p.label}<br>{p.intensity:.3g} FLOP/B, "
                          f"{p.gflops:.3g} GFLOP/s"
                          + (f", {p.pct_attainable:.2g}% of the roof ({p.bound}-bound)"
                             if p.pct_attainable is not None else "") for p in pts],
            "hoverinfo": "text"})
    return _figure(data, {
        "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP per byte of "
                                                   "minimum traffic)"}},
        "yaxis": {"type": "log", "title": {"text": "achieved GFLOP/s (at the median)"},
                  "range": [math.log10(min(p.gflops for p in r.points)) - 0.5,
                            math.log10(max(f for _, f, _ in ceilings)) + 0.3]},
        "height": 520, "legend": {"title": {"text": "measured ceilings"}, "orientation": "h",
                                  "y": -0.2}, "margin": {"t": 20}, "hovermode": "closest"})


def samples(cell: m.Cell) -> Optional[dict]:
    """A cell's medians per round, one line per process and phase (interleaved), else its
    samples in the order they were taken."""
    if not cell.samples:
        return None
    data = []
    for i, (phase, lines) in enumerate(cell.samples.items()):
        for k, ys in enumerate(lines):
            name = f"{phase} process {k + 1}" if len(lines) > 1 else phase
            data.append({"type": "scatter", "mode": "lines+markers", "name": name,
                         "x": list(range(1, len(ys) + 1)), "y": ys,
                         "line": {"color": PALETTE[i % len(PALETTE)], "width": 1},
                         "marker": {"size": 4}, "opacity": 1 if k == 0 else 0.6})
    values = [v for lines in cell.samples.values() for ys in lines for v in ys if v]
    log = bool(values) and max(values) / min(values) > 10
    longest = max(len(ys) for lines in cell.samples.values() for ys in lines)
    return _figure(data, {
        "height": 280, "margin": {"t": 10, "r": 10, "b": 45, "l": 55},
        "xaxis": {"title": {"text": "round" if cell.rounds else "sample"},
                  **({"dtick": 1} if longest <= 20 else {})},
        "yaxis": {"title": {"text": "ms" + (" (median of the round)" if cell.rounds else "")},
                  "type": "log" if log else "linear"},
        "legend": {"orientation": "h", "y": -0.25}})


def series(s: m.Series, number: int) -> dict:
    """A measurement's points with their intervals, its levels between change points and a
    line at each change."""
    at = [p.at for p in s.points]
    ys = [p.median_ms for p in s.points]
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines+markers", "name": s.title, "x": at, "y": ys,
        "line": {"color": PALETTE[number % len(PALETTE)]},
        "error_y": {"type": "data", "symmetric": False,
                    "array": [None if p.high_ms is None else p.high_ms - p.median_ms
                              for p in s.points],
                    "arrayminus": [None if p.low_ms is None else p.median_ms - p.low_ms
                                   for p in s.points]},
        "hovertext": [f"{p.at}: {p.median_ms:.4g} {s.unit}" + (f"<br>{p.note}" if p.note else "")
                      for p in s.points], "hoverinfo": "text"}]
    shapes, notes = [], []
    bounds = [0, *[cp.index for cp in s.change_points], len(at)]
    levels = [s.change_points[0].before_ms] + [cp.after_ms for cp in s.change_points] \
        if s.change_points else []
    for start, end, level in zip(bounds, bounds[1:], levels, strict=False):
        shapes.append({"type": "line", "xref": "x", "yref": "y", "x0": start - 0.4,
                       "x1": end - 0.6, "y0": level, "y1": level,
                       "line": {"color": "#57606a", "width": 2, "dash": "dot"}})
    for cp in s.change_points:
        color = COLORS[cp.verdict]
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": cp.index - 0.5,
                       "x1": cp.index - 0.5, "y0": 0, "y1": 1,
                       "line": {"color": color, "dash": "dash"}})
        notes.append({"xref": "x", "yref": "paper", "x": cp.index - 0.5, "y": 1,
                      "yanchor": "bottom", "showarrow": False, "font": {"color": color},
                      "text": f"{cp.change:+.1%} {cp.verdict}"})
    return _figure(data, {"height": 320, "shapes": shapes, "annotations": notes,
                          "xaxis": {"type": "category", "title": {"text": "run"}},
                          "yaxis": {"title": {"text": s.unit}}, "showlegend": False,
                          "margin": {"t": 30}})


def all_of(report: m.Report) -> dict[str, dict]:
    """The page's figures by element id."""
    out = {}
    if report.comparison is not None:
        fig = forest(report.comparison)
        if fig is not None:
            out["forest"] = fig
    if report.roofline is not None:
        out["roofline"] = roofline(report.roofline)
    for n, s in enumerate(report.series):
        out[f"series-{n}"] = series(s, n)
    return out


def cell_charts(cells: Sequence[m.Cell]) -> dict[int, dict]:
    return {c.number: fig for c in cells if (fig := samples(c)) is not None}
