"""`inductor`: torch.compile of the eager formulation (loop models are not scripted); with
`allow_rnn=true` nn.LSTM/nn.GRU modules too (torch._dynamo.config.allow_rnn).

Compilation happens in `prepare`: one forward and one backward run there, so both graphs
are compiled before verification and timing, and the time it took is reported on its own
(`compile_s`), never inside the timed iterations; dynamo's own account of the time it spent
compiling within that call is `dynamo_compile_s`. Two more untimed calls follow: with
CUDA graphs (mode=reduce-overhead/max-autotune) the first call after compiling warms up and
the next records the graph, which must not happen in timed iteration 0 either.

`cache=false` compiles into a new, empty inductor cache folder (TORCHINDUCTOR_CACHE_DIR,
read by inductor at each use), so an earlier run's compiled graphs and C++ objects are not
loaded: the compile is cold, as a first run on a machine is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from typing import Iterator

import torch

from rnnexp.backends.base import Backend, loop_twin, untimed_runs
from rnnexp.config.schema import ModelConfig
from rnnexp.machine.platform import Platform
from rnnexp.models.workload import Workload

# torch.compile modes that record CUDA graphs on a GPU (torch._inductor.list_mode_options).
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


class Inductor(Backend):
    name = "inductor"
    AFTER_COMPILE_CALLS = 2
    # Its CPU kernels run on the intra-op threads it saw when it compiled them
    # (torch._inductor.utils.parallel_num_threads: `#pragma omp parallel num_threads(N)`).
    builds_on_one_thread = False

    def __init__(self, plat: Platform, device: torch.device, mode: str = "default",
                 allow_rnn: bool = False, cache: bool = True, **options):
        super().__init__(plat, device, **options)
        self.mode = getattr(mode, "value", mode)  # an InductorMode from the schema
        self.allow_rnn = allow_rnn
        self.cache = bool(cache)
        self.compile_s: float | None = None
        self.dynamo_compile_s: float | None = None
        self.dynamic = False
        self.dynamo: dict = {}

    def script(self, model: ModelConfig) -> bool:
        return False  # compile the eager formulation, never a TorchScript one

    def check(self, model_name: str, model: ModelConfig) -> None:
        if model.form == "module" and not self.allow_rnn:
            # Dynamo does not trace nn.LSTM/GRU by default: the module would run eagerly
            # under the name inductor.
            self.refuse(f"compiles cell-loop formulations; model={model_name} is an nn module "
                        "that dynamo does not trace", loop_twin(model),
                        "backend.allow_rnn=true (compile the module itself)", "backend=aten")
        self.check_cudagraphs(model_name, bool(model.build.get("dynamic_shapes", False)))
        # Inductor writes C++ for the CPU and builds it with the host compiler.
        if self.device.type == "cpu" and not (shutil.which("g++") or shutil.which("c++")):
            self.refuse("needs a C++ compiler to compile for the CPU and found no g++ or c++ "
                        "(install one)", "backend=aten")

    def check_cudagraphs(self, model_name: str, dynamic: bool) -> None:
        """CUDA graph trees record one graph per distinct set of integer sizes of a dynamic
        graph (torch/_inductor/cudagraph_trees.py; triton.cudagraph_skip_dynamic_graphs is
        False by default): a model whose sizes change every call would record inside the
        timed samples, and dynamo's counters do not count recordings."""
        if dynamic and self.device.type == "cuda" and self.mode in CUDAGRAPH_MODES:
            self.refuse(f"mode={self.mode} records a CUDA graph for each new input size, and "
                        f"model={model_name} changes sizes every call (dynamic shapes): the "
                        "recordings would land in the timed samples", "backend.mode=default")

    def process_state(self) -> None:
        return None  # `prepare` resets dynamo's caches: any other compiled model would recompile

    def flags_context(self) -> list:
        if not self.allow_rnn:
            return []
        flags = [torch._dynamo.config.patch(allow_rnn=True)]
        if self.device.type == "cpu":
            # With oneDNN on, nn.LSTM dispatches to aten.mkldnn_rnn_layer, which inductor
            # cannot lower in torch 2.13 ("expected Tensor() for op ... mkldnn_rnn_layer");
            # off, the module decomposes to the native RNN ops inductor compiles.
            flags.append(torch.backends.mkldnn.flags(enabled=False))
        return flags

    def prepare(self, workload: Workload) -> Workload:
        torch._dynamo.reset()  # a fresh cache: what is compiled here is this model
        torch._dynamo.utils.counters.clear()
        # Static shapes unless the workload's sizes change from call to call (dynamic_eltwise):
        # then one graph with symbolic sizes, instead of a compile per new shape.
        self.dynamic = workload.dynamic_shapes
        self.check_cudagraphs("this model", self.dynamic)  # a workload built in code too
        workload.forward = torch.compile(workload.forward, mode=self.mode, dynamic=self.dynamic)
        workload.step_begin = self.step_marker()
        spent = dynamo_compile_seconds()
        t0 = time.perf_counter()
        try:
            with contextlib.nullcontext() if self.cache else empty_cache():
                untimed_runs(workload, self.device, 1, self.untimed_ms)
        except Exception as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            self.refuse(f"could not compile this model: {type(err).__name__}: {first}")
        self.compile_s = time.perf_counter() - t0
        self.dynamo_compile_s = dynamo_compile_seconds() - spent
        self.first_call_s = untimed_runs(workload, self.device, self.AFTER_COMPILE_CALLS,
                                         self.untimed_ms)
        counters = torch._dynamo.utils.counters
        self.dynamo = {"graphs": int(counters["stats"].get("unique_graphs", 0)),
                       "graph_breaks": int(sum(counters["graph_break"].values())),
                       # A hit in inductor's on-disk cache makes compile_s short.
                       "fx_cache_hits": int(counters["inductor"].get("fxgraph_cache_hit", 0))}
        if not self.dynamo["graphs"]:
            # Dynamo ran the whole model eagerly (nn.LSTM/GRU are not traced without
            # allow_rnn): timing it would be eager under the name inductor.
            why = next(iter(counters["graph_break"]), "no graph captured")
            self.refuse(f"compiled nothing for this model (dynamo: {why.splitlines()[0]})",
                        "backend=aten", "a loop model such as model=py")
        return workload

    def uses_cudagraphs(self) -> bool:
        return self.device.type == "cuda" and self.mode in CUDAGRAPH_MODES

    def step_marker(self):
        """What marks each iteration's start for CUDA graph trees: without it they take a
        forward that follows a forward (verification, forward-only runs) as one iteration,
        and a replay then overwrites outputs still held."""
        return torch.compiler.cudagraph_mark_step_begin if self.uses_cudagraphs() else None

    def compiles(self, workload: Workload) -> bool:
        return True

    def compile_seconds(self, workload: Workload) -> float | None:
        return self.dynamo_compile_s

    def timed_start(self, workload: Workload) -> None:
        self._compiles_before = compile_counts()
        self._guard_failures_before = {k: len(v) for k, v in
                                       torch._dynamo.utils.guard_failures.items()}

    def timed_changes(self, workload: Workload) -> str:
        before = getattr(self, "_compiles_before", None)
        if before is None:
            return ""
        after = compile_counts()
        grew = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
        if not grew:
            return ""
        self.dynamo["timed_compiles"] = grew
        # The guard that failed says why (e.g. a size that was specialised).
        old = getattr(self, "_guard_failures_before", {})
        why = next((reasons[old.get(k, 0)] for k, reasons in
                    torch._dynamo.utils.guard_failures.items() if len(reasons) > old.get(k, 0)),
                   "")
        first = str(why).strip().splitlines()[0][:160] if str(why).strip() else ""
        return ("compiled inside the timed iterations (dynamo: " +
                ", ".join(f"{k} +{v}" for k, v in grew.items()) + ")" +
                (f"; first failed guard: {first}" if first else ""))

    def info(self) -> dict:
        # oneDNN is switched off for a compiled nn module on the CPU (flags_context) and has
        # no part in a GPU job: recorded only where it was a choice.
        rnn = ({"allow_rnn": True, **({"onednn": False} if self.device.type == "cpu" else {})}
               if self.allow_rnn else {})
        return {**super().info(), "mode": self.mode, "dynamic": self.dynamic,
                "compile_s": self.compile_s, "dynamo_compile_s": self.dynamo_compile_s,
                "cache": self.cache, **rnn,
                "cudagraph_step_marks": self.uses_cudagraphs(),
                "warm_runs": self.AFTER_COMPILE_CALLS,
                # compile_s includes the first forward+backward run it took to compile.
                "compile_includes": "first forward+backward", **self.dynamo}


def compile_counts() -> dict[str, int]:
    """dynamo's counters that grow whenever something is (re)compiled: frames traced, graphs
    captured, graph breaks met while tracing, AOTAutograd graphs and inductor compilations
    (an on-disk cache hit included: loading a compiled graph is not the kernel either)."""
    c = torch._dynamo.utils.counters
    return {"frames": int(c["frames"].get("total", 0)),
            "graphs": int(c["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(c["graph_break"].values())),
            "aot_graphs": int(c["aot_autograd"].get("total", 0)),
            "inductor_compiles": int(c["inductor"].get("fxgraph_cache_miss", 0)
                                     + c["inductor"].get("fxgraph_cache_hit", 0))}


def dynamo_compile_seconds() -> float:
    """Seconds dynamo has spent compiling in this process, forward and backward graphs
    (its "total_wall_time": entire_frame_compile + entire_backward_compile)."""
    return float(torch._dynamo.utils.calculate_time_spent().get("total_wall_time", 0.0))


@contextlib.contextmanager
def empty_cache() -> Iterator[None]:
    """Inductor's caches in a new empty folder while inside (removed after)."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="rnnexp-inductor-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
