"""Vendor RNN libraries: cuDNN (NVIDIA), MIOpen (AMD, same torch flag on ROCm builds), and
`aten` with the vendor library off. `auto` picks one from the device and build.

A vendor backend times the vendor kernel or refuses. PyTorch silently runs its native kernels
instead when the library cannot take the input (aten/src/ATen/native/RNN.cpp: `use_miopen`
accepts float32/float16 only; `use_cudnn` takes bfloat16 only if
`supportsBFloat16RNNWithCuDNN()`, i.e. built with cuDNN >= 9.13 and the current GPU SM >= 8.0),
and after a MIOpen RNN failure it falls back to native kernels for the rest of the process
with only a warning. So `check` refuses the dtypes the library cannot run, and `prepare`
runs one forward under a dispatch recorder and refuses unless the vendor op ran.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ContextManager, Hashable, Iterator

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from rnnexp.backends.base import Backend
from rnnexp.backends.scripting import UNFUSED, ScriptedRun
from rnnexp.config.schema import ModelConfig
from rnnexp.machine import emulation
from rnnexp.machine.platform import Platform
from rnnexp.models.workload import Workload

# cuDNN RNNs with bfloat16: compiled cuDNN >= 9.13 and SM >= 8.0 (CUDAHooks.cpp
# supportsBFloat16RNNWithCuDNN); the runtime version stands in for the compiled one here, and
# the kernel check in `prepare` catches the rest.
CUDNN_BF16_RNN_VERSION = 91300


# cudnnRNNMode_t, as aten::_cudnn_rnn takes it.
CUDNN_MODES = {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}


@dataclass(frozen=True)
class CudnnRnnCall:
    """What decides the algorithm PyTorch asks cuDNN for, read off one aten::_cudnn_rnn call."""

    mode: str  # CUDNN_MODES
    hidden_size: int
    proj_size: int
    num_layers: int
    bidirectional: bool
    packed: bool  # a PackedSequence (batch_sizes given)
    dtype: torch.dtype
    input_size: int
    seq_len: int
    batch: int

    @classmethod
    def of(cls, args: tuple) -> CudnnRnnCall:
        """From _cudnn_rnn's arguments: input, weight, weight_stride0, weight_buf, hx, cx,
        mode, hidden_size, proj_size, num_layers, batch_first, dropout, train,
        bidirectional, batch_sizes, dropout_state."""
        x, batch_first, batch_sizes = args[0], bool(args[10]), list(args[14] or ())
        if batch_sizes:
            seq_len, batch = len(batch_sizes), int(batch_sizes[0])
        else:
            seq_len, batch = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
        return cls(mode=CUDNN_MODES.get(int(args[6]), str(args[6])),
                   hidden_size=int(args[7]), proj_size=int(args[8]),
                   num_layers=int(args[9]), bidirectional=bool(args[13]),
                   packed=bool(batch_sizes), dtype=x.dtype, input_size=int(x.shape[-1]),
                   seq_len=int(seq_len), batch=int(batch))


def cudnn_algorithm(call: CudnnRnnCall, capability: tuple[int, int], sm_count: int,
                    forward: bool) -> str:
    """The cudnnRNNAlgo_t PyTorch picks (aten/src/ATen/native/cudnn/RNN.cpp `get_algo`):
    the persistent small-hidden kernels for LSTM/GRU up to hidden 192 forward / 128
    backward (384 / 256 for plain RNNs) on SM >= 6.0, unpacked input, any dtype but
    float64; in float16 the persistent kernels where its size and device heuristics agree;
    otherwise the standard algorithm. Recorded because a float32 job's numbers, and its
    error from float64, depend on which one ran."""
    if call.proj_size:
        return "standard"
    if not call.packed:
        if call.dtype != torch.float64 and capability[0] >= 6:
            rnn = call.mode in ("rnn_relu", "rnn_tanh")
            limit = (384 if rnn else 192) if forward else (256 if rnn else 128)
            if call.hidden_size <= limit:
                return "persist_static_small_h"
        if call.dtype == torch.float16 and _persistent_sizes(call) and \
                _persistent_device(call, capability, sm_count):
            return "persist_static"
    return "standard"


def _persistent_sizes(call: CudnnRnnCall) -> bool:
    return (call.num_layers == 1 and call.hidden_size <= 1024 and not call.bidirectional
            and call.hidden_size % 128 == 0 and call.input_size % 128 == 0)


def _persistent_device(call: CudnnRnnCall, capability: tuple[int, int], sm_count: int) -> bool:
    b, t = call.batch, call.seq_len
    major, minor = capability
    if major == 7:
        return minor != 5 and ((b % 16 == 0 and b not in (80, 112)) or b == 8) and (
            (t >= 40 and b <= 128) or (t >= 20 and b <= 96) or (t >= 10 and b <= 32))
    if major >= 8 and sm_count >= 98 and minor != 6:
        if call.mode == "gru":
            return False
        if call.mode == "lstm":
            return b % 8 == 0 and b <= 128
        return b % 8 == 0 and b <= 128 and (b < 96 or call.hidden_size < 896)
    return False


class _OpsSeen(TorchDispatchMode):
    """Records the aten ops dispatched below autograd (vendor or native RNN kernels), and
    what each cuDNN RNN call was asked to run."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()
        self.cudnn_calls: list[CudnnRnnCall] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Never under torch.compile (vendor backends only); saying so keeps torch from
        # wrapping __torch_dispatch__ for dynamo, whose first import costs ~1 s per run.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func._schema.name)
        if func._schema.name == "aten::_cudnn_rnn":
            self.cudnn_calls.append(CudnnRnnCall.of(args))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def library_flags(enabled: bool, allow_tf32: bool) -> Iterator[None]:
    """The vendor library on or off, TF32 as asked, autotuning off; restored afterwards.
    Not torch.backends.cudnn.flags(): it also sets and restores cuDNN's benchmark limit,
    which on ROCm warns "Benchmark limit not supported in MIOpen" in every job."""
    C = torch._C
    old = (C._get_cudnn_enabled(), C._get_cudnn_benchmark(), C._get_cudnn_allow_tf32())
    C._set_cudnn_enabled(enabled)
    C._set_cudnn_benchmark(False)
    C._set_cudnn_allow_tf32(allow_tf32)
    try:
        yield
    finally:
        C._set_cudnn_enabled(old[0])
        C._set_cudnn_benchmark(old[1])
        C._set_cudnn_allow_tf32(old[2])


