"""Every backend either runs or stops before timing with its one-line reason.

Build decisions (cudnn/miopen/auto) are checked on simulated platforms; jit, te and inductor
run for real on this CPU; isolation is proven by the graphs each sweep job recorded.
"""

import json

import pytest
import torch

from rnnexp.app import config_check
from rnnexp.backends import torchscript
from rnnexp.backends.inductor import Inductor
from rnnexp.backends.torchscript import Jit, TensorExpr
from rnnexp.backends.vendor import Aten, Cudnn, Miopen
from rnnexp.config import schema
from rnnexp.errors import ConfigError, RnnexpError, UnsupportedError
from rnnexp.machine.platform import Platform
from rnnexp.measure import job
from rnnexp.run import execution
from tests.conftest import TINY, choices_of, compose_cfg, gpu

CPU_BUILD = Platform(torch_version="2.13.0+cpu", cpu_name="cpu")
CUDA_GPU = Platform(torch_version="2.13.0+cu128", cuda_version="12.8", gpu_count=1,
                    gpu_names=("NVIDIA H100",), cudnn_version=91000)
CUDA_NO_GPU = Platform(torch_version="2.13.0+cu128", cuda_version="12.8", cudnn_version=91000)
ROCM_GPU = Platform(torch_version="2.13.0+rocm7.0", hip_version="7.0", gpu_count=1,
                    gpu_names=("AMD MI300X",), cudnn_version=3400)


def plan(overrides, plat=None):
    cfg = compose_cfg(overrides)
    return job.plan(schema.validate(cfg), choices_of(cfg), overrides, plat=plat)


def refusal(overrides, plat=None) -> str:
    with pytest.raises(UnsupportedError) as err:
        plan(overrides, plat)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# --- vendor libraries: decisions on simulated builds ---------------------------------------

@pytest.mark.parametrize("plat, device, expected", [
    (CUDA_GPU, "cuda", Cudnn), (ROCM_GPU, "cuda", Miopen), (CPU_BUILD, "cpu", Aten),
    (CUDA_GPU, "cpu", Aten), (CUDA_NO_GPU, "auto", Aten), (ROCM_GPU, "auto", Miopen),
])
def test_auto_picks_the_vendor_library_of_the_device(plat, device, expected):
    p = plan(["backend=auto", f"device={device}"], plat)
    assert type(p.backend) is expected


def test_cudnn_records_its_version_and_tf32_setting():
    p = plan(["backend=cudnn", "device=cuda", "backend.allow_tf32=true"], CUDA_GPU)
    info = p.backend.info()
    assert info["cudnn"] == 91000 and info["cuda"] == "12.8"
    assert info["allow_tf32"] is True and info["vendor_library"] is True
    assert "cudnn_benchmark" not in info


@pytest.mark.parametrize("backend", ["cudnn", "miopen", "auto", "aten"])
def test_cudnn_benchmark_is_gone_it_never_reached_rnns(backend):
    # cuDNN's RNN algorithm comes from heuristics; the benchmark flag is never read.
    with pytest.raises(RnnexpError, match="backend.cudnn_benchmark"):
        config_check.check([f"backend={backend}", "backend.cudnn_benchmark=true"],
                           multirun=False)


@pytest.mark.parametrize("plat, device, expected", [
    (CPU_BUILD, "cpu", "backend=cudnn needs a CUDA build of PyTorch; this build is CPU-only "
                       "— use backend=aten"),
    (ROCM_GPU, "cuda", "backend=cudnn needs a CUDA build of PyTorch; this build is ROCm 7.0 "
                       "— use backend=miopen"),
    (CUDA_GPU, "cpu", "backend=cudnn runs on a GPU only; device is cpu — use device=cuda or "
                      "backend=aten"),
])
def test_cudnn_refusals(plat, device, expected):
    assert refusal(["backend=cudnn", f"device={device}"], plat) == expected


@pytest.mark.parametrize("plat, device, expected", [
    (CUDA_GPU, "cuda", "backend=miopen needs a ROCm build of PyTorch; this build is CUDA 12.8 "
                       "— use backend=cudnn"),
    (CUDA_GPU, "cpu", "backend=miopen needs a ROCm build of PyTorch; this build is CUDA 12.8 "
                      "— use backend=aten"),
    (CPU_BUILD, "cpu", "backend=miopen needs a ROCm build of PyTorch; this build is CPU-only "
                       "— use backend=aten"),
])
def test_miopen_refusals(plat, device, expected):
    assert refusal(["backend=miopen", f"device={device}"], plat) == expected


def test_miopen_on_rocm_gpu_records_miopen_version():
    p = plan(["backend=miopen", "device=cuda", "model=jit"], ROCM_GPU)
    assert p.backend.info()["miopen"] == 3400 and p.spec.script  # loop models are scripted


def test_miopen_explains_itself_on_the_command_line(run_cli):
    proc = run_cli("model=jit", "backend=miopen", *TINY)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["error: backend=miopen needs a ROCm build of PyTorch; this build is "
                     "CPU-only — use backend=aten"]


