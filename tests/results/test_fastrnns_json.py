"""fastrnns `--print-json oss|pep` formats, in milliseconds."""

import json

import pytest

from rnnexp.errors import ConfigError
from rnnexp.results.result import INVALID, OK, UNSUPPORTED, BackendInfo, PhaseStats, Result
from rnnexp.results.sinks import fastrnns as fastrnns_json


def result(model: str, backend: str, fwd: list[float], bwd: list[float] | None,
           status: str = OK) -> Result:
    phases = {"forward": PhaseStats(mean_ms=sum(fwd) / len(fwd), median_ms=fwd[1],
                                    samples_ms=fwd)}
    if bwd:
        phases["backward"] = PhaseStats(mean_ms=sum(bwd) / len(bwd), median_ms=bwd[1],
                                        samples_ms=bwd)
    else:
        phases["backward"] = PhaseStats(not_applicable="forward-only")
    return Result(choices={"model": model, "backend": backend}, overrides=[],
                  config={"model": {"family": "lstm"}}, status=status,
                  backend=BackendInfo("cudnn" if backend == "auto" else backend), phases=phases)


RESULTS = [
    result("lstm", "auto", [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]),
    result("jit", "te", [2.0, 2.0, 2.0], None),
    result("py", "aten", [9.0, 9.0, 9.0], [9.0, 9.0, 9.0], status=INVALID),
    Result(choices={"model": "lstm", "backend": "miopen"}, overrides=[], config={},
           status=UNSUPPORTED, reason="no ROCm"),
]


def test_oss_is_group_to_runner_to_mean_ms():
    data = json.loads(fastrnns_json.render(RESULTS, "oss"))
    assert data == {"lstm": {"cudnn": 2.0, "jit": 2.0}, "lstm-backward": {"cudnn": 5.0}}


def test_pep_is_one_caffe2_observer_line_per_iteration_in_ms():
    lines = fastrnns_json.render(RESULTS, "pep").splitlines()
    assert len(lines) == 3 + 3 + 3  # cudnn fwd+bwd, jit fwd; failed results are no timings
    assert all(ln.startswith("Caffe2Observer {") for ln in lines)
    records = [json.loads(ln.split(" ", 1)[1]) for ln in lines]
    assert records[0] == {"type": "NET", "metric": "lstm-cudnn", "unit": "ms", "value": "1.0"}
    assert {r["metric"] for r in records} == {"lstm-cudnn", "lstm-backward-cudnn", "lstm-jit"}
    assert all(r["unit"] == "ms" for r in records)


def test_unknown_format_is_refused():
    with pytest.raises(ConfigError, match="sinks.fastrnns.format: 'csv' is not one of oss, pep"):
        fastrnns_json.FastrnnsJson(format="csv")
