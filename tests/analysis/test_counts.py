"""How compare judges instruction counts (bench.metric=instructions): against their
tolerance, from one run a side, and against the time measured beside them."""

import math

from rnnexp.analysis import significance
from rnnexp.analysis.significance import Difference, calibrate, counts
from rnnexp.results.result import CountStats, Instructions, Result


def test_equal_counts_are_the_same_and_a_one_percent_change_is_real():
    same = counts([1_000_000.0], [1_003_000.0])  # 0.3%: within the tolerance
    assert same.verdict == significance.SAME and not same.real
    assert same.low < 1 < same.high
    slower = counts([1_000_000.0], [1_010_000.0])  # one run a side, 1% more instructions
    assert slower.verdict == "slower" and slower.unit == "instructions"
    assert math.isclose(slower.slowdown, 0.01, rel_tol=1e-9)
    assert slower.method == significance.COUNTS and slower.cell() == "0.990× (instr)"


def test_processes_that_disagree_widen_the_tolerance():
    # The baseline's processes span 0.8%: a 0.5% change is not told from that.
    d = counts([1_000_000.0, 1_008_000.0], [1_009_000.0])
    assert not d.real and d.high / d.speedup > 1.007


def test_time_that_moved_where_counts_did_not_takes_over_the_cell():
    count = counts([1_000_000.0], [1_000_100.0])  # counts: the same
    time = Difference(speedup=0.80, low=0.75, high=0.85, p=0.001, real=True)  # 25% slower
    cell = calibrate(count, time)
    assert cell.verdict == "slower" and cell.unit == "ms"
    assert cell.note.startswith("counts disagree")


def test_counts_decide_where_time_agrees_or_cannot_tell():
    count = counts([1_000_000.0], [1_020_000.0])
    agreeing = Difference(speedup=0.97, low=0.95, high=0.99, p=0.01, real=True)
    assert calibrate(count, agreeing).unit == "instructions"
    assert calibrate(count, agreeing).note == "time agrees"
    vague = Difference(speedup=1.1, low=math.nan, high=math.nan, p=1.0)
    cell = calibrate(count, vague)
    assert cell.verdict == "slower" and cell.note == "time cannot tell"
    assert calibrate(count, None).note == "no time to calibrate against"


def test_counts_and_their_calibration_round_trip_through_results_json():
    stats = CountStats.of([[10.0, 12.0, 11.0], [11.0, 11.0]], time_ms=0.011)
    assert stats.median == 11.0 and stats.process_medians == [11.0, 11.0]
    assert math.isclose(stats.ns_per_instruction, 1000.0)
    assert math.isclose(stats.spread, 2 / 11)
    ins = Instructions(phases={"forward": stats}, env={"ATEN_CPU_CAPABILITY": "avx2"})
    back = Result.from_json(Result(choices={}, overrides=[], config={}, status="ok",
                                   instructions=ins).to_json())
    assert back.instructions == ins
    assert back.instructions.metrics()["forward_instructions"] == 11.0


def test_a_single_run_prints_its_counts_in_one_line():
    from rnnexp.results.sinks.console import counts_line

    ins = Instructions(phases={"forward": CountStats.of([[1000.0, 1002.0]], time_ms=0.001)})
    line = counts_line(ins)
    assert line.startswith("instructions (callgrind") and "forward 1,001 (±0.10%" in line
