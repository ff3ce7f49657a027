"""End to end: `python -m rnnexp` as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, load_results


def test_small_run_prints_table_and_writes_results(run_cli, tmp_path):
    proc = run_cli(*TINY)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "fwd ms" in out and "bwd ms" in out and "lstm" in out
    assert "timed" in out  # the progress bar
    data = load_results(tmp_path / "run")
    assert data["status"] == "ok"
    assert data["choices"]["model"] == "lstm" and data["choices"]["backend"] == "auto"
    assert data["backend"]["name"] == "aten"  # auto on a CPU
    assert data["device"] == "cpu" and data["device_name"]
    assert data["verification"]["status"] == "passed"
    for phase in ("forward", "backward", "total"):
        p = data["phases"][phase]
        assert len(p["samples_ms"]) == p["n"] == 3
        assert p["min_ms"] <= p["median_ms"] <= max(p["samples_ms"])
        for key in ("iqr_ms", "mean_ms", "std_ms", "p10_ms", "p90_ms", "cv", "tokens_per_s",
                    "gflops", "gbps"):
            assert key in p
    assert data["platform"]["torch_version"]
    assert data["config"]["shape"]["hidden_size"] == 32
    assert data["overrides"] == TINY
    assert not (tmp_path / "run" / "rnnexp.log").exists()  # Hydra's log file stayed empty


def test_bad_value_is_one_line_and_nothing_runs(run_cli, tmp_path):
    proc = run_cli("shape.hidden_size=-3")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["error: shape.hidden_size: must be ≥ 1, got -3"]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()


def test_unknown_model_is_one_line(run_cli):
    proc = run_cli("model=nope")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: model=nope: no such option")


def test_unavailable_backend_is_declined_before_timing(run_cli, tmp_path):
    proc = run_cli(*TINY, "backend=cudnn")
    assert proc.returncode == 2
    assert "backend=cudnn needs a CUDA build" in proc.stderr
    assert "timed" not in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sweep_runs_each_job_and_declines_what_cannot_run(run_cli, tmp_path):
    proc = run_cli("model=lstm,py", "backend=aten,cudnn", *TINY, multirun=True)
    assert proc.returncode == 0, proc.stderr
    files = sorted((tmp_path / "sweep").glob("*/results.json"))
    results = [json.loads(p.read_text()) for p in files]
    assert len(results) == 4
    by_status = {}
    for r in results:
        by_status.setdefault(r["status"], []).append(r["choices"]["backend"])
    assert sorted(by_status["ok"]) == ["aten", "aten"]
    assert sorted(by_status["unsupported"]) == ["cudnn", "cudnn"]


def test_bad_job_in_sweep_stops_it_before_any_job_runs(run_cli, tmp_path):
    proc = run_cli("model=lstm,nope", *TINY, multirun=True)
    assert proc.returncode == 2
    assert not list((tmp_path).glob("sweep/*/results.json"))


def test_the_program_ends_with_its_code_after_threads_and_exit_handlers(tmp_path):
    """`python -m rnnexp` skips the interpreter's teardown, not what Python does before it:
    an idle thread pool (inductor keeps one) is stopped rather than waited on forever, a
    running non-daemon thread finishes, exit handlers run."""
    marker = tmp_path / "marker"
    script = f"""
import atexit, threading, time
from concurrent.futures import ThreadPoolExecutor
ThreadPoolExecutor(2).submit(int).result()
note = lambda text: open({str(marker)!r}, "a").write(text)
threading.Thread(target=lambda: (time.sleep(0.3), note("thread "))).start()
atexit.register(lambda: note("atexit"))
from rnnexp.app.quick_exit import exit_now
exit_now(3)
"""
    proc = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert proc.returncode == 3
    assert marker.read_text() == "thread atexit"
    message = subprocess.run([sys.executable, "-c", "from rnnexp.app.quick_exit import exit_now; "
                              "exit_now('no such thing')"], capture_output=True, text=True)
    assert message.returncode == 1 and "no such thing" in message.stderr


def test_a_mistyped_option_gets_did_you_mean(run_cli):
    proc = run_cli("model=lstmm")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: model=lstmm: no such option — did you mean lstm? "
                                   "(all 21: rnnexp --help)")


def rnnexp_script() -> str:
    """The console script pip installed beside this interpreter."""
    script = Path(sys.executable).parent / "rnnexp"
    assert script.is_file(), "pip install -e . installs the rnnexp command"
    return str(script)


def test_help_is_the_projects_page(tmp_path):
    proc = subprocess.run([rnnexp_script(), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout
    assert page.startswith("rnnexp — how fast recurrent networks run in PyTorch")
    assert "Examples:" in page and page.count("\n  rnnexp ") >= 5
    for group in ("model", "backend", "shape", "device", "bench", "+experiment"):
        assert f"\n  {group} " in page
    assert "jit_premul_bias" in page  # the options of each group
    # Nothing internal: no schema nodes, no DeepBench fields, not Hydra's own page.
    assert "schema/" not in page and "deepbench.hidden" not in page
    assert "powered by Hydra" not in page


def test_shell_completion_works_through_the_rnnexp_command(tmp_path):
    script = rnnexp_script()
    install = subprocess.run([script, "-sc", "install=bash"], capture_output=True, text=True,
                             timeout=120)
    assert install.stdout.rstrip().endswith("-F hydra_bash_completion rnnexp")
    line = "rnnexp model=jit_p"
    query = subprocess.run([script, "-sc", "query=bash"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path,
                           env={**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line))})
    assert query.stdout.split() == ["model=jit_premul", "model=jit_premul_bias"]
