"""`make gpu-check` (benchmarks/gpu_check.py) keeps working: its plumbing in CPU mode, run
from a copy of the tree with rnnexp on PYTHONPATH only, as on a GPU machine without a
package index; and a failed job is named with its reason in the report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import loop_spread  # noqa: E402


def tree_copy(tmp_path: Path) -> Path:
    """The tracked files, as `git archive` would hand them to another machine."""
    copy = tmp_path / "tree"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    return copy


@pytest.mark.slow
def test_the_check_runs_from_a_copy_of_the_tree_in_cpu_mode(tmp_path):
    copy = tree_copy(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(copy), "MLFLOW_TRACKING_URI": ""}
    proc = subprocess.run(
        [sys.executable, str(copy / "benchmarks" / "gpu_check.py"), "--device", "cpu",
         "--out", str(out), "--only", "default-run,upstream", "--upstream", ""],
        cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["default-run"]["status"] == "passed", steps["default-run"]
    assert steps["upstream"]["status"] == "skipped"
    assert "no upstream fastrnns copy" in steps["upstream"]["reason"]
    report = (out / "report.md").read_text()
    assert "| default-run | passed |" in report and "| upstream | skipped |" in report
    # The job ran from the copy, not from an installed rnnexp.
    result = json.loads((out / "steps" / "default-run" / "run" / "results.json").read_text())
    assert result["status"] == "ok" and result["verification"]["status"] == "passed"
    assert (out / "steps" / "default-run" / "run.log").exists()
    # ... and all of it once more in one file, for a machine that returns shallow folders.
    with tarfile.open(out / "steps.tar.gz") as tar:
        assert "steps/default-run/run/results.json" in tar.getnames()


def test_the_loop_alone_is_timed_under_every_variant_and_each_sample_kept(tmp_path):
    out = tmp_path / "spread.json"
    assert loop_spread.main(["--out", str(out), "--rounds", "2", "--iters", "3",
                             "--warmup", "1", "model=jit", "backend=jit", "shape=small"]) == 0
    result = json.loads(out.read_text())
    assert set(result["variants"]) == {"events", "host, synchronised", "events, 1 thread",
                                       "events, synchronised at each start"}
    for v in result["variants"].values():
        # every sample, in order, with its round: 2 rounds × 3 samples; no GPU, no clock
        assert [r for r, _, _, _ in v["samples"]] == [0, 0, 0, 1, 1, 1]
        assert all(f > 0 and b > 0 and mhz is None for _, f, b, mhz in v["samples"])
        assert v["forward"]["median_ms"] > 0 and v["forward"]["iqr_pct"] >= 0
    assert torch.get_num_threads() == result["threads"]  # the 1-thread variant put it back


def test_the_start_synchronised_clock_waits_before_each_start_only():
    calls = []

    class Clock:
        name = "fake"

        def sync(self):
            calls.append("sync")

        def mark(self):
            calls.append("mark")
            return len(calls)

    clock = loop_spread.StartSynchronised(Clock())
    for _ in range(4):  # forward start, end, backward start, end
        clock.mark()
    assert calls == ["sync", "mark", "mark", "sync", "mark", "mark"]


def test_a_failed_job_is_named_with_its_reason(tmp_path):
    args = gpu_check.argparse.Namespace(out=tmp_path, device="cpu", python=sys.executable,
                                        budget=60.0, step_timeout=60.0, upstream="")
    check = gpu_check.Check(args)
    step = gpu_check.Step("sweep")
    job = check.folder(step) / "lstm" / "0"
    job.mkdir(parents=True)
    (job / "results.json").write_text(json.dumps({
        "choices": {"model": "lstm", "backend": "cudnn"}, "overrides": ["shape.seq_len=8"],
        "status": "verification_failed", "backend": {"name": "cudnn"},
        "reason": "verification failed: output[0]: rms error 3e-06 = 40 × the reference "
                  "error 7.5e-08, allowed 5 × + floor 1e-08 (reference in float32)"}))
    done = subprocess.CompletedProcess([], 1, "", "error: 1 job failed")
    check.judge_jobs(step, "lstm", done, 2)
    assert step.status == "failed"
    assert step.failures[0].startswith("lstm·cudnn shape.seq_len=8: verification_failed: "
                                       "verification failed: output[0]: rms error 3e-06")
    assert step.failures[1] == "lstm: 1 of 2 jobs left a result (exit 1: error: 1 job failed)"
    text = gpu_check.report(check, [step], {"torch": "x"})
    assert "FAILED: sweep" in text and "rms error 3e-06" in text


def test_steps_past_the_budget_are_skipped_and_say_so(tmp_path):
    args = gpu_check.argparse.Namespace(out=tmp_path, device="cpu", python=sys.executable,
                                        budget=0.0, step_timeout=60.0, upstream="")
    steps = gpu_check.Check(args).run_all(["matrix"])
    assert steps[0].status == "skipped" and "out of time" in steps[0].reason


def test_unknown_steps_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        gpu_check.main(["--only", "matrx"])
    assert done.value.code == 2
    assert "--only/--skip: unknown step matrx — use one of gpu-tests" in capsys.readouterr().err
