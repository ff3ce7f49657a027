"""The console table never presents a failed verification as a valid timing."""

from rich.console import Console

from rnnexp.report import results_table
from rnnexp.results import INVALID, OK, Result, phase_stats
from rnnexp.timing import Samples
from rnnexp.verify import Verification
from rnnexp.workload import Work

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
    assert "1.000 ± 0.000" in text and "2.000 ± 0.000" in text
    row = next(line for line in text.splitlines() if line.startswith("│ jit"))
    status = row.split("│")[-2].strip()  # the row's last cell
    assert status == "ok"


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