def has_rnn_module(workload: Workload) -> bool:
    return any(isinstance(m, nn.RNNBase) for mod in workload.modules for m in mod.modules())


def rnn_ops(workload: Workload) -> tuple[list[str], list[CudnnRnnCall]]:
    """The RNN kernels one forward dispatches (`aten::_cudnn_rnn`, `aten::miopen_rnn`,
    `aten::mkldnn_rnn_layer`, `aten::_thnn_fused_lstm_cell`, ...), grad mode as timed, and
    the cuDNN RNN calls among them."""
    backward = workload.has_backward and any(p.requires_grad for p in workload.params)
    with torch.set_grad_enabled(backward), _OpsSeen() as seen:
        workload.run_forward()
    ops = sorted(op for op in seen.ops if any(k in op for k in ("rnn", "lstm", "gru")))
    return ops, seen.cudnn_calls


class VendorLibrary(Backend):
    enabled = True
    library = ""  # cuDNN / MIOpen
    kernel = ""  # the aten op that proves the library ran

    def __init__(self, plat: Platform, device: torch.device, allow_tf32: bool = False,
                 **options):
        super().__init__(plat, device, **options)
        self.allow_tf32 = allow_tf32
        self.scripted = ScriptedRun(UNFUSED)  # for `form: loop` models, scripted here too
        self.rnn_ops: list[str] | None = None
        self.cudnn_calls: list[CudnnRnnCall] = []
        self.picked_because = ""  # set by `auto`
        self.rnn_kernel_model = False  # set by `check`: the model calls the RNN kernel

    def uses_rnn_kernel(self, model: ModelConfig) -> bool:
        return model.form == "module"  # nn.LSTM/GRU; cell loops never call an RNN kernel

    def check_library(self) -> None:
        """The build has the library, the device is a GPU and the library loaded."""
        if self.device.type != "cuda":
            self.refuse("runs on a GPU only; device is cpu", "device=cuda", "backend=aten")
        if self.plat.cudnn_error:
            self.refuse(f"cannot use {self.library}: {self.plat.cudnn_error}", "backend=aten")
        if self.plat.cudnn_version is None:
            self.refuse(f"needs {self.library}; this {self.plat.build} build has none",
                        "backend=aten")

    def flags_context(self) -> list[ContextManager]:
        # allow_tf32 explicitly: cuDNN's own default is True.
        return [library_flags(enabled=self.enabled, allow_tf32=self.allow_tf32),
                self.scripted.context()]

    def process_state(self) -> Hashable:
        # The library flags are read at every call and restored: only the scripted loops'
        # TorchScript flags stay with the process.
        return self.scripted.process_state()

    def prepare(self, workload: Workload) -> Workload:
        if not self.scripted.optimise(workload, self.device, self.untimed_ms):
            super().prepare(workload)  # one untimed call: first-use costs off the clock
        if has_rnn_module(workload):
            self.rnn_ops, self.cudnn_calls = rnn_ops(workload)
            if self.kernel and self.kernel not in self.rnn_ops:
                ran = ", ".join(self.rnn_ops) or "no RNN kernel"
                self.refuse(f"asked for {self.library} but PyTorch ran {ran} instead of "
                            f"{self.kernel} (its native fallback)", "backend=aten")
        # Verified against a reference that computes as cuDNN will: TF32, or (the algorithm
        # known once a forward ran) as its persistent small-hidden kernels round.
        workload.reference_math = self.reference_math() or workload.reference_math
        return workload

    def finish(self, workload: Workload) -> None:
        if self.scripted.optimize_s is not None:
            self.scripted.summarise(workload)

    def timed_start(self, workload: Workload) -> None:
        self.scripted.timed_start(workload)  # a no-op snapshot (None) for nn modules

    def timed_changes(self, workload: Workload) -> str:
        return self.scripted.timed_changes(workload)

    def tf32_effective(self) -> bool:
        """cuDNN's RNN kernel runs TF32 math: asked for, float32 on SM >= 8.0, and a model
        that calls the kernel (a cell loop's matmuls are cuBLAS's, pinned to full FP32)."""
        cap = self.plat.capability(self.device.index) if self.device.type == "cuda" else None
        return bool(self.allow_tf32 and self.enabled and self.dtype == torch.float32
                    and self.rnn_kernel_model and not self.plat.hip_version
                    and cap is not None and cap >= (8, 0))

    def reference_math(self) -> str:
        """How verification's low-precision reference must compute (rnnexp.machine.emulation):
        TF32 where cuDNN runs it; in float32, as the persistent small-hidden kernels do where
        PyTorch asked cuDNN for them (known once a forward ran: `cudnn_calls`)."""
        if self.tf32_effective():
            return emulation.TF32
        if self.dtype == torch.float32 and self.cudnn_calls and \
                "persist_static_small_h" in self.algorithms().values():
            return emulation.PERSIST_SMALL_H
        return ""

    def algorithms(self) -> dict[str, str]:
        """The algorithm PyTorch asks cuDNN for, forward and backward, per distinct call."""
        props = torch.cuda.get_device_properties(self.device)
        cap, sms = (props.major, props.minor), props.multi_processor_count
        found: dict[str, str] = {}
        for call in dict.fromkeys(self.cudnn_calls):
            for direction in ("forward", "backward"):
                algo = cudnn_algorithm(call, cap, sms, direction == "forward")
                key = direction if len(set(self.cudnn_calls)) == 1 else \
                    f"{direction}[hidden {call.hidden_size}]"
                found[key] = algo
        return found

    def info(self) -> dict:
        info = {**super().info(), "vendor_library": self.enabled,
                # TF32 as set for cuDNN, and whether it could change float32 RNN math here.
                "allow_tf32": self.allow_tf32, "tf32_effective": self.tf32_effective(),
                # The RNN kernels an nn.LSTM/GRU forward dispatched (None: no RNN module).
                "rnn_ops": self.rnn_ops}
        if self.picked_because:
            info["auto"] = self.picked_because
        if self.scripted.optimize_s is not None:  # a scripted loop model: flags, graph, runs
            info.update(self.scripted.info())
        return info


