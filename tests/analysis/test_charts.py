"""The PNG charts of a sweep (rnnexp.results.summary) and of a comparison
(rnnexp.analysis.compare_chart) are read at a glance: a linear axis, the spread the table
shows, a title that asks the question without run ids, nothing drawn over the data."""

from __future__ import annotations

import math

import pytest

from rnnexp.analysis import compare_chart
from rnnexp.analysis.significance import Difference
from rnnexp.analysis.sweeps import Run
from rnnexp.measure.records import Samples
from rnnexp.models.work import Work
from rnnexp.results import summary
from rnnexp.results.result import OK, Result, Row, phase_stats

WORK = Work(flops_fwd=1e9, flops_bwd=2e9, bytes_fwd=1e6, bytes_bwd=2e6, tokens=1000)
RUN_ID = "0123456789abcdef0123456789abcdef"


def result(model: str, forward: list[float]) -> Result:
    samples = Samples(forward_ms=forward, backward_ms=[2 * v for v in forward])
    return Result(choices={"model": model, "backend": "aten", "shape": "small",
                           "device": "cpu"}, overrides=[], config={}, status=OK,
                  device="cpu", dtype="float32", phases=phase_stats(samples, WORK))


# Skewed: the slow one is 26× the fast one, and its last quartile is far from its median.
RESULTS = [result("lstm", [0.6, 0.65, 0.7, 0.66]), result("jit", [16.0, 17.0, 17.5, 40.0])]


def points(ax) -> list[tuple[float, float]]:
    """The (x, y) of every dot drawn on `ax`."""
    return [(x, y) for line in ax.get_lines() if line.get_marker() == "o"
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]


def ranges(ax) -> list[tuple[float, float]]:
    """The (low, high) x ends of every horizontal range drawn on `ax`."""
    return [(min(seg[0][0], seg[1][0]), max(seg[0][0], seg[1][0]))
            for coll in ax.collections for seg in coll.get_segments()]


def test_a_sweeps_chart_shows_medians_on_their_quartiles_on_a_linear_axis_from_zero():
    rows = [Row.of(str(i), r) for i, r in enumerate(RESULTS)]
    fig = summary.figure([r.label for r in rows], [
        ("forward", [r.fwd_median_ms for r in rows], [(r.fwd_q1_ms, r.fwd_q3_ms) for r in rows]),
        ("backward", [r.bwd_median_ms for r in rows], [(r.bwd_q1_ms, r.bwd_q3_ms) for r in rows]),
    ], "Time per iteration by model", f"sweep  ({RUN_ID})")
    forward, backward = fig.axes
    for ax in (forward, backward):
        assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
        assert ax.get_legend() is None
    assert sorted(x for x, _ in points(forward)) == pytest.approx(
        sorted(r.fwd_median_ms for r in rows))
    drawn = [v for pair in sorted(ranges(forward)) for v in pair]
    assert drawn == pytest.approx([v for r in rows for v in (r.fwd_q1_ms, r.fwd_q3_ms)])
    assert [t.get_text() for t in forward.get_yticklabels()] == ["lstm", "jit"]  # what varies
    title = fig._suptitle.get_text()
    assert title.startswith("Time per iteration by model") and "all aten·small·cpu" in title
    assert RUN_ID not in title and "percentile" in " ".join(t.get_text() for t in fig.texts)


def test_a_sweeps_chart_is_written_with_a_question_for_a_title(tmp_path):
    rows = [Row.of(str(i), r) for i, r in enumerate(RESULTS)]
    path = summary.chart(rows, tmp_path / "summary" / summary.CHART, "sweep 2026-11-26/15-56-11")
    assert path.stat().st_size > 1000
    assert summary.by_what([r.choices for r in rows]) == "by model"
    assert summary.by_what([rows[0].choices] * 2) == "per job"


def test_a_comparisons_chart_draws_the_tables_speedups_and_intervals():
    runs = [Run.of(str(i), r) for i, r in enumerate(RESULTS)]
    cells = {(1, "fwd"): Difference(0.04, 0.03, 0.05, 0.001, real=True),
             (1, "bwd"): Difference(1.3, math.nan, math.nan, 1.0)}  # cannot tell
    fig = compare_chart.figure(runs, [runs[0], runs[0]], cells, ["model"],
                               f"model=lstm,jit  ({RUN_ID})  (baseline model=lstm)", 0.03)
    forward, backward = fig.axes
    for ax in (forward, backward):
        assert ax.get_xscale() == "linear" and ax.get_legend() is None
        assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ax.get_lines())  # 1×
    assert points(forward) == [(0.04, 0)] and (0.03, 0.05) in ranges(forward)
    assert points(backward) == [(1.3, 0)] and (0.97, 1.03) not in ranges(backward)
    # Each verdict as the table writes it, beside the panel (x past its right edge).
    notes = {t.get_text(): t for ax in fig.axes for t in ax.texts}
    assert set(notes) == {cells[1, "fwd"].cell(), "cannot tell"}
    assert all(t.xy[0] >= 1 for t in notes.values())
    title = fig._suptitle.get_text()
    assert title.startswith("How much faster than the baseline") and RUN_ID not in title


@pytest.mark.parametrize("sweep, baseline, against, name", [
    (f"model=lstm,py,jit · 2026-11-26 15:56:11  ({RUN_ID})", "model=lstm", None,
     "20261126-155611-vs-lstm.png"),
    ("outputs/sweeps/2026-11-26/15-56-11", None, "outputs/sweeps/2026-11-25/10-00-00",
     "20261126-155611-vs-20261125-100000.png"),
    (RUN_ID, None, None, "01234567.png"),
    ("/tmp/my sweep", "bench.python=/a/.venv/bin/python", None,
     "my_sweep-vs-_a_.venv_bin_python.png"),
])
def test_chart_file_names_are_short_and_say_what_is_compared(sweep, baseline, against, name):
    assert compare_chart.file_name(sweep, baseline, against) == name
