"""One job from a validated config to a typed Result, in this process."""

from rnnexp.app.config_check import check
from rnnexp.machine.platform import Platform
from rnnexp.measure import job
from rnnexp.results.result import Result
from rnnexp.run import execution


def test_execute_records_verification_phases_and_what_ran(tmp_path):
    overrides = ["model=jit", "shape=small", "bench=quick", "device=cpu"]
    (cfg,) = check(overrides, multirun=False)
    result = execution.execute(job.plan(cfg, {"model": "jit", "backend": "auto"}, overrides))
    assert result.status == "ok" and result.verification.status == "passed"
    fwd, bwd = result.phases["forward"], result.phases["backward"]
    assert fwd.n == bwd.n == 3 and len(fwd.samples_ms) == 3
    assert fwd.median_ms > 0 and fwd.gflops > 0 and fwd.tokens_per_s > 0
    assert result.work.flops_bwd > result.work.flops_fwd > 0
    assert result.backend.name == "aten"  # auto on the CPU
    assert result.timing.timed_iters == 3 and result.platform.torch_version
    # results.json round-trips into the same typed record.
    assert Result.load(result.save(tmp_path)) == result


def test_results_of_schema_1_still_load(tmp_path):
    v1 = {"choices": {"model": "lstm"}, "overrides": [], "config": {}, "status": "ok",
          "backend": {"name": "aten", "onednn_available": True},
          "verification": {"status": "passed", "max_abs_error": 1e-6, "atol": 1e-4,
                           "rtol": 1e-3, "detail": ""},
          "work": {"flops_fwd": 1.0, "flops_bwd": 2.0, "bytes_fwd": 3.0, "bytes_bwd": 4.0,
                   "tokens": 5},
          "phases": {"forward": {"median_ms": 1.0, "iqr_ms": 0.1, "n": 3,
                                 "samples_ms": [1.0, 1.0, 1.0]},
                     "backward": {"not_applicable": "forward-only"}},
          "platform": {"torch_version": "2.13.0", "gpu_names": [],
                       "extra": {"git_commit": "abc"}},
          "timing": {"clock": "perf_counter", "warmup": 1, "iters": 3}, "schema": 1}
    r = Result.from_json(v1)
    assert r.git_commit == "abc" and r.backend.details == {"onednn_available": True}
    assert r.phases["forward"].median_ms == 1.0 and not r.phases["backward"].timed
    assert r.verification.max_abs_error == 1e-6 and r.work.tokens == 5
    assert r.platform.gpu_names == () and r.timing.clock == "perf_counter"


def test_a_gpu_platform_round_trips(tmp_path):
    plat = Platform(torch_version="2.13.0", cuda_version="12.8", gpu_count=2,
                    gpu_names=("A100", "V100"), gpu_capabilities=((8, 0), (7, 0)))
    r = Result(choices={}, overrides=[], config={}, status="ok", platform=plat)
    assert Result.load(r.save(tmp_path)).platform == plat