def test_aten_runs_the_scripted_loop():
    p = plan(["backend=aten", "model=jit", *TINY])
    assert p.spec.script
    result = execution.execute(p)
    assert result.status == "ok"
    # The executor's profiling/optimising runs happened before timing, untimed.
    assert result.backend.details["optimize_s"] > 0 and result.backend.details["warm_runs"] == 4
    # Pinned unfused flags and the graph it ran are recorded, as under backend=jit.
    assert result.backend.details["flags"]["texpr_fuser"] is False
    assert result.backend.details["graph"]["differentiable_graphs"] > 0


# --- jit / te: configuration ----------------------------------------------------------------

@pytest.mark.parametrize("override, field", [
    ("backend.executor=fast", "backend.executor"),
    ("backend.fuser=nnc", "backend.fuser"),
])
def test_bad_executor_or_fuser_fails_at_composition(override, field):
    with pytest.raises(RnnexpError) as err:
        config_check.check(["backend=jit", override], multirun=False)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_legacy_fuser_without_legacy_executor_is_refused():
    with pytest.raises(ConfigError) as err:
        config_check.check(["backend=jit", "backend.fuser=legacy"], multirun=False)
    assert str(err.value) == ("backend.fuser: legacy fuses only under the legacy executor, "
                              "not executor=profiling — set backend.executor=legacy, or "
                              "backend.fuser=none")


def test_executor_is_not_a_field_of_other_backends():
    with pytest.raises(RnnexpError, match="backend.executor"):
        config_check.check(["backend=aten", "backend.executor=legacy"], multirun=False)


@pytest.mark.parametrize("executor, fuser, expected", [
    ("profiling", "none", dict(profiling_executor=True, optimize=True, texpr_fuser=False,
                               fuse_on_cpu_legacy=False)),
    ("legacy", "none", dict(profiling_executor=False, optimize=True, fuse_on_cpu_legacy=False)),
    ("simple", "none", dict(optimize=False, texpr_fuser=False)),
    # The legacy fuser on the CPU needs its own switch, or it fuses nothing.
    ("legacy", "legacy", dict(profiling_executor=False, optimize=True, fuse_on_cpu_legacy=True,
                              texpr_fuser=False)),
])
def test_executor_and_fuser_flags(executor, fuser, expected):
    flags = Jit(CPU_BUILD, torch.device("cpu"), executor=executor, fuser=fuser).flags()
    for name, value in expected.items():
        assert getattr(flags, name) == value, name


def test_te_fuses_on_the_gpu_without_cpu_fusion():
    flags = TensorExpr(CUDA_GPU, torch.device("cuda")).flags()
    assert flags.profiling_executor and flags.texpr_fuser and flags.fuse_on_gpu
    assert not flags.fuse_on_cpu


@pytest.mark.parametrize("backend", ["jit", "te"])
def test_eager_model_under_torchscript_suggests_its_twin(backend):
    assert refusal([f"backend={backend}", "model=py"]) == (
        f"backend={backend} scripts cell-loop models; model=py is eager Python that is never "
        "scripted — use model=jit (its scripted twin)")


@pytest.mark.parametrize("backend", ["jit", "te"])
def test_module_model_under_torchscript_suggests_aten_or_a_loop_model(backend):
    msg = refusal([f"backend={backend}", "model=lstm"])
    assert "model=lstm is an nn module" in msg and "use backend=aten" in msg
    assert "model=jit" in msg


def test_te_probe_finds_no_llvm_on_this_cpu_build():
    probe = torchscript.llvm_probe()
    if probe["fuses"]:
        pytest.skip("this PyTorch build has LLVM: NNC fuses on the CPU")
    assert probe["error"] == "LLVM Backend not found"
    assert probe["llvm_enabled"] is False
    assert refusal(["backend=te", "model=jit", "device=cpu"]) == (
        "backend=te cannot fuse on the CPU: this PyTorch build has no LLVM (probe: LLVM "
        "Backend not found) — use backend=jit, backend=inductor or device=cuda")
    assert torchscript.llvm_probe() is probe  # probed once per process


def test_torchscript_backends_ask_for_isolation_and_others_do_not():
    assert plan(["backend=jit", "model=jit"]).backend.isolate
    assert not plan(["backend=aten", "model=jit"]).backend.isolate


# --- isolation: each sweep job runs under its own executor ---------------------------------

