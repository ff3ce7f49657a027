"""Issue 13: GPU paths read against PyTorch's source, checked here on simulated platforms,
patched torch queries or the CPU analogue; the `gpu`-marked tests at the end confirm each
point on real hardware (`make test-gpu`, README "On a GPU")."""

import inspect
import re
from dataclasses import replace

import pytest
import torch

from rnnexp.app import config_check
from rnnexp.backends import jitflags
from rnnexp.backends.inductor import Inductor
from rnnexp.backends.scripting import UNFUSED, ScriptedRun
from rnnexp.backends.torchscript import TensorExpr
from rnnexp.backends.vendor import Aten, Cudnn, Miopen
from rnnexp.config import schema
from rnnexp.config.schema import ShapeConfig
from rnnexp.errors import ConfigError, RnnexpError, UnsupportedError
from rnnexp.machine import emulation, environment, memory, platform
from rnnexp.measure import job
from rnnexp.measure import verify as verify_mod
from rnnexp.measure.timing import CudaEventClock, measure
from rnnexp.measure.verify import verify
from rnnexp.models import native
from rnnexp.models.workload import WorkloadSpec
from rnnexp.run import execution
from tests.backends.test_backends import CUDA_GPU, ROCM_GPU, plan, refusal
from tests.conftest import TINY, compose_cfg, gpu

AMPERE = replace(CUDA_GPU, gpu_names=("NVIDIA A100",), gpu_capabilities=((8, 0),),
                 cudnn_version=91300)
VOLTA = replace(CUDA_GPU, gpu_names=("Tesla V100",), gpu_capabilities=((7, 0),))
# Two GPUs: the chosen one, not GPU 0, decides.
MIXED = replace(CUDA_GPU, gpu_count=2, gpu_names=("Tesla V100", "NVIDIA A100"),
                gpu_capabilities=((7, 0), (8, 0)), cudnn_version=91300)
CUDNN_BROKEN = replace(CUDA_GPU, cudnn_version=None, cudnn_error=(
    "cuDNN version 91100 is not compatible with devices with SM < 7.5. Please install a "
    "version of PyTorch with a compatible cuDNN version."))
CUDA = torch.device("cuda", 0)
SMALL = ShapeConfig(seq_len=3, num_layers=2, input_size=4, hidden_size=4, batch_size=2)


def cpu_workload(overrides):
    p = plan([*overrides, *TINY])
    return p, job.build_workload(p.cfg, p.spec)


# --- 1. lstm_dropout is verified in training mode with p=0 ---------------------------------

def test_dropout_model_is_verified_in_training_mode_with_dropout_zero():
    spec = WorkloadSpec(shape=SMALL, device=torch.device("cpu"), dtype=torch.float32, seed=0)
    workload = native.lstm(spec, dropout=0.4)
    module = workload.modules[0]
    with workload.verify_context():
        # cuDNN/MIOpen refuse a backward after an eval-mode forward.
        assert module.training and module.dropout == 0.0
    assert module.training and module.dropout == 0.4
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "passed" and "training mode" in result.detail


# --- 2. torch.backends.cudnn.version() may raise -------------------------------------------