class Cudnn(VendorLibrary):
    name = "cudnn"
    library = "cuDNN"
    kernel = "aten::_cudnn_rnn"

    def check(self, model_name, model) -> None:
        self.rnn_kernel_model = self.uses_rnn_kernel(model)
        plat = self.plat
        if plat.hip_version:
            self.refuse(f"needs a CUDA build of PyTorch; this build is {plat.build}",
                        "backend=miopen")
        if not plat.cuda_version:
            self.refuse(f"needs a CUDA build of PyTorch; this build is {plat.build}",
                        "backend=aten")
        self.check_library()
        if self.uses_rnn_kernel(model) and self.dtype == torch.bfloat16:
            cap = plat.capability(self.device.index) or (0, 0)
            if (plat.cudnn_version or 0) < CUDNN_BF16_RNN_VERSION or cap < (8, 0):
                self.refuse(f"runs bfloat16 RNNs only with cuDNN >= 9.13 on SM >= 8.0 (here "
                            f"cuDNN {plat.cudnn_version}, SM {cap[0]}.{cap[1]}); PyTorch would "
                            "run its native kernels", "dtype=float16", "backend=aten")

    def info(self) -> dict:
        info = {**super().info(), "cuda": self.plat.cuda_version,
                "cudnn": self.plat.cudnn_version}
        if self.rnn_ops is not None:
            # nn.RNNBase.flatten_parameters() skips dtypes outside
            # torch.backends.cudnn.CUDNN_TENSOR_DTYPES (bfloat16): _cudnn_rnn then copies
            # the weights into one buffer inside every forward, and that copy is timed.
            info["weights_repacked_per_call"] = (self.dtype not in
                                                 torch.backends.cudnn.CUDNN_TENSOR_DTYPES)
        if self.cudnn_calls:
            info["cudnn_algorithm"] = self.algorithms()
        return info