@pytest.mark.slow
def test_sweep_jobs_each_run_their_own_executor(run_here, tmp_path):
    # Inside one process, a legacy/simple job after a profiling one keeps running
    # profiling-executor graphs; each job must show its own executor's graph.
    order = ["profiling", "legacy", "simple"]
    proc = run_here("model=jit", "backend=jit", f"backend.executor={','.join(order)}", *TINY,
                    multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads((tmp_path / "sweep" / str(i) / "results.json").read_text())
               for i in range(len(order))]
    seen = {r["backend"]["executor"]: r["backend"] for r in results}
    assert [r["backend"]["executor"] for r in results] == order
    assert all(r["status"] == "ok" for r in results)
    prof, legacy, simple = seen["profiling"], seen["legacy"], seen["simple"]
    # The flags read back while each job ran.
    assert prof["flags"]["profiling_executor"] and prof["flags"]["optimize"]
    assert not legacy["flags"]["profiling_executor"] and legacy["flags"]["optimize"]
    assert not simple["flags"]["optimize"]
    # The graphs they ran: PE specialises behind guards; LE builds autodiff graphs without
    # guards; the simple executor builds neither. None fused (fusion is off in jit).
    assert prof["graph"]["guards"] > 0 and prof["graph"]["differentiable_graphs"] > 0
    assert legacy["graph"]["guards"] == 0 and legacy["graph"]["differentiable_graphs"] > 0
    assert simple["graph"]["guards"] == 0 and simple["graph"]["differentiable_graphs"] == 0
    assert not any(r["backend"]["graph"]["fused"] for r in results)


@pytest.mark.slow
def test_isolation_works_inside_joblib_workers(run_cli, tmp_path):
    # loky workers carry their own multiprocessing start method; the isolated child must
    # still start, and each job must still run its own executor.
    proc = run_cli("model=jit", "backend=jit", "backend.executor=profiling,legacy", *TINY,
                   "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(p.read_text())
               for p in sorted((tmp_path / "sweep").glob("*/results.json"))]
    assert [r["status"] for r in results] == ["ok", "ok"]
    flags = {r["backend"]["executor"]: r["backend"]["flags"] for r in results}
    assert flags["profiling"]["profiling_executor"]
    assert not flags["legacy"]["profiling_executor"]


def test_legacy_fuser_really_fuses_on_the_cpu():
    # job.execute: a fresh worker process, so earlier tests' TorchScript state cannot leak in.
    p = plan(["model=jit", "backend=jit", "backend.executor=legacy", "backend.fuser=legacy",
              *TINY])
    backend = execution.execute(p).backend.details
    assert backend["flags"]["fuse_on_cpu_legacy"]
    assert backend["graph"]["fusion_groups"] > 0 and backend["graph"]["fused"]


# --- inductor ------------------------------------------------------------------------------

def test_inductor_mode_is_validated():
    with pytest.raises(RnnexpError) as err:
        config_check.check(["backend=inductor", "backend.mode=fast"], multirun=False)
    assert str(err.value) == ("backend.mode: 'fast' is not one of default, reduce-overhead, "
                              "max-autotune")
    (cfg,) = config_check.check(["backend=inductor", "backend.mode=max-autotune"], False)
    assert cfg.backend.mode.value == "max-autotune"


def test_inductor_compiles_the_eager_formulation():
    p = plan(["backend=inductor", "model=jit"])
    assert not p.spec.script and not p.backend.script(p.cfg.model)


def test_inductor_refuses_nn_modules():
    """In one line that names the switch (a refusal leaves the program as this line, exit 2:
    tests/e2e/test_cli.py)."""
    msg = refusal(["backend=inductor", "model=lstm"])
    assert "model=lstm is an nn module that dynamo does not trace" in msg
    assert "backend.allow_rnn=true" in msg


@pytest.mark.slow
def test_inductor_runs_a_small_lstm_loop_and_reports_compile_time():
    # Two steps keep the unrolled loop (and the compile) short.
    p = plan(["backend=inductor", "model=py", *TINY, "shape.seq_len=2"])
    result = execution.execute(p)
    assert result.status == "ok" and result.verification.status == "passed"
    info = result.backend.details
    assert isinstance(p.backend, Inductor) and info["mode"] == "default"
    assert info["compile_s"] > 0 and info["graphs"] >= 1 and info["graph_breaks"] == 0
    assert "fx_cache_hits" in info


# --- GPU -----------------------------------------------------------------------------------

@pytest.mark.gpu
@gpu
def test_cudnn_runs_lstm_on_the_gpu():
    result = execution.execute(plan(["backend=cudnn", "model=lstm", "device=cuda", *TINY]))
    assert result.status == "ok", result.reason
    assert result.backend.details["cudnn"]
    assert result.timing.clock == "cuda_event"  # device events, not host time
    assert result.device.startswith("cuda")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("backend, model", [("aten", "lstm"), ("auto", "jit"),
                                            ("inductor", "jit")])
def test_backends_run_and_verify_on_the_gpu(backend, model):
    result = execution.execute(plan([f"backend={backend}", f"model={model}", "device=cuda", *TINY]))
    assert result.status == "ok", result.reason
    assert result.verification.status == "passed", result.verification.detail


@pytest.mark.gpu
@gpu
def test_te_fuses_on_the_gpu(run_cli, tmp_path):
    proc = run_cli("model=jit", "backend=te", "device=cuda", *TINY)
    assert proc.returncode == 0, proc.stderr
    backend = json.loads((tmp_path / "run" / "results.json").read_text())["backend"]
    # At shape=small (seq_len 8) the plan shows no group; the kernels that ran count.
    assert backend["tensorexpr_kernels"], backend
