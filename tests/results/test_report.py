"""The console table never presents a failed verification as a valid timing."""

from rich.console import Console

from rnnexp.measure.records import Samples, Verification
from rnnexp.models.work import Work
from rnnexp.results.report import results_table
from rnnexp.results.result import INVALID, OK, UNSUPPORTED, Result, phase_stats

WORK = Work(flops_fwd=1e9, flops_bwd=2e9, bytes_fwd=1e6, bytes_bwd=2e6, tokens=1000)


def render(status: str) -> str:
    samples = Samples(forward_ms=[1.0, 1.0, 1.0], backward_ms=[2.0, 2.0, 2.0])
    result = Result(choices={"model": "jit", "backend": "aten", "shape": "small"}, overrides=[],
                    config={}, status=status, device="cpu", dtype="float32",
                    verification=Verification("passed" if status == OK else "failed", 0.5),
                    phases=phase_stats(samples, WORK))
    console = Console(record=True, width=200)
    console.print(results_table([result]))
    return console.export_text()


def test_valid_result_shows_rates():
    text = render(OK)
    assert "333,333" in text  # tokens/s at 3 ms per fwd+bwd
    assert "1.00 [1.00, 1.00]" in text and "2.00 [2.00, 2.00]" in text
    row = next(line for line in text.splitlines() if line.startswith("│ jit"))
    status = row.split("│")[-2].strip()  # the row's last cell
    assert status == "ok"


def test_a_time_is_its_median_and_quartiles_never_a_symmetric_error():
    """A skewed sample (one slow iteration in four) reads as skewed: nothing below zero."""
    from rnnexp.results.result import format_quartiles

    assert format_quartiles(0.7, 0.51, 22.32) == "0.700 [0.510, 22.320]"
    assert format_quartiles(17.02, 16.5, 18.123) == "17.0 [16.5, 18.1]"
    assert format_quartiles(1568.5855614999582, 1500.2, 1600.9) == "1569 [1500, 1601]"
    assert format_quartiles(None, None, None) == "—"
    assert format_quartiles(2.0, None, None) == "2.00"
    text = render(OK)
    assert "±" not in text and "median [25th, 75th percentile]" in text


def test_failed_verification_shows_no_rates_and_says_so():
    text = render(INVALID)
    assert "verification_failed" in text
    assert "333,333" not in text
    assert "✗" in text


def test_undefined_statistics_are_null_not_nan():
    import json

    phases = phase_stats(Samples(forward_ms=[1.0, 2.0, 3.0]), WORK)
    assert phases["forward"].median_ci_low_ms is None  # 3 samples: no 95% interval
    assert "NaN" not in json.dumps({k: p.to_json() for k, p in phases.items()})


def result_with(choices: dict, overrides: list, status: str = OK, reason: str = "",
                flags: tuple = ()) -> Result:
    from rnnexp.machine.environment import Environment

    samples = Samples(forward_ms=[1.0, 1.2, 4.0, 1.1], backward_ms=[2.0, 2.5, 2.1, 9.0])
    env = Environment()
    env.flags = list(flags)
    return Result(choices=choices, overrides=overrides, config={}, status=status,
                  reason=reason, device="cpu", dtype="float32", environment=env,
                  verification=Verification("passed", 1e-6),
                  phases=phase_stats(samples, WORK) if status == OK else {})


LSTM = {"model": "lstm", "backend": "aten", "shape": "default", "device": "cpu"}


def test_overridden_shape_fields_tell_rows_apart():
    a = result_with(LSTM, ["shape.hidden_size=256"])
    b = result_with(LSTM, ["shape.hidden_size=1024", "backend.fuser=te"])
    assert a.label == "lstm·aten·default(hidden_size=256)·cpu"
    assert b.label == "lstm·aten(fuser=te)·default(hidden_size=1024)·cpu"
    assert result_with(LSTM, ["shape=small"]).label == "lstm·aten·default·cpu"


def test_a_deepbench_problem_names_the_row():
    r = result_with({**LSTM, "deepbench": "train_lstm_h512_b16_t25"}, ["deepbench.scale=0.1"])
    assert r.label == "lstm·aten·train_lstm_h512_b16_t25(scale=0.1)·cpu"
    from rnnexp.results.result import Row

    assert Row.of("0", r).label == r.label  # summaries, charts and compare read Row.label