class Miopen(VendorLibrary):
    name = "miopen"
    library = "MIOpen"
    kernel = "aten::miopen_rnn"

    def check(self, model_name, model) -> None:
        plat = self.plat
        if not plat.hip_version:
            alt = "cudnn" if plat.cuda_version and self.device.type == "cuda" else "aten"
            self.refuse(f"needs a ROCm build of PyTorch; this build is {plat.build}",
                        f"backend={alt}")
        self.check_library()
        if self.allow_tf32:  # reachable only through auto (miopen's schema has no such key)
            self.refuse("has no TF32 option (backend.allow_tf32 is for cuDNN)",
                        "backend.allow_tf32=false")
        if self.uses_rnn_kernel(model) and self.dtype == torch.bfloat16:
            self.refuse("runs RNNs in float32 and float16 only; with bfloat16 PyTorch would "
                        "run its native kernels", "dtype=float16", "backend=aten")

    def info(self) -> dict:
        return {**super().info(), "hip": self.plat.hip_version,
                "miopen": self.plat.cudnn_version}


class Aten(VendorLibrary):
    """PyTorch's native kernels: the vendor RNN library off (fastrnns' `aten` runner)."""

    name = "aten"
    enabled = False

    def check(self, model_name, model) -> None:
        if self.allow_tf32:  # reachable only through auto (aten's schema has no such key)
            self.refuse("has no TF32 option (backend.allow_tf32 is for cuDNN; here auto "
                        f"picked aten{': ' + self.picked_because if self.picked_because else ''})",
                        "backend.allow_tf32=false")

    def info(self) -> dict:
        return {**super().info(), "onednn_available": self.plat.has_mkldnn}


def auto(plat: Platform, device: torch.device, **options) -> Backend:
    """cudnn on an NVIDIA GPU, miopen on an AMD GPU, aten on the CPU — and aten where the
    vendor library failed to load (the reason is recorded in `backend.auto`)."""
    why = ""
    if device.type != "cuda":
        cls: type[VendorLibrary] = Aten
    elif plat.cudnn_error:
        cls, why = Aten, f"{'MIOpen' if plat.hip_version else 'cuDNN'} unusable: " \
                         f"{plat.cudnn_error}"
    else:
        cls = Miopen if plat.hip_version else Cudnn
    backend = cls(plat, device, **options)
    backend.picked_because = why
    return backend
