"""bench.metric=instructions: the refusals before anything is built, the client requests
outside Valgrind, and (slow) a sweep counted under Callgrind whose planted change the
regression gate catches."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from rnnexp.analysis import significance
from rnnexp.config import schema
from rnnexp.errors import ConfigError
from rnnexp.measure import callgrind, job
from tests.backends.test_backends import CUDA_GPU
from tests.conftest import ROOT, TINY, choices_of, compose_cfg


def plan(overrides, plat=None):
    cfg = compose_cfg(overrides)
    return job.plan(schema.validate(cfg), choices_of(cfg), overrides, plat=plat)


def test_counting_is_one_thread_and_other_thread_counts_are_refused():
    cfg = schema.validate(compose_cfg([*TINY, "bench.metric=instructions"]))
    assert cfg.bench.num_threads == 1
    with pytest.raises(ConfigError, match="^bench.num_threads: .*counts one thread"):
        schema.validate(compose_cfg(["bench.metric=instructions", "bench.num_threads=2"]))
    with pytest.raises(ConfigError, match="^bench.count_iters: must be ≥ 1"):
        schema.validate(compose_cfg(["bench.metric=instructions", "bench.count_iters=0"]))


def test_a_gpu_job_is_refused_before_anything_is_built():
    with pytest.raises(ConfigError) as err:
        plan([*TINY, "device=cuda", "bench.metric=instructions"], CUDA_GPU)
    assert str(err.value).startswith("bench.metric: instructions counts a CPU's")
    assert "bench.metric=time" in str(err.value)


def test_without_valgrind_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH holding no valgrind
    with pytest.raises(ConfigError) as err:
        plan([*TINY, "bench.metric=instructions"])
    line = str(err.value)
    assert line.startswith("bench.metric: ") and "make valgrind" in line and "\n" not in line


def test_client_requests_are_no_ops_outside_valgrind():
    assert not callgrind.running()
    assert callgrind._request(callgrind.TOGGLE_COLLECT, 7) == 7  # the default comes back


def test_the_warm_up_is_not_counted_until_the_clock_starts(tmp_path):
    # Before start() (the warm-up: uninstrumented under Valgrind) a region counts nothing
    # and asks Valgrind for nothing: no dump is written.
    clock = callgrind.Clock(str(tmp_path / "callgrind.out"))
    first = clock.mark()
    assert clock.elapsed_ms(first, clock.mark()) == 0
    assert not clock.started and list(tmp_path.iterdir()) == []


def tunables(env: dict) -> dict:
    return dict(t.split("=") for t in env["GLIBC_TUNABLES"].split(":"))


def test_counting_pins_the_heap_allocator_with_the_isa_and_timing_the_isa_alone():
    # glibc's per-thread cache serves every small chunk: without it malloc's bin searches
    # move counts by up to ~1% between iterations.
    counting, timing = tunables(callgrind.COUNTING_ENV), tunables(callgrind.PINNED_ENV)
    assert counting["glibc.malloc.tcache_count"] == "65535"
    assert counting["glibc.cpu.hwcaps"] == timing["glibc.cpu.hwcaps"]
    assert timing["glibc.cpu.hwcaps"].startswith("-AVX512F")
    assert not any(k.startswith("glibc.malloc") for k in timing)


GROWTH = """
import psutil, torch
from rnnexp.config.schema import validate
from rnnexp.measure import job
from tests.conftest import choices_of, compose_cfg
torch.set_num_threads(1)
cfg = compose_cfg(["model=jit", "backend=aten", "device=cpu", "shape.hidden_size=128",
                   "shape.input_size=128", "shape.batch_size=64", "shape.seq_len=100"])
p = job.plan(validate(cfg), choices_of(cfg))
w = job.build_workload(p.cfg, p.spec)
rss = []
for _ in range(6):
    w.zero_grad()
    w.backward(*w.backward_setup(w.run_forward()))
    rss.append(psutil.Process().memory_info().rss)
