"""bench.profile=true: a torch.profiler trace of extra iterations after timing, in the job
folder and in MLflow, with the top operators in results.json."""

from __future__ import annotations

import json

from rnnexp.results.result import Result
from tests.conftest import TINY, load_results
from tests.results.test_tracking import artifacts, runs_of


def test_a_profiled_job_has_its_trace_file_artifact_and_top_operators(run_here, tmp_path):
    proc = run_here(*TINY, "model=lstm", "bench.profile=true", "bench.profile_iters=2")
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "run")
    profile = result["profile"]
    assert profile["iters"] == 2 and profile["trace"] == "profile/trace.json"
    assert profile["sorted_by"] == "self CPU time"
    ops = profile["top_ops"]
    assert ops and all(op["self_ms"] > 0 for op in ops)
    assert [op["self_ms"] for op in ops] == sorted((op["self_ms"] for op in ops), reverse=True)
    assert any("lstm" in op["name"] or "rnn" in op["name"] for op in ops)

    trace = json.loads((tmp_path / "run" / "profile" / "trace.json").read_text())
    names = [e.get("name", "") for e in trace["traceEvents"]]
    # Only the extra iterations are traced: the timed ones (3 + 3 warmup) are not in it.
    assert sorted(n for n in names if n.startswith("iteration ")) == ["iteration 0",
                                                                      "iteration 1"]
    assert names.count("aten::lstm") == 2
    assert result["timing"]["timed_iters"] == 3

    client, _, [run] = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert "profile/trace.json" in artifacts(client, run.info.run_id)


def test_results_without_a_profile_still_load(tmp_path, run_here):
    proc = run_here(*TINY, "sinks=[json]")
    assert proc.returncode == 0, proc.stderr
    data = load_results(tmp_path / "run")
    assert "profile" not in data  # unprofiled results keep their earlier form
    assert Result.from_json(data).profile is None
    data["profile"] = {"iters": 1, "trace": "profile/trace.json", "sorted_by": "self CPU time",
                       "top_ops": [{"name": "aten::mm", "calls": 2, "self_ms": 1.0,
                                    "total_ms": 1.5}], "from_a_later_version": True}
    loaded = Result.from_json(data)
    assert loaded.profile.top_ops[0]["name"] == "aten::mm"
    assert Result.from_json(json.loads(json.dumps(loaded.to_json()))).profile == loaded.profile
