"""Structured-config schemas: OmegaConf checks types at composition, `__post_init__` checks ranges.

Each group's options merge into a typed field of `Config`; an option with fields of its own
(the jit, inductor and cudnn backends) names its subclass schema in its defaults list
(`/schema/backend/<kind>@_here_`). So a wrong type or an unknown key fails while Hydra
composes, and `validate()` turns the composed config into these dataclasses, which rejects
out-of-range values before anything is built or timed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from rnnexp.config import deepbench, hydra_private
from rnnexp.config.deepbench import DeepBenchConfig
from rnnexp.errors import ConfigError


class DeviceKind(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class DType(Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


def _at_most(obj: Any, maximum: float, hint: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value > maximum:
            raise ConfigError(name, f"must be ≤ {maximum:g}, got {value}", hint)


def _finite(obj: Any, *names: str) -> None:
    """inf and nan pass every comparison check the wrong way (nan ≥ 0 is false, but so is
    nan < 0): refused by name first."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not math.isfinite(value):
            raise ConfigError(name, f"must be a finite number, got {value}")


def _at_least(obj: Any, minimum: int, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value < minimum:
            raise ConfigError(name, f"must be ≥ {minimum}, got {value}")


# torch's sizes are 64-bit integers.
SIZE_MAX = 2**63 - 1


@dataclass
class ShapeConfig:
    seq_len: int = 100  # time steps of each sequence (fixed-length models)
    num_layers: int = 1  # stacked recurrent layers
    input_size: int = 512  # features of each step's input
    hidden_size: int = 512  # features of the hidden (and cell) state
    batch_size: int = 64  # sequences in a batch
    # Variable-length models draw each sequence's length uniformly from [min_len, max_len].
    min_len: int = 30
    max_len: int = 100  # the longest sequence a variable-length model draws (≥ min_len)

    def __post_init__(self) -> None:
        _at_least(self, 1, "seq_len", "num_layers", "input_size", "hidden_size", "batch_size",
                  "min_len", "max_len")
        for name in ("seq_len", "num_layers", "input_size", "hidden_size", "batch_size",
                     "min_len", "max_len"):
            value = getattr(self, name)
            if value > SIZE_MAX:  # no arithmetic on it first: a float overflows
                shown = str(value) if len(str(value)) <= 40 else f"a {len(str(value))}-digit " \
                    "number"
                raise ConfigError(name, f"must be ≤ 2⁶³−1 (torch's largest size), got {shown}")
        if self.min_len > self.max_len:
            raise ConfigError("min_len", f"{self.min_len} exceeds max_len={self.max_len}",
                              "choose min_len ≤ max_len")


class Metric(Enum):
    """What a sample is (bench.metric)."""

    time = "time"  # milliseconds on the device's clock
    # Retired instructions of the measuring process, counted by Valgrind's Callgrind in
    # processes of their own, beside the time (rnnexp.measure.callgrind).
    instructions = "instructions"


class QuietMode(Enum):
    # What to do when other processes keep the machine busy before timing
    # (rnnexp.machine.environment).
    warn = "warn"  # time anyway; the result is flagged and a warning printed
    wait = "wait"  # wait for a quiet machine up to quiet_timeout_s, then decline
    refuse = "refuse"  # decline at once


class MallocPolicy(Enum):
    # glibc malloc's thresholds in the measuring processes (rnnexp.machine.malloc).
    pinned = "pinned"  # fixed: allocations cost the same whatever the process ran before
    system = "system"  # glibc's own, adapting to what the process allocated so far


# Upper bounds of the timing policy (bench.*), so that a slip of the keyboard is refused
# rather than measuring for days.
ITERATIONS_MAX = 1_000_000
PROCESSES_MAX = 256
BLOCK_MS_MAX = 60_000.0
QUIET_TIMEOUT_MAX_S = 86_400.0


@dataclass
class BenchConfig:
    warmup: int = 10  # untimed iterations, in each process
    iters: int = 100  # timed samples of the configuration, shared between its processes
    # Time the backward pass too (forward-only models ignore this).
    backward: bool = True
    # Compare outputs and gradients with the reference before timing.
    verify: bool = True
    # torch.set_num_threads for CPU runs; null keeps PyTorch's default.
    num_threads: Optional[int] = None
    # Precision target: stop before `iters` once the 95% confidence interval of the median
    # (forward+backward) lies within ±precision of it, relative (0.02 = ±2%), and at least
    # `min_iters` timed iterations ran. null: always run `iters` (fastrnns' fixed count).
    precision: Optional[float] = None
    # The fewest timed iterations before a precision target may stop the measurement (≥ 6
    # with a target: a distribution-free interval of a median needs them).
    min_iters: int = 10
    # Record a torch.profiler trace of `profile_iters` extra iterations after timing (never
    # during): a Chrome trace in the job folder and the top operators in results.json.
    profile: bool = False
    profile_iters: int = 3  # iterations traced after timing when `profile` is true
    # Peak memory of each phase, from one extra untimed iteration after timing
    # (rnnexp.measure.phase_memory: cuda_peak_mb on a GPU, rss_hwm_mb on a Linux CPU).
    memory: bool = True
    # What to do when other processes keep the machine busy before timing
    # (rnnexp.machine.environment).
    quiet: QuietMode = QuietMode.warn
    # How long `quiet=wait` waits for a quiet machine before declining, in seconds.
    quiet_timeout_s: float = 300.0
    # glibc malloc's mmap and trim thresholds in the measuring processes: pinned, or glibc's
    # adaptive ones, under which a configuration's time depends on what its process
    # allocated before (another configuration, the verification) — rnnexp.machine.malloc.
    malloc: MallocPolicy = MallocPolicy.pinned
    # Place each result against its device's measured GEMM and copy peaks (rnnexp.run.roofline;
    # measured once per device, dtype and thread count, then read from a cache).
    roofline: bool = True
    # Add the configuration's drift between its runs on this machine (rnnexp.run.drift: its
    # earlier runs' medians, kept in the cache) to the between-process interval.
    drift: bool = True

    # Worker processes measuring the configuration, each with its own build and warm-up,
    # sharing its `iters` timed samples (rnnexp.run.schedule): the process is the replicate,
    # and a comparison with one process a side cannot tell (rnnexp.analysis.significance).
    # Configurations of a sweep whose process-global state is the same share their workers
    # (rnnexp.run.blocks). With a precision target this is the first count, and processes
    # are added up to `max_processes` until the between-process interval meets the target.
    processes: int = 3
    # The most processes a precision target may add up to (≥ processes); null: no more than
    # `processes`.
    max_processes: Optional[int] = None
    # A sample is the mean of a block of back-to-back iterations lasting at least this long
    # (0: one iteration per sample, as fastrnns): microsecond kernels timed one by one are
    # mostly timer and loop overhead.
    block_ms: float = 0.0
    # Processes take turns in rounds of about this many milliseconds of timed samples.
    round_ms: float = 50.0
    # Stop measuring after this many seconds (wall, all processes), precise or not. null: none.
    budget_s: Optional[float] = None
    # A sweep under rnnexp's launcher measures its configurations in interleaved rounds
    # (rnnexp.run.interleave), at most this many at once (fewer when memory says so).
    window: int = 8
    # The Python interpreter whose worker processes measure this configuration (a venv or
    # checkout with rnnexp installed, e.g. another torch build); null: this one. A sweep
    # over it (bench.python=/a/bin/python,/b/bin/python) is an A/B of two environments,
    # measured interleaved.
    python: Optional[str] = None
    # `time` (the default), or `instructions`: each forward and backward also counted as
    # retired instructions under Valgrind's Callgrind (CPU only, one thread, the ISA pinned
    # for counting and timing alike: ATen at AVX2, MKL and oneDNN at SSE4). The time is
    # still measured as configured: it is the counts' calibration, and `compare` judges
    # counts only where time agrees.
    metric: Metric = Metric.time
    # Processes counting under Callgrind (each ~10–20× slower than native while it counts),
    # as many at once as cores and memory allow.
    count_processes: int = 1
    # Iterations each counting process counts, after an uninstrumented warm-up of
    # bench.warmup iterations (at most 3: a count needs only the code to have settled).
    # Counts are deterministic: a process repeats another's to ≤ 0.06%, so a few
    # iterations are enough.
    count_iters: int = 2

    def __post_init__(self) -> None:
        _finite(self, "quiet_timeout_s", "block_ms", "round_ms", "budget_s", "precision")
        _at_least(self, 0, "warmup")
        # Bounds that keep a typo from running for days; a longer measurement is a budget.
        _at_most(self, ITERATIONS_MAX, "for a longer measurement set bench.budget_s "
                 "(seconds) with a precision target", "warmup", "iters", "min_iters",
                 "profile_iters")
        _at_most(self, PROCESSES_MAX, "", "processes", "max_processes")
        _at_most(self, BLOCK_MS_MAX, "milliseconds", "block_ms", "round_ms")
        _at_most(self, QUIET_TIMEOUT_MAX_S, "seconds", "quiet_timeout_s")
        if not self.quiet_timeout_s > 0:
            raise ConfigError("quiet_timeout_s", f"must be > 0, got {self.quiet_timeout_s}",
                              "seconds to wait for a quiet machine under bench.quiet=wait")
        _at_least(self, 1, "iters", "num_threads", "profile_iters", "processes",
                  "max_processes", "window", "count_processes", "count_iters")
        _at_most(self, PROCESSES_MAX, "", "count_processes")
        _at_most(self, ITERATIONS_MAX, "", "count_iters")
        if self.metric == Metric.instructions:
            if self.num_threads not in (None, 1):
                raise ConfigError("num_threads", f"bench.metric=instructions counts one "
                                  f"thread, got {self.num_threads}",
                                  "bench.num_threads=1 (or null), or bench.metric=time")
            self.num_threads = 1
        for name in ("block_ms", "round_ms", "budget_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(name, f"must be ≥ 0, got {value}")
        if self.max_processes is not None and self.max_processes < self.processes:
            raise ConfigError("max_processes", f"{self.max_processes} is below "
                              f"processes={self.processes}", "raise it, or set it to null")
        if self.precision is not None:
            if not 0 < self.precision < 1:
                raise ConfigError("precision", f"must be in (0, 1), got {self.precision}",
                                  "e.g. 0.02 for ±2% of the median, or null")
            # A distribution-free 95% interval of a median needs at least 6 samples.
            _at_least(self, 6, "min_iters")
            if self.min_iters > self.iters:
                raise ConfigError("min_iters", f"{self.min_iters} exceeds iters={self.iters}",
                                  "iters is the most timed iterations; raise it")


@dataclass
class DeviceConfig:
    # Where to run: auto takes the GPU when torch sees one, else the CPU.
    kind: DeviceKind = DeviceKind.auto
    index: int = 0  # which GPU (cuda:<index>); ignored on the CPU

    def __post_init__(self) -> None:
        _at_least(self, 0, "index")


class Form(str, Enum):
    """How backends may run a model (a str, so `model.form == "loop"` reads naturally)."""

    # A torch module run as is (nn.LSTM).
    module = "module"
    # A cell loop that TorchScript backends script and inductor compiles.
    loop = "loop"
    # Python that is never scripted.
    eager = "eager"


def _number_in(field: str, value: Any, low: float, high: float) -> None:
    """`low <= value < high`, for a free-form option that may hold any type."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, f"must be a number in [{low:g}, {high:g}), got {value!r}")
    if not low <= value < high:
        raise ConfigError(field, f"must be in [{low:g}, {high:g}), got {value}")


# Range checks of the model factories' options (model.build.<name>), by name: the options
# are free-form (each factory takes its own), so only the ones present are checked.
BUILD_OPTION_CHECKS = {
    "dropout": lambda v: _number_in("build.dropout", v, 0, 1),
    "pool_size": lambda v: _number_in("build.pool_size", v, 1, 1e9),
    "weight_dtype": lambda v: None if v in ("qint8", "float16") else _raise(ConfigError(
        "build.weight_dtype", f"'{v}' is not one of qint8, float16")),
}


def _raise(err: Exception) -> None:
    raise err


# What a model's reference and work counts can be (rnnexp.models.references, .work).
FAMILIES = ("lstm", "gru", "eltwise")


@dataclass
class ModelConfig:
    # The factory and its options: `_target_` is called as factory(spec, **options) and
    # returns a Workload. Options are model-specific, so this node is free-form.
    build: Dict[str, Any] = MISSING
    # What the reference and work counts are: "lstm", "gru" or "eltwise".
    family: str = "lstm"
    # How backends may run the model: as a torch module, a scriptable cell loop, or eager
    # Python.
    form: Form = Form.module
    # The model to suggest when a backend refuses this one: the scripted twin of an eager
    # loop (py -> jit), or the cell loop of an nn module (lstm -> jit, gru -> jit_gru).
    twin: Optional[str] = None
    # Runs on the CPU only (dynamic-quantized kernels); refused on a GPU before timing.
    cpu_only: bool = False
    # The `dtype`s this model supports; null: every dtype the device supports.
    dtypes: Optional[List[str]] = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError("family", f"'{self.family}' is not one of {', '.join(FAMILIES)}")
        known = [d.value for d in DType]
        for d in self.dtypes or ():
            if d not in known:
                raise ConfigError("dtypes", f"'{d}' is not one of {', '.join(known)}")
        if "_target_" not in self.build:
            raise ConfigError("build._target_", "missing", "name the model's factory")
        for name, check in BUILD_OPTION_CHECKS.items():
            if name in self.build:
                check(self.build[name])


@dataclass
class BackendConfig:
    """A backend without options (aten, miopen, te): any extra key fails at composition.

    There is no `cudnn_benchmark`: cuDNN's RNN path never reads the benchmark flag (its
    algorithm comes from `get_algo` heuristics in aten/src/ATen/native/cudnn/RNN.cpp)."""

    # Backend class; instantiated with these fields.
    _target_: str = MISSING


@dataclass
class CudnnConfig(BackendConfig):
    """backend=cudnn (and auto, which picks cudnn on an NVIDIA GPU)."""

    # TF32 tensor-core math in cuDNN's float32 RNNs on SM >= 8.0 (cudnn.flags(allow_tf32=)).
    # Off by default: aten/jit/te/inductor run full FP32, so float32 compares like with like.
    allow_tf32: bool = False


class Executor(Enum):
    # TorchScript graph executors (fastrnns --executor): profiling = PE with optimisation,
    # legacy = LE with optimisation, simple = optimisation off (no fusion, no autodiff graphs).
    profiling = "profiling"
    legacy = "legacy"
    simple = "simple"


class JitFuser(Enum):
    none = "none"
    # The legacy fuser (fastrnns --fuser old): fuses only under the legacy executor.
    legacy = "legacy"


@dataclass
class TorchScriptConfig(BackendConfig):
    """backend=jit: TorchScript with a chosen executor, fusion off unless fuser=legacy."""

    # TorchScript's graph executor (fastrnns --executor): profiling and legacy optimise,
    # simple turns optimisation off (no fusion, no autodiff graphs).
    executor: Executor = Executor.profiling
    # none, or the legacy fuser (fastrnns --fuser old), which fuses only under executor=legacy.
    fuser: JitFuser = JitFuser.none

    def __post_init__(self) -> None:
        # fastrnns' `--fuser old` without `--executor legacy` silently fuses nothing.
        if self.fuser == JitFuser.legacy and self.executor != Executor.legacy:
            raise ConfigError("fuser", f"legacy fuses only under the legacy executor, not "
                              f"executor={self.executor.value}",
                              "set backend.executor=legacy, or backend.fuser=none")


# torch.compile's modes; the functional form because two names hold a hyphen.
InductorMode = Enum("InductorMode", {m: m for m in ("default", "reduce-overhead",
                                                   "max-autotune")}, type=str)


@dataclass
class InductorConfig(BackendConfig):
    """backend=inductor: torch.compile mode."""

    # torch.compile's mode (torch.compile(mode=...)).
    mode: InductorMode = InductorMode["default"]
    # Let dynamo trace nn.LSTM/nn.GRU modules (torch._dynamo.config.allow_rnn) instead of
    # refusing them: the module itself is compiled, with its compile time and graph breaks.
    allow_rnn: bool = False
    # false: compile into a new, empty inductor cache (a cold compile, as on a first run).
    cache: bool = True


# The project's MLflow store: a SQLite file at the project root, as an absolute URI (a
# relative one would land in each job's folder, wherever the command runs from). MLflow's own
# MLFLOW_TRACKING_URI, when set, is the default instead. conf/sinks/mlflow.yaml reads it
# through the `rnnexp_store` resolver, so the resolved config records the store used.
PROJECT_TRACKING_URI = f"sqlite:///{Path(__file__).resolve().parents[2] / 'mlflow.db'}"
# The project's config folder (conf/): the groups and their options.
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def default_store_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or PROJECT_TRACKING_URI


OmegaConf.register_new_resolver("rnnexp_store", default_store_uri, replace=True)


@dataclass
class Config:
    model: ModelConfig = MISSING
    backend: BackendConfig = MISSING
    shape: ShapeConfig = MISSING
    device: DeviceConfig = MISSING
    bench: BenchConfig = MISSING
    # The result sinks, {name: {_target_: ..., options}} (conf/sinks/); built by
    # rnnexp.results.sinks.
    sinks: Dict[str, Any] = field(default_factory=dict)
    # Element type of weights and activations.
    dtype: DType = DType.float32
    # Seeds weights, inputs and the backward gradient (0 is a seed like any other).
    seed: int = 0
    # Re-running a sweep in its folder (hydra.sweep.dir=...): skip the jobs already measured
    # there (status ok, same config, code version and torch version); run the rest.
    resume: bool = False
    # The DeepBench problem a `deepbench` option chose (rnnexp/config/deepbench.py); empty
    # otherwise.
    deepbench: DeepBenchConfig = field(default_factory=DeepBenchConfig)

    def __post_init__(self) -> None:
        # torch.manual_seed takes 64 bits; models derive seeds as seed + a small offset.
        if not 0 <= self.seed <= SEED_MAX:
            shown = str(self.seed) if len(str(self.seed)) <= 40 else f"a {len(str(self.seed))}"\
                "-digit number"
            raise ConfigError("seed", f"must be in [0, {SEED_MAX}], got {shown}")
        scale = self.deepbench.scale
        if not (math.isfinite(scale) and scale > 0):
            raise ConfigError("deepbench.scale", f"must be a number > 0, got {scale}",
                              "e.g. 0.1 to run the DeepBench mix on a CPU")


SEED_MAX = 2**63 - 1

# Subclass schemas that options name in their defaults lists.
_GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "backend": {"torchscript": TorchScriptConfig, "inductor": InductorConfig,
                "cudnn": CudnnConfig},
}


def register(extra: dict[str, dict[str, type]] | None = None,
             with_deepbench: bool = True) -> None:
    """Store the schemas where the YAML defaults lists look for them, and DeepBench's
    problems as the `deepbench` group (storing its 110 problems takes 0.19 s, so the command
    line leaves them out unless it names them; compositions no longer pay for them:
    hydra_private.share_store)."""
    hydra_private.share_store()
    if with_deepbench:
        deepbench.register()
    cs = ConfigStore.instance()
    cs.store(name="rnnexp_schema", node=Config)
    for group, kinds in {**_GROUP_SCHEMAS, **(extra or {})}.items():
        for kind, node in kinds.items():
            cs.store(group=f"schema/{group}", name=kind, node=node)


def closest(name: str, options: list[str]) -> str:
    """' — did you mean X?' for the valid name closest to `name`, else the valid names."""
    close = difflib.get_close_matches(name, options, n=1)
    return f"did you mean {close[0]}?" if close else f"valid: {', '.join(options)}"


def check_closed(cfg: DictConfig, path: str = "") -> None:
    """Every key of a schema node is a field of its schema — also keys added with `+`, which
    Hydra lets through a structured config, and which would otherwise do nothing."""
    node_type = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(node_type):
        return  # a free-form node (model.build, sinks): its consumer checks its keys
    names = [f.name for f in dataclasses.fields(node_type)]
    for key in cfg.keys():
        if path == "" and key == "hydra":
            continue
        if key not in names:
            field_name = f"{path}{key}"
            options = [f"{path}{n}" for n in names if not n.startswith("_")]
            raise ConfigError(field_name, "no such field", closest(field_name, options))
        if OmegaConf.is_missing(cfg, key) or OmegaConf.is_interpolation(cfg, key):
            continue  # an interpolation's target node is checked where it is
        child = cfg[key]  # None for a node set to null
        if isinstance(child, DictConfig):
            check_closed(child, f"{path}{key}.")


def validate(cfg: DictConfig) -> Config:
    """Build the dataclasses (running the range checks); errors name the full field."""
    check_closed(cfg)
    if "hydra" in cfg:  # composed with return_hydra_config: not part of the app's config
        cfg = cfg.copy()
        with open_dict(cfg):
            del cfg["hydra"]
    try:
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except ConfigError:
        pass
    # A range check failed: built group by group again, the error names the full field.
    for group in ("model", "backend", "shape", "device", "bench"):
        try:
            OmegaConf.to_object(cfg[group])
        except ConfigError as err:
            raise ConfigError(f"{group}.{err.field}", str(err).split(": ", 1)[1]) from None
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]