# A terminal of 130 columns holds a row whole: its name and its numbers, each on one line.
WIDTH = 130


def test_the_table_fits_a_terminal_with_reasons_as_footnotes():
    reason = "backend=cudnn needs a CUDA build of PyTorch; this one is CPU-only — use " \
             "backend=aten or backend=jit"
    rows = [result_with({**LSTM, "model": "jit_premul_bias"}, ["shape.hidden_size=1024"]),
            result_with({**LSTM, "backend": "cudnn"}, [], UNSUPPORTED, reason),
            result_with({**LSTM, "model": "py", "backend": "cudnn"}, [], UNSUPPORTED, reason)]
    console = Console(record=True, width=WIDTH)
    console.print(results_table(rows))
    text = console.export_text()
    assert "…" not in text  # names fold, never truncate
    assert "jit_premul_bias·aten·default(hidden_size=1024)" in text
    assert "1.15 [1.08, 1.90]" in text and "204,082" in text  # numbers on one line
    assert text.count(reason) == 1  # once, as footnote [1], under the table
    assert text.count("unsupported [1]") == 2
    assert "GFLOP/s" not in text.split("\n", 3)[2]  # rates beyond tokens/s: --wide only
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_wide_table_adds_the_rest():
    console = Console(record=True, width=250)
    console.print(results_table([result_with(LSTM, [])], wide=True))
    text = console.export_text()
    assert "GFLOP/s" in text and "float32" in text and "✓ 1.0e-06" in text


def test_flags_stand_beside_ok_in_the_table_and_summary(tmp_path):
    from rnnexp.results import summary

    busy = result_with(LSTM, [], flags=("busy",))
    console = Console(record=True, width=200)
    console.print(results_table([busy]))
    assert "ok (busy)" in console.export_text()
    (tmp_path / "0").mkdir()
    summary.write_files(summary.rows_of([(tmp_path / "0", busy)], tmp_path), tmp_path / "s")
    assert "| ok (busy) |" in (tmp_path / "s" / "summary.md").read_text()


def test_a_sweeps_summary_is_drawn_once_for_the_same_rows_and_again_when_they_change(
        tmp_path):
    from rnnexp.results import summary

    jobs = [(tmp_path / "0", result_with(LSTM, []))]
    jobs[0][0].mkdir()
    paths = summary.write(tmp_path, jobs)
    assert [p.name for p in paths] == [*summary.SUMMARY_FILES, summary.CHART]
    written = {p: p.stat().st_mtime_ns for p in paths}
    assert summary.write(tmp_path, jobs) == paths  # the second sink at the sweep's end
    assert {p: p.stat().st_mtime_ns for p in paths} == written
    (tmp_path / summary.SUMMARY_DIR / summary.CHART).unlink()  # a file gone: written again
    summary.write(tmp_path, jobs)
    assert all(p.exists() for p in paths)
    busy = [(tmp_path / "0", result_with(LSTM, [], flags=("busy",)))]  # other rows
    summary.write(tmp_path, busy)
    assert "| ok (busy) |" in (tmp_path / summary.SUMMARY_DIR / "summary.md").read_text()


def test_chart_labels_keep_what_varies_and_whiskers_are_quartiles():
    from rnnexp.results import summary
    from rnnexp.results.result import Row

    short, common = summary.split_common(["lstm·auto·train_a·cpu", "gru·auto·train_b·cpu"])
    assert short == ["lstm·train_a", "gru·train_b"] and common == "auto·cpu"
    row = Row.of("0", result_with(LSTM, []))
    assert 0 < row.fwd_q1_ms < row.fwd_median_ms < row.fwd_q3_ms  # asymmetric, never < 0
    assert row.fwd_q3_ms - row.fwd_median_ms != row.fwd_median_ms - row.fwd_q1_ms


def test_a_sweep_table_names_rows_by_what_varies():
    rows = [result_with({**LSTM, "deepbench": p}, []) for p in ("train_a", "train_b")]
    console = Console(record=True, width=120)
    console.print(results_table(rows, title="sweep", shorten=True))
    text = console.export_text()
    assert "sweep — all lstm·aten·cpu" in text
    assert "│ train_a " in text and "│ train_b " in text