print(rss[-1] - rss[2])
"""


def test_a_calibration_worker_s_memory_stays_flat(tmp_path):
    """The timing workers' settings let iterations of a scripted loop reuse their memory:
    with the counting workers' allocator cache each iteration at this shape added ~120 MiB
    (~0.8 GiB at the default shape, until the kernel killed the workers)."""
    env = {**os.environ, **callgrind.PINNED_ENV, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", GROWTH], env=env, capture_output=True,
                         text=True, check=True, cwd=tmp_path)
    assert int(out.stdout.strip()) < 64 * 2**20, out.stdout


def test_time_jobs_keep_the_default_metric_and_no_pinning():
    cfg = schema.validate(compose_cfg(TINY))
    assert cfg.bench.metric == schema.Metric.time and cfg.bench.num_threads is None


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("valgrind"), reason="no valgrind: `make valgrind`")
def test_a_counted_sweep_records_counts_and_the_gate_catches_a_planted_change(run_cli,
                                                                                tmp_path):
    # Two sequence lengths, counted after two warm-ups: the profiling executor optimises on
    # its second call, so counting from the third (the cheapest counting that has settled).
    proc = run_cli(*TINY, "model=jit_premul", "backend=aten", "shape.seq_len=8,9",
                   "bench.metric=instructions", "bench.warmup=2", "bench.count_iters=2",
                   multirun=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = sorted((tmp_path / "sweep").glob("*/results.json"))
    counted = [json.loads(p.read_text()) for p in results]
    assert len(counted) == 2
    for data in counted:
        assert data["status"] == "ok"
        assert data["config"]["bench"]["num_threads"] == 1
        ins = data["instructions"]
        assert ins["env"]["ATEN_CPU_CAPABILITY"] == "avx2"
        for phase in ("forward", "backward", "total"):
            c = ins["phases"][phase]
            assert len(c["samples"]) == 2 and c["low"] <= c["median"] <= c["high"]
            assert c["ns_per_instruction"] > 0
            # Iterations of one process repeat within the tolerance compare judges counts
            # with. At eight steps an iteration's fixed part (Python, autograd's set-up)
            # weighs most, and it moves by a few thousand instructions between iterations
            # (up to 0.16% measured here; ≤ 0.08% at a hundred steps: docs/benchmarks.md).
            assert c["high"] - c["low"] <= significance.COUNT_TOLERANCE * c["median"]
    by_seq = {d["config"]["shape"]["seq_len"]: d for d in counted}
    assert by_seq[9]["instructions"]["phases"]["forward"]["median"] > \
        by_seq[8]["instructions"]["phases"]["forward"]["median"]
    gate = subprocess.run(
        [sys.executable, "-m", "rnnexp", "compare", str(tmp_path / "sweep"),
         "--baseline", "shape.seq_len=8", "--fail-on-regression", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert gate.returncode == 3, gate.stdout + gate.stderr
    lines = [ln for ln in gate.stderr.splitlines() if "regression:" in ln]
    assert [" fwd " in ln for ln in lines].count(True) == 1  # seq 9 over seq 8, each phase
    assert [" bwd " in ln for ln in lines].count(True) == 1
    assert all("instruction counts" in ln for ln in lines)


def test_dump_folders_of_processes_that_are_gone_are_removed(tmp_path):
    """A SIGKILLed sweep leaves its counting workers' dump folders; the next counting worker's
    folder is made after removing those whose owner no longer runs — never a running one's."""
    from rnnexp.measure import callgrind

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f"{callgrind.DUMPS_PREFIX}{gone.stdout.strip()}-x1"
    mine = tmp_path / f"{callgrind.DUMPS_PREFIX}{os.getpid()}-x2"
    other = tmp_path / f"{callgrind.DUMPS_PREFIX}keep"  # not named after a process
    for folder in (dead, mine, other):
        folder.mkdir()
        (folder / "callgrind.out.1").write_text("x")
    assert callgrind.remove_orphans(tmp_path) == [dead]
    assert not dead.exists() and mine.is_dir() and other.is_dir()