def test_a_raising_cudnn_version_is_recorded_not_fatal(monkeypatch):
    def version():
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against "
                           "(9, 10, 2) but found runtime version (9, 1, 0).\nmore")

    # torch.backends.cudnn wraps its module (PropModule): patch the function flags() calls.
    monkeypatch.setattr(torch.backends.cudnn.m, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", version)
    platform.current.cache_clear()
    try:
        plat = platform.current()
    finally:
        platform.current.cache_clear()
    assert plat.cudnn_version is None
    assert plat.cudnn_error.startswith("cuDNN version incompatibility")
    assert "\n" not in plat.cudnn_error
    assert plan(["model=lstm", "backend=aten", "device=cpu"], plat)  # CPU jobs still run


@pytest.mark.parametrize("backend", ["cudnn", "miopen"])
def test_vendor_backends_refuse_with_the_library_error(backend):
    plat = CUDNN_BROKEN if backend == "cudnn" else replace(
        ROCM_GPU, cudnn_version=None, cudnn_error="cuDNN version incompatibility: ...")
    library = "cuDNN" if backend == "cudnn" else "MIOpen"
    assert refusal([f"backend={backend}", "device=cuda"], plat) == (
        f"backend={backend} cannot use {library}: {plat.cudnn_error} — use backend=aten")


def test_auto_falls_back_to_aten_and_says_why_when_cudnn_cannot_load():
    backend = plan(["backend=auto", "device=cuda"], CUDNN_BROKEN).backend
    assert isinstance(backend, Aten)
    assert backend.info()["auto"] == f"cuDNN unusable: {CUDNN_BROKEN.cudnn_error}"


# --- 3. vendor backends time the vendor kernel or refuse -----------------------------------

def test_miopen_refuses_bfloat16_rnns_but_not_cell_loops():
    assert refusal(["backend=miopen", "device=cuda", "model=lstm", "dtype=bfloat16"],
                   ROCM_GPU) == (
        "backend=miopen runs RNNs in float32 and float16 only; with bfloat16 PyTorch would run "
        "its native kernels — use dtype=float16 or backend=aten")
    assert plan(["backend=miopen", "device=cuda", "model=jit", "dtype=bfloat16"], ROCM_GPU)


def test_cudnn_bfloat16_rnns_need_cudnn_9_13_and_sm80():
    msg = refusal(["backend=cudnn", "device=cuda", "model=gru", "dtype=bfloat16"], CUDA_GPU)
    assert msg.startswith("backend=cudnn runs bfloat16 RNNs only with cuDNN >= 9.13 on SM >= "
                          "8.0 (here cuDNN 91000")
    p = plan(["backend=cudnn", "device=cuda", "model=gru", "dtype=bfloat16"], AMPERE)
    assert isinstance(p.backend, Cudnn)


@pytest.mark.parametrize("cls, plat, kernel", [(Cudnn, CUDA_GPU, "aten::_cudnn_rnn"),
                                               (Miopen, ROCM_GPU, "aten::miopen_rnn")])
def test_vendor_backend_refuses_when_its_kernel_did_not_run(cls, plat, kernel):
    # The CPU analogue of a native fallback: nn.LSTM here runs PyTorch's CPU kernels.
    _, workload = cpu_workload(["model=lstm", "backend=aten"])
    backend = cls(plat, torch.device("cpu"))
    with pytest.raises(UnsupportedError) as err:
        backend.prepare(workload)
    msg = str(err.value)
    assert msg.startswith(f"backend={cls.name} asked for {cls.library} but PyTorch ran ")
    assert msg.endswith(f"instead of {kernel} (its native fallback) — use backend=aten")


def test_aten_records_the_rnn_kernels_that_ran():
    result = execution.execute(plan(["backend=aten", "model=lstm", *TINY]))
    ops = result.backend.details["rnn_ops"]
    assert ops and not {"aten::_cudnn_rnn", "aten::miopen_rnn"} & set(ops)


# --- 4. TF32 is an explicit cuDNN option, off by default, recorded --------------------------

def cudnn_plan(*overrides, plat=AMPERE):
    return plan(["backend=cudnn", "device=cuda", *overrides], plat).backend


@pytest.mark.parametrize("allow", [False, True])
def test_cudnn_sets_tf32_explicitly(allow):
    backend = cudnn_plan("model=lstm", f"backend.allow_tf32={allow}")
    with backend.flags_context()[0]:  # cudnn.flags() alone would default to True
        assert torch.backends.cudnn.allow_tf32 is allow
    info = backend.info()
    assert info["allow_tf32"] is allow and info["tf32_effective"] is allow


def test_tf32_takes_effect_only_for_float32_on_sm80():
    tf32 = "backend.allow_tf32=true"
    assert not cudnn_plan("model=lstm", tf32, plat=VOLTA).info()["tf32_effective"]
    assert not cudnn_plan("model=lstm", tf32, "dtype=float16").info()["tf32_effective"]


def test_tf32_is_not_claimed_for_cell_loops_whose_matmuls_are_cublas():
    # issue 24, 3: cudnn.allow_tf32 reaches cuDNN's RNN kernel only; a jit* loop's matmuls
    # are cuBLAS's, pinned to full FP32.
    assert cudnn_plan("model=lstm", "backend.allow_tf32=true").info()["tf32_effective"]
    assert not cudnn_plan("model=jit", "backend.allow_tf32=true").info()["tf32_effective"]


def tf32_lstm(seq_len=10, hidden=128):
    """An nn.LSTM whose forward computes as cuDNN with allow_tf32 does: matmul operands
    rounded to TF32 (simulated on the CPU, oneDNN's fused kernel off so they are visible).
    Ten steps: TF32's error is already ~700× a float32 reference's (50 steps: as large, at
    five times the emulated matmuls' cost)."""
    shape = ShapeConfig(seq_len=seq_len, num_layers=1, input_size=64, hidden_size=hidden,
                        batch_size=4)
    spec = WorkloadSpec(shape=shape, device=torch.device("cpu"), dtype=torch.float32, seed=0)
    workload = native.lstm(spec)
    forward = workload.forward

    def tf32_forward(*args):
        with emulation.arithmetic(emulation.TF32, torch.float32):
            return forward(*args)

    workload.forward = tf32_forward
    return workload


def test_a_tf32_lstm_is_verified_against_a_tf32_reference():
    workload = tf32_lstm()
    native_rule = verify(workload, torch.float32, backward=True)
    assert native_rule.status == "failed"  # a float32 reference: far tighter than TF32
    workload.reference_math = cudnn_plan("model=lstm", "backend.allow_tf32=true"
                                         ).reference_math()  # what Cudnn.prepare sets
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail
    assert result.reference_math == "tf32" and result.floor > native_rule.floor


def test_the_tf32_reference_still_catches_a_wrong_weight():
    workload = tf32_lstm()
    workload.reference_math = emulation.TF32
    w_ih, H = workload.params[0], 128
    with torch.no_grad():  # a planted fault: the input and forget gates' weights swapped
        w_ih[:2 * H] = torch.cat([w_ih[H:2 * H], w_ih[:H]]).clone()
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "failed" and "TF32 matmuls" in result.detail


@pytest.mark.parametrize("backend", ["aten", "miopen", "jit", "te", "inductor"])
def test_tf32_is_refused_at_composition_by_backends_without_it(backend):
    with pytest.raises(RnnexpError, match="backend.allow_tf32"):
        config_check.check([f"backend={backend}", "backend.allow_tf32=true"], multirun=False)


def test_auto_refuses_tf32_where_it_picks_another_library():
    assert refusal(["backend=auto", "device=cuda", "backend.allow_tf32=true"], ROCM_GPU) == (
        "backend=miopen has no TF32 option (backend.allow_tf32 is for cuDNN) — use "
        "backend.allow_tf32=false")


# --- issue 24, 4: float32 matmuls pinned to full FP32 and recorded -------------------------

@pytest.fixture(params=["float32_matmul_precision", "fp32_precision"])
def tf32_matmuls_asked(request):
    """TF32 matmuls asked for through either of torch's two APIs: the legacy one is what
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 sets at start-up (float32_matmul_precision "high")."""
    matmul = torch.backends.cuda.matmul
    if request.param == "fp32_precision":
        matmul.fp32_precision = "tf32"
    else:
        torch.set_float32_matmul_precision("high")
    yield
    if request.param == "fp32_precision":
        matmul.fp32_precision = "none"
    else:
        torch.set_float32_matmul_precision("highest")
    assert torch.get_float32_matmul_precision() == "highest"  # later tests see the default


@pytest.mark.parametrize("overrides", [["backend=aten", "model=lstm"],
                                       ["backend=jit", "model=jit"],
                                       ["backend=inductor", "model=py"]])
def test_float32_matmuls_run_full_fp32_under_every_backend_and_say_so(overrides,
                                                                       tf32_matmuls_asked):
    backend = plan([*overrides, *TINY]).backend
    with backend.context():
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # the user's, given back
    assert backend.info()["matmul_fp32_precision"] == "ieee"


# --- 6. bfloat16 on the chosen GPU; the chosen GPU is the current one ----------------------

def test_bfloat16_is_refused_on_a_gpu_below_sm80():
    assert refusal(["backend=aten", "device=cuda", "dtype=bfloat16"], VOLTA) == (
        "dtype=bfloat16: Tesla V100 (SM 7.0) has no native bfloat16 (needs SM >= 8.0) — use "
        "dtype=float16 or float32")


def test_bfloat16_asks_about_the_chosen_gpu_not_gpu0():
    assert plan(["backend=aten", "device=cuda", "device.index=1", "dtype=bfloat16"], MIXED)
    assert "Tesla V100" in refusal(["backend=aten", "device=cuda", "dtype=bfloat16"], MIXED)


def test_the_chosen_gpu_is_current_while_the_job_runs(monkeypatch):
    entered = []

    class Device:  # torch.cuda.device records what would be made current
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            entered.append("restored")

    monkeypatch.setattr(torch.cuda, "device", Device)
    with Aten(MIXED, torch.device("cuda", 1)).context():
        assert entered == [torch.device("cuda", 1)]
    assert entered[-1] == "restored"


# --- 7. scripted loops run under pinned jit flags; te refuses an unfused graph -------------

@pytest.mark.parametrize("backend", ["aten", "auto"])
def test_vendor_backends_pin_unfused_jit_flags(backend):
    p = plan([f"backend={backend}", "model=jit_premul", *TINY])
    with p.backend.context():
        assert jitflags.read() == UNFUSED  # TorchScript's default fuses on a GPU


def test_te_refuses_a_graph_without_tensorexpr_groups():
    class NoFusionHere(TensorExpr):  # what NNC does on a GPU when it declines (bf16, ROCm)
        def flags(self):
            return replace(super().flags(), fuse_on_cpu=False)

    _, workload = cpu_workload(["model=jit", "backend=jit"])
    te = NoFusionHere(CUDA_GPU, torch.device("cpu"))
    with te.context(), pytest.raises(UnsupportedError) as err:
        te.prepare(workload)
    assert str(err.value) == (
        "backend=te ran no TensorExpr kernel for this model on cpu with dtype=float32 (NNC "
        "declined every fusion group); its graph would run unfused — use backend=jit")


# --- 8. first-call costs -------------------------------------------------------------------

def test_every_model_gets_an_untimed_first_call_in_prepare():
    p, workload = cpu_workload(["model=lstm", "backend=aten"])
    calls = []
    forward = workload.forward
    workload.forward = lambda *a: calls.append(1) or forward(*a)
    p.backend.prepare(workload)  # not scripted: before, prepare ran nothing
    assert len(calls) >= 1 and p.backend.info()["first_call_s"] > 0


def test_warm_up_synchronises_the_gpu_before_reading_the_clock(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    _, workload = cpu_workload(["model=jit", "backend=aten"])
    backend = Aten(CUDA_GPU, CUDA)
    backend.prepare(workload)
    # Each untimed call's time is read after a synchronise (rnnexp.models.compile_cost).
    assert synced == [CUDA] * ScriptedRun.RUNS and backend.info()["optimize_s"] > 0
    assert len(backend.untimed_ms) == ScriptedRun.RUNS


class Steps:
    def __init__(self, log, backward=True):
        self.log = log
        self.has_backward = backward
        self.backward_setup = (lambda out: ()) if backward else None
        self.backward = (lambda: log.append("backward")) if backward else None

    def run_forward(self):
        self.log.append(("forward", torch.is_grad_enabled()))

    def zero_grad(self):
        pass


@pytest.mark.parametrize("has_backward, backward, grad", [
    (False, True, False), (True, False, False), (True, True, True)])
def test_forward_only_runs_are_timed_without_autograd(has_backward, backward, grad):
    log = []
    measure(Steps(log, has_backward), warmup=1, iters=3, clock=_HostClock(), backward=backward)
    assert {g for what, g in (e for e in log if e != "backward")} == {grad}


class _HostClock:
    name = "host"

    def mark(self):
        return 0.0

    def sync(self):
        pass

    def elapsed_ms(self, start, end):
        return 1.0


def test_cuda_events_are_created_before_the_timed_region(monkeypatch):
    log = []

    class Event:  # torch.cuda.Event: the CUDA event is created at its first record
        def __init__(self, enable_timing=False):
            self.created = False

        def record(self, stream=None):
            if not self.created:
                self.created = True
                log.append("create")
            log.append("record")

        def elapsed_time(self, other):
            return 1.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    measure(Steps(log), warmup=1, iters=2, clock=CudaEventClock(CUDA))
    # Arming logs ("create", "record") pairs; a mark inside the timed region a lone "record".
    marks = [i for i, e in enumerate(log) if e == "record" and log[i - 1] != "create"]
    assert len(marks) == 12 and log.count("create") == 12, log
    for i in range(0, 12, 4):  # an iteration: forward start … backward end
        assert "create" not in log[marks[i]:marks[i + 3] + 1], log


# --- issue 24, 10: small things ------------------------------------------------------------

def test_entering_miopen_does_not_touch_the_benchmark_limit(monkeypatch):
    """ROCm's _cuda_set_cudnn_benchmark_limit warns "Benchmark limit not supported in MIOpen";
    torch.backends.cudnn.flags() sets it on entry and again on exit."""
    touched = []
    # torch.backends.cudnn wraps its module (PropModule): patch the function flags() calls.
    monkeypatch.setattr(torch.backends.cudnn.m, "is_available", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_get_cudnn_benchmark_limit", lambda: 10, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_set_cudnn_benchmark_limit", touched.append,
                        raising=False)
    backend = Miopen(ROCM_GPU, CUDA)
    enabled = torch.backends.cudnn.enabled
    with backend.flags_context()[0]:
        assert torch.backends.cudnn.enabled is True and not torch.backends.cudnn.benchmark
    assert touched == [] and torch.backends.cudnn.enabled is enabled
    with Aten(ROCM_GPU, CUDA).flags_context()[0]:
        assert torch.backends.cudnn.enabled is False
    assert touched == []


def test_a_compiled_module_on_a_gpu_records_no_onednn():
    assert "onednn" not in Inductor(CUDA_GPU, CUDA, allow_rnn=True).info()
    assert Inductor(CUDA_GPU, torch.device("cpu"), allow_rnn=True).info()["onednn"] is False


def test_submitits_local_executor_sets_cuda_visible_devices():
    """placement relies on it: the issue's CUDA_AVAILABLE_DEVICES is not what it sets."""
    from submitit.local import local

    source = inspect.getsource(local.start_controller)
    assert "CUDA_VISIBLE_DEVICES=cuda_devices" in source
    assert "CUDA_AVAILABLE_DEVICES" not in inspect.getsource(local)


# --- issue 24, 2: CUDA graphs are never recorded inside the timed samples -----------------

@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cudagraph_modes_refuse_a_model_whose_sizes_change_every_call(mode):
    job = ["backend=inductor", f"backend.mode={mode}", "model=dynamic_eltwise", "device=cuda"]
    assert refusal(job, CUDA_GPU) == (
        f"backend=inductor mode={mode} records a CUDA graph for each new input size, and "
        "model=dynamic_eltwise changes sizes every call (dynamic shapes): the recordings "
        "would land in the timed samples — use backend.mode=default")
    assert plan(["backend=inductor", f"backend.mode={mode}", "model=eltwise", "device=cuda"],
                CUDA_GPU)  # static sizes: one recording, before timing
    assert plan([*job[:-1], "device=cpu"])  # no CUDA graphs on the CPU


# --- issue 24, 8: a half-precision reference the CPU would take hours over ----------------

DEEPBENCH = ["shape.seq_len=50", "shape.batch_size=64", "shape.input_size=2048",
             "shape.hidden_size=2048", "shape.num_layers=1"]


def test_a_slow_float16_reference_is_emulated_and_says_how_long_it_would_take(monkeypatch):
    # An AMD EPYC without AVX512-FP16: float16 mm at 0.5 GFLOP/s (float32: ~20).
    monkeypatch.setattr(verify_mod, "cpu_gflops", lambda dtype: 0.5)
    job = ["model=lstm", "backend=cudnn", "device=cuda", "dtype=float16", *DEEPBENCH]
    spec = plan(job, AMPERE).spec
    assert spec.reference_math == "emulated"
    assert re.fullmatch(r"float16 reference emulated in float32: natively about \d+ s on "
                        r"this CPU \(0.5 GFLOP/s in float16\)", spec.reference_note)
    assert plan([*job, "bench.verify=false"], AMPERE).spec.reference_math == ""
    monkeypatch.setattr(verify_mod, "cpu_gflops", lambda dtype: 5000.0)  # native fp16
    assert plan(job, AMPERE).spec.reference_math == ""


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_emulated_half_reference_verifies_the_model_and_catches_a_fault(dtype):
    shape = ShapeConfig(seq_len=20, num_layers=2, input_size=32, hidden_size=64, batch_size=4)
    spec = WorkloadSpec(shape=shape, device=torch.device("cpu"), dtype=dtype, seed=0,
                        reference_math="emulated", reference_note="emulated: why")
    workload = job.build_workload(schema.validate(compose_cfg(["model=lstm"])), spec)
    result = verify(workload, dtype, backward=True)
    assert result.status == "passed" and result.reference_math == "emulated"
    assert "emulated: why" in result.detail
    w_ih, H = workload.params[0], 64
    with torch.no_grad():  # the input and forget gates' weights swapped
        w_ih[:2 * H] = torch.cat([w_ih[H:2 * H], w_ih[:H]]).clone()
    result = verify(workload, dtype, backward=True)
    assert result.status == "failed" and "emulated in float32" in result.detail


# --- issue 24, 5/6: what the memory check counts --------------------------------------------

def test_the_memory_check_counts_every_process_alive_at_once(monkeypatch):
    overrides = ["model=lstm", "backend=aten", "device=cpu", "shape=default",
                 "bench.processes=10"]
    cfg = schema.validate(compose_cfg(overrides))
    one = memory.concurrent(cfg, torch.device("cpu"))
    ten = memory.concurrent(cfg, torch.device("cpu"), processes=10)
    # Enough RAM for one process, not for ten: the tenth worker would run out.
    monkeypatch.setattr(memory, "free_host_bytes", lambda: (one.device_bytes + one.host_bytes
                                                            + ten.device_bytes) // 2)
    with pytest.raises(ConfigError) as err:
        plan(overrides)
    assert "10 processes at once" in str(err.value) and "bench.processes" in str(err.value)
    assert plan([*overrides[:-1], "bench.processes=1"])
    # On a GPU each process also holds its own context; other configurations alive beside it
    # (an interleaved sweep) are counted when the caller passes them.
    gpu = torch.device("cuda", 0)
    assert memory.concurrent(cfg, gpu, processes=10).device_bytes == \
        10 * (memory.estimate(cfg).device_bytes + memory.CONTEXT_BYTES)
    free = {"device": memory.concurrent(cfg, gpu).device_bytes, "host": 64 << 30}
    memory.check(cfg, gpu, free=free)
    with pytest.raises(ConfigError, match="with the other configurations alive beside it"):
        memory.check(cfg, gpu, free=free, alongside=memory.concurrent(cfg, gpu))


def test_blocks_cached_by_this_process_count_as_free_on_a_gpu(monkeypatch):
    gib = 1 << 30
    # A sweep's earlier job (the roofline's copy buffers) left 3 GiB reserved, 0.5 in use.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: gib // 2)
    assert memory.free_bytes(CUDA) == 1 * gib + 3 * gib - gib // 2


# --- on a GPU: `make test-gpu` -------------------------------------------------------------

nvidia = pytest.mark.skipif(bool(torch.version.hip), reason="needs an NVIDIA GPU")
amd = pytest.mark.skipif(not torch.version.hip, reason="needs an AMD GPU (ROCm build)")
GPU_RUN = ["device=cuda", *TINY]


def _run(*overrides):
    return execution.execute(plan([*overrides, *GPU_RUN]))


@pytest.mark.gpu
@gpu
def test_gpu_1_lstm_dropout_verifies_under_the_vendor_library():
    result = _run("model=lstm_dropout", "backend=auto", "shape.num_layers=2")
    assert result.status == "ok", result.reason
    assert result.verification.status == "passed"


@pytest.mark.gpu
@gpu
def test_gpu_2_platform_reads_the_library_or_its_error():
    plat = platform.current()
    assert plat.cudnn_version or plat.cudnn_error
    assert len(plat.gpu_capabilities) == plat.gpu_count


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("model", ["lstm", "gru", "vl_lstm", "lstm_layernorm"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_3_the_vendor_kernel_ran(model, dtype):
    result = _run(f"model={model}", "backend=auto", f"dtype={dtype}")
    kernel = "aten::miopen_rnn" if torch.version.hip else "aten::_cudnn_rnn"
    assert result.status == "ok", result.reason
    assert kernel in result.backend.details["rnn_ops"]


@pytest.mark.gpu
@gpu
def test_gpu_3_bfloat16_runs_the_vendor_kernel_or_is_refused():
    try:
        result = _run("model=lstm", "backend=auto", "dtype=bfloat16")
    except UnsupportedError as err:
        assert "bfloat16" in str(err) and "native kernels" in str(err)
        return
    assert "aten::_cudnn_rnn" in result.backend.details["rnn_ops"]
    assert result.backend.details["weights_repacked_per_call"] is True


@pytest.mark.gpu
@gpu
@nvidia
def test_gpu_4_tf32_is_off_unless_asked_and_recorded():
    off = _run("model=lstm", "backend=cudnn")
    assert off.backend.details["allow_tf32"] is False
    assert off.verification.status == "passed", off.verification.detail
    on = _run("model=lstm", "backend=cudnn", "backend.allow_tf32=true")
    major = torch.cuda.get_device_capability(0)[0]
    assert on.backend.details["tf32_effective"] is (major >= 8)


@pytest.mark.gpu
@gpu
def test_gpu_6_the_last_gpu_is_current_and_decides_bfloat16():
    last = torch.cuda.device_count() - 1
    p = plan(["model=lstm", "backend=aten", f"device.index={last}", *GPU_RUN])
    with p.backend.context():
        assert torch.cuda.current_device() == last
    ok = torch.cuda.get_device_capability(last) >= (8, 0) or bool(torch.version.hip)
    try:
        plan(["model=lstm", "backend=aten", f"device.index={last}", "dtype=bfloat16",
              *GPU_RUN])
        assert ok
    except UnsupportedError:
        assert not ok


@pytest.mark.gpu
@gpu
def test_gpu_7_scripted_loops_are_unfused_under_vendor_backends():
    result = _run("model=jit_premul", "backend=auto")
    assert result.status == "ok" and result.backend.details["graph"]["fused"] is False


@pytest.mark.gpu
@gpu
def test_gpu_7_te_fuses_or_refuses():
    for dtype in ("float32", "bfloat16"):
        try:
            result = _run("model=jit_premul", "backend=te", f"dtype={dtype}")
        except UnsupportedError as err:
            assert "ran no TensorExpr kernel" in str(err)
            continue
        assert result.backend.details["tensorexpr_kernels"], result.backend.details


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("model", ["lstm", "lstm_layernorm", "jit"])
def test_gpu_8_no_warmup_no_verify_still_keeps_first_use_off_the_clock(model):
    result = _run(f"model={model}", "backend=auto", "bench.warmup=0", "bench.verify=false")
    assert result.status == "ok"
    assert result.backend.details["first_call_s"] or result.backend.details["optimize_s"]


# --- on a GPU, issue 24: `make test-gpu` ---------------------------------------------------

@pytest.mark.gpu
@gpu
def test_gpu24_7_armed_events_exist_before_the_timed_region():
    assert torch.cuda.Event(enable_timing=True).cuda_event == 0  # lazy: nothing created yet
    clock = CudaEventClock(torch.device("cuda", torch.cuda.current_device()))
    clock.arm(4)
    assert all(event.cuda_event != 0 for event in clock._ready)


@pytest.mark.gpu
@gpu
@nvidia
def test_gpu24_1_nvml_reads_the_jobs_gpu_without_crashing():
    pytest.importorskip("pynvml", reason="rnnexp[gpu] (nvidia-ml-py) not installed")
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    state = environment.gpu_state(device)  # an int bus id here killed the process
    assert "error" not in state and state["sm_max_clock_mhz"] > 0, state
    result = _run("model=lstm", "backend=auto")
    assert result.environment.gpu["readings"] >= 2  # before, (during,) after the rounds


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_gpu24_2_cuda_graphs_are_recorded_before_timing_or_refused(mode):
    with pytest.raises(UnsupportedError, match="records a CUDA graph for each new input size"):
        _run("model=dynamic_eltwise", "backend=inductor", f"backend.mode={mode}")
    result = _run("model=eltwise", "backend=inductor", f"backend.mode={mode}")
    assert result.status == "ok", result.reason  # one recording, before the samples
    assert result.backend.details["cudagraph_step_marks"] is True
    loop = _run("model=py", "backend=inductor", f"backend.mode={mode}")
    assert loop.status == "ok", loop.reason  # a cell loop: many graphs per iteration


@pytest.mark.gpu
@gpu
@nvidia
def test_gpu24_3_a_tf32_lstm_passes_verification_against_a_tf32_reference():
    if torch.cuda.get_device_capability(0) < (8, 0):
        pytest.skip("TF32 needs SM >= 8.0")
    on = _run("model=lstm", "backend=cudnn", "backend.allow_tf32=true", "shape.seq_len=50",
              "shape.hidden_size=128")
    assert on.backend.details["tf32_effective"] is True
    assert on.verification.status == "passed", on.verification.detail
    assert on.verification.reference_math == "tf32"
    loop = _run("model=jit", "backend=cudnn", "backend.allow_tf32=true")
    assert loop.backend.details["tf32_effective"] is False  # cuBLAS matmuls: full FP32


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("model, backend", [("lstm", "aten"), ("jit", "jit"),
                                            ("py", "inductor")])
def test_gpu24_4_float32_matmuls_run_full_fp32_when_tf32_was_asked_for(model, backend):
    torch.set_float32_matmul_precision("high")  # what TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 sets
    try:
        result = _run(f"model={model}", f"backend={backend}")
    finally:
        torch.set_float32_matmul_precision("highest")
    assert result.backend.details["matmul_fp32_precision"] == "ieee"
    assert result.verification.status == "passed", result.verification.detail



@pytest.mark.gpu
@gpu
@nvidia
@pytest.mark.parametrize("hidden, packed, expected", [
    (32, False, "persist_static_small_h"), (256, False, "standard"),
    (32, True, "standard")])
def test_gpu30_1_float32_cudnn_verifies_whichever_algorithm_pytorch_picks(hidden, packed,
                                                                          expected):
    """cuDNN float32 failed verification at shape=small on an H100 and an H200, where
    PyTorch picks the persistent small-hidden kernels (11.8-15.7× the randomly rounded
    float32 reference's error); their reference rounds matmul operands as they do. The
    record names the algorithm and the reference's arithmetic."""
    model = "vl_lstm" if packed else "lstm"
    result = _run(f"model={model}", "backend=cudnn", f"shape.hidden_size={hidden}")
    assert result.status == "ok", result.reason
    assert result.backend.details["cudnn_algorithm"]["forward"] == expected
    v = result.verification
    assert v.status == "passed", v.detail
    if expected == "persist_static_small_h":
        assert v.reference_math == emulation.PERSIST_SMALL_H
    else:
        assert v.reference_math == "" and v.rounded_error is not None
