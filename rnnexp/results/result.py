"""The result of one job, typed: what ran, where, how fast, and whether it was verified.

`results.json` in the job's Hydra output folder is its serialised form, the record every sink
(console table, MLflow, fastrnns JSON) is derived from and what `rnnexp sync` uploads later.
The JSON keeps its field names; files of earlier schema versions still load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rnnexp.errors import RnnexpError
from rnnexp.machine.environment import Environment
from rnnexp.machine.platform import Platform
from rnnexp.measure.records import PhaseMemory, ProfileInfo, Samples, Verification
from rnnexp.models.compile_cost import CompileCost
from rnnexp.models.work import Work
from rnnexp.results import files, stats

RESULTS_FILE = "results.json"
# 2: the code version moved from platform.extra.git_commit to a field of its own.
# 3: peak memory per phase (memory) and the start-up and compile cost (compile_cost); absent
# (null) in earlier files.
SCHEMA_VERSION = 3

# Status of a job.
OK = "ok"  # timed, verified (or verification skipped on request)
INVALID = "verification_failed"  # timed numbers exist but are not a valid result
RECOMPILED = "recompiled"  # something was compiled inside the timed iterations: not the kernel
UNSUPPORTED = "unsupported"  # declined before any timing, with a reason
CRASHED = "crashed"  # an exception stopped the job
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
# Statuses that make the run or sweep exit with exit_codes.JOB_FAILED.
FAILED_STATUSES = (INVALID, RECOMPILED, CRASHED)

DEFAULT_DTYPE = "float32"  # labels name any other
# The config groups that name a job, in the order labels show them.
LABEL_KEYS = ("model", "backend", "shape", "device")


def label(choices: Mapping[str, Any], keys: Sequence[str] = LABEL_KEYS,
          device: str = "", overrides: Sequence[str] = ()) -> str:
    """The one way a job is named: its choices joined by "·", e.g. jit_premul·te·small·cpu.
    `device` (the resolved one, e.g. cuda:1) stands in for the device choice when known.
    A DeepBench problem stands where the shape does (it sets the shape), and fields of a
    group set on the command line follow its option, `default(hidden_size=1024)`: rows that
    differ in them must not read alike."""
    values = {**choices, "device": device} if device else choices
    return "·".join(_label_part(k, values, overrides) for k in keys)


def _label_part(key: str, values: Mapping[str, Any], overrides: Sequence[str]) -> str:
    group, name = key, str(values.get(key, "?"))
    if key == "shape" and values.get("deepbench"):
        group, name = "deepbench", str(values["deepbench"])
    fields = overridden_fields(overrides, group)
    return f"{name}({','.join(fields)})" if fields else name


def overridden_fields(overrides: Sequence[str], group: str) -> list[str]:
    """`field=value` for each `group.field=value` among command-line overrides."""
    out = []
    for text in overrides:
        key, sep, value = text.lstrip("+~").partition("=")
        if sep and key.startswith(group + "."):
            if key.endswith("_target_"):  # a dotted path: its last name says which
                value = value.rsplit(".", 1)[-1]
            out.append(f"{key[len(group) + 1:]}={value}")
    return out


def _decimals(value: float) -> int:
    """Decimals that show three significant digits — run-to-run noise is percents, not
    per mille — at most three (past the microsecond a millisecond figure says nothing),
    none from 100 ms on."""
    if value <= 0 or not math.isfinite(value):
        return 3
    return max(0, min(3, 2 - math.floor(math.log10(value))))


def format_quartiles(median: Optional[float], q1: Optional[float],
                     q3: Optional[float]) -> str:
    """The one way a time is shown: the median and, in brackets, the 25th and 75th
    percentiles of the iterations — `0.700 [0.512, 22.321]`, `17.0 [16.5, 18.1]` ms — so a
    skewed sample reads as skewed and nothing suggests a time below zero; three significant
    digits of the median, the quartiles with its decimals."""
    if median is None:
        return "—"
    d = _decimals(median)
    if q1 is None or q3 is None:
        return f"{median:.{d}f}"
    return f"{median:.{d}f} [{q1:.{d}f}, {q3:.{d}f}]"


QUARTILES_NOTE = "median [25th, 75th percentile] of the timed iterations"


def _from_dict(cls: type, data: Mapping[str, Any]):
    """A dataclass from its asdict() form, ignoring keys it does not know (other versions)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@dataclass
class PhaseStats:
    """Statistics, rates and raw samples of one phase, or why it was not timed."""

    median_ms: Optional[float] = None
    iqr_ms: Optional[float] = None
    mean_ms: Optional[float] = None
    std_ms: Optional[float] = None
    min_ms: Optional[float] = None
    max_ms: Optional[float] = None
    p10_ms: Optional[float] = None
    p90_ms: Optional[float] = None
    cv: Optional[float] = None
    n: int = 0
    median_ci_low_ms: Optional[float] = None
    median_ci_high_ms: Optional[float] = None
    tokens_per_s: Optional[float] = None
    gflops: Optional[float] = None
    gbps: Optional[float] = None
    # Between processes (bench.processes > 1): the phase's median in each process, and where
    # the median of a new run in a fresh process is expected to fall (95% prediction interval
    # from those medians, stats.between_processes; null below 3 processes). between_spread:
    # the standard deviation of their logarithms (≈ their relative spread).
    processes: int = 1
    process_medians_ms: list[float] = field(default_factory=list)
    between_low_ms: Optional[float] = None
    between_high_ms: Optional[float] = None
    between_spread: Optional[float] = None
    # The drift between runs that the interval includes (rnnexp.run.drift: 1σ of this phase's
    # relative spread over the configuration's earlier runs); null: not known, or
    # bench.drift=false.
    between_drift: Optional[float] = None
    # Measured in a sweep's interleaved rounds (rnnexp.run.interleave): the median of each
    # process's samples in each round of its window, [process][round], null where that
    # process took no sample in that round. Jobs of one window pair up by round.
    rounds_ms: list[list[Optional[float]]] = field(default_factory=list)
    samples_ms: list[float] = field(default_factory=list)
    # Set instead of everything above when the phase was not timed, with the reason.
    not_applicable: Optional[str] = None

    @property
    def timed(self) -> bool:
        return self.not_applicable is None and self.median_ms is not None

    def without_rates(self) -> PhaseStats:
        """The same statistics with tokens/s, GFLOP/s and GB/s left out."""
        return dataclasses.replace(self, tokens_per_s=None, gflops=None, gbps=None)

    def metrics(self) -> dict[str, float]:
        """The numeric statistics and rates (not the raw samples), None left out."""
        return {k: float(v) for k, v in asdict(self).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None}

    def to_json(self) -> dict:
        if self.not_applicable is not None:
            return {"not_applicable": self.not_applicable}
        data = asdict(self)
        del data["not_applicable"]
        return data

    @classmethod
    def of(cls, values: Sequence[float], *, tokens: int, flops: float, nbytes: float,
           per_process: Sequence[Sequence[float]] = (), drift: Optional[float] = None,
           drift_runs: int = 0, rounds: Sequence[Sequence[int]] = ()) -> PhaseStats:
        """`rounds`: the interleaved round of each process's samples (empty: none)."""
        summary = stats.summarize(values)
        if any(rounds):
            summary["rounds_ms"] = stats.round_medians(per_process, rounds)
        if len(per_process) > 1:
            medians = [stats.median(v) for v in per_process]
            interval = stats.between_processes(medians, drift=drift, drift_runs=drift_runs)
            summary.update(processes=len(medians), process_medians_ms=medians,
                           between_low_ms=interval["low_ms"],
                           between_high_ms=interval["high_ms"],
                           between_spread=interval["spread"],
                           between_drift=drift if interval["drift_half"] else None)
        summary.update(stats.rates(summary["median_ms"], tokens=tokens, flops=flops,
                                   nbytes=nbytes))
        # Undefined statistics (a median interval from too few samples) are null, not NaN:
        # results.json stays strict JSON and MLflow gets no NaN metrics.
        clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                 for k, v in summary.items()}
        return _from_dict(cls, {**clean, "samples_ms": list(values)})


@dataclass
class BackendInfo:
    """The backend that ran (its resolved name) and what identifies it: versions, flags,
    compile times, graph summaries — whatever that backend reports."""

    name: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, **self.details} if self.name else {}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BackendInfo:
        rest = dict(data)
        return cls(name=str(rest.pop("name", "")), details=rest)


@dataclass
class TimingInfo:
    """How the samples were taken."""

    clock: str = ""
    warmup: int = 0
    iters: int = 0
    timed_iters: int = 0
    precision: Optional[float] = None
    threads: int = 0
    # Iterations per sample (bench.block_ms), processes that measured, why measuring stopped
    # (iters | precision | spread | drift | budget: rnnexp.run.schedule), and where the seconds
    # went: measuring in all (measure_s), of which building/scripting/first calls (setup_s),
    # verifying, warming up and the timed samples themselves (summed over processes).
    block: int = 1
    processes: int = 1
    stopped: str = ""
    budget_s: Optional[float] = None
    # Whether the samples were taken in a sweep's interleaved rounds, and if not, why not
    # (one job alone, or a launcher that runs jobs one after the other or in parallel).
    interleaved: bool = False
    measure_s: Optional[float] = None
    setup_s: Optional[float] = None
    verify_s: Optional[float] = None
    warmup_s: Optional[float] = None
    timed_s: Optional[float] = None


PHASES = ("forward", "backward", "total")


@dataclass
class Interleaving:
    """The jobs whose samples were taken in the same interleaved rounds as this one's
    (rnnexp.run.interleave): they saw the same machine, round by round, and compare paired."""

    window: str = ""  # unique: the sweep's id and the window's number
    jobs: list[int] = field(default_factory=list)  # their job numbers in the sweep
    rounds: int = 0  # rounds the window ran
    seed: int = 0  # the seed of the rounds' random visiting orders
    # The window's worker process each of this job's processes ran in (rnnexp.run.blocks): a
    # number two jobs share is one process, in which they compare paired by process too.
    workers: list[int] = field(default_factory=list)


def attainable(intensity: float, peak_gflops: float, peak_gbps: float) -> float:
    """The roof at an arithmetic intensity (FLOP/byte): min(compute peak, intensity × bw)."""
    return min(peak_gflops, intensity * peak_gbps)


@dataclass
class Roofline:
    """Where a result sits against its device's measured limits (rnnexp.run.roofline): the rates
    of its rate phase as % of the GEMM and memory-copy peaks measured on that device, dtype
    and thread count."""

    phase: str = ""  # the phase placed: total (forward+backward), else forward
    intensity: Optional[float] = None  # arithmetic intensity, FLOP per byte of minimum traffic
    gflops: Optional[float] = None
    gbps: Optional[float] = None
    peak_gflops: Optional[float] = None
    peak_gbps: Optional[float] = None
    pct_peak_flops: Optional[float] = None
    pct_peak_bandwidth: Optional[float] = None
    # % of the roof at this intensity, min(peak_gflops, intensity × peak_gbps), and which of
    # the two ceilings that is ("compute" or "memory").
    pct_attainable: Optional[float] = None
    bound: str = ""
    peaks_measured_at: str = ""

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()
                if isinstance(v, (int, float)) and v is not None}


@dataclass
class CountStats:
    """A phase's retired instructions per iteration (bench.metric=instructions)."""

    median: float
    low: float  # the least and the most of every counted iteration
    high: float
    process_medians: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    # The time's median over this median, from the same configuration's timed processes
    # (ISA pinned alike): what an instruction costs here. Two runs whose times moved while
    # their counts did not have a different cost per instruction (memory-bound code).
    ns_per_instruction: Optional[float] = None

    @property
    def spread(self) -> float:
        """The relative range of every counted iteration, all processes together."""
        return (self.high - self.low) / self.median if self.median > 0 else math.inf

    @classmethod
    def of(cls, per_process: Sequence[Sequence[float]], time_ms: Optional[float]
           ) -> CountStats:
        values = [v for process in per_process for v in process]
        median = float(statistics.median(values))
        return cls(median=median, low=min(values), high=max(values),
                   process_medians=[float(statistics.median(p)) for p in per_process],
                   samples=list(values),
                   ns_per_instruction=(time_ms * 1e6 / median
                                       if time_ms is not None and median > 0 else None))


@dataclass
class Instructions:
    """bench.metric=instructions: each phase counted by `tool`, in processes whose ISA and
    threads were pinned by `env` (the time's processes too)."""

    phases: dict[str, CountStats] = field(default_factory=dict)
    tool: str = "callgrind"
    env: dict[str, str] = field(default_factory=dict)
    count_s: float = 0.0  # wall seconds its counting processes took, start-up included

    def metrics(self) -> dict[str, float]:
        out = {"count_s": self.count_s}
        for name, c in self.phases.items():
            out[f"{name}_instructions"] = c.median
            out[f"{name}_instructions_spread"] = c.spread
            if c.ns_per_instruction is not None:
                out[f"{name}_ns_per_instruction"] = c.ns_per_instruction
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Instructions:
        return cls(phases={k: _from_dict(CountStats, v)
                           for k, v in (data.get("phases") or {}).items()},
                   tool=data.get("tool", "callgrind"), env=dict(data.get("env") or {}),
                   count_s=float(data.get("count_s") or 0.0))


@dataclass
class Result:
    choices: dict[str, str]
    overrides: list[str]
    config: dict[str, Any]
    status: str
    reason: str = ""
    device: str = ""
    device_name: str = ""
    dtype: str = ""
    backend: BackendInfo = field(default_factory=BackendInfo)
    verification: Optional[Verification] = None
    work: Optional[Work] = None
    phases: dict[str, PhaseStats] = field(default_factory=dict)
    platform: Optional[Platform] = None
    timing: Optional[TimingInfo] = None
    # What decides whether the timings can be trusted: load, other busy processes, threads.
    environment: Optional[Environment] = None
    roofline: Optional[Roofline] = None
    git_commit: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    schema: int = SCHEMA_VERSION
    # bench.profile=true: the trace file and the top operators (rnnexp/measure/profiling.py).
    profile: Optional[ProfileInfo] = None
    interleaving: Optional[Interleaving] = None
    # Peak memory per phase (rnnexp.measure.phase_memory) and what the first process paid before
    # its first result, with its steady iteration (rnnexp.models.compile_cost).
    memory: Optional[PhaseMemory] = None
    compile_cost: Optional[CompileCost] = None
    instructions: Optional[Instructions] = None  # bench.metric=instructions

    @property
    def label(self) -> str:
        """What tells this job apart: its choices, overridden fields, a dtype other than
        float32."""
        name = label(self.choices, device=self.device, overrides=self.overrides)
        return f"{name}·{self.dtype}" if self.dtype and self.dtype != DEFAULT_DTYPE else name

    @property
    def flags(self) -> list[str]:
        """What the machine was like while it was timed (busy, high_spread, ...)."""
        return list(self.environment.flags) if self.environment else []

    @property
    def timed(self) -> bool:
        return "forward" in self.phases and self.phases["forward"].timed

    def phase(self, name: str) -> PhaseStats:
        return self.phases.get(name) or PhaseStats(not_applicable="not timed")

    @property
    def rate_phase(self) -> PhaseStats:
        """The phase whose rates stand for the job: forward+backward, else forward alone."""
        total = self.phase("total")
        return total if total.timed else self.phase("forward")

    def to_json(self) -> dict:
        def plain(value):
            return asdict(value) if dataclasses.is_dataclass(value) else (value or {})

        return {
            "choices": self.choices, "overrides": self.overrides, "config": self.config,
            "status": self.status, "reason": self.reason, "device": self.device,
            "device_name": self.device_name, "dtype": self.dtype,
            "backend": self.backend.to_json(),
            "verification": plain(self.verification), "work": plain(self.work),
            "phases": {k: p.to_json() for k, p in self.phases.items()},
            "platform": plain(self.platform), "timing": plain(self.timing),
            "environment": plain(self.environment) or None,
            "roofline": plain(self.roofline) or None,
            "git_commit": self.git_commit, "started_at": self.started_at,
            "duration_s": self.duration_s, "schema": self.schema,
            **({"profile": asdict(self.profile)} if self.profile else {}),
            **({"interleaving": asdict(self.interleaving)} if self.interleaving else {}),
            "memory": plain(self.memory) or None,
            "compile_cost": plain(self.compile_cost) or None,
            **({"instructions": asdict(self.instructions)} if self.instructions else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Result:
        data = dict(data)
        platform = dict(data.get("platform") or {})
        if data.get("schema", 1) < 2:  # v1 kept the code version in platform.extra
            data.setdefault("git_commit", (platform.get("extra") or {}).get("git_commit", ""))
        # JSON has lists where Platform (frozen, hashable) holds tuples.
        platform = {k: _tuples(v) for k, v in platform.items()}
        return _from_dict(cls, {
            **data,
            "backend": BackendInfo.from_json(data.get("backend") or {}),
            "verification": (_from_dict(Verification, data["verification"])
                             if data.get("verification") else None),
            "work": _from_dict(Work, data["work"]) if data.get("work") else None,
            "phases": {k: _from_dict(PhaseStats, p) for k, p in
                       (data.get("phases") or {}).items()},
            "platform": _from_dict(Platform, platform) if platform.get("torch_version")
            else None,
            "timing": _from_dict(TimingInfo, data["timing"]) if data.get("timing") else None,
            "profile": (_from_dict(ProfileInfo, data["profile"]) if data.get("profile")
                        else None),
            "environment": (Environment.from_json(data["environment"])
                            if data.get("environment") else None),
            "roofline": (_from_dict(Roofline, data["roofline"]) if data.get("roofline")
                         else None),
            "interleaving": (_from_dict(Interleaving, data["interleaving"])
                             if data.get("interleaving") else None),
            "memory": _from_dict(PhaseMemory, data["memory"]) if data.get("memory") else None,
            "compile_cost": (_from_dict(CompileCost, data["compile_cost"])
                             if data.get("compile_cost") else None),
            "instructions": (Instructions.from_json(data["instructions"])
                             if data.get("instructions") else None),
            "schema": SCHEMA_VERSION,
        })

    def save(self, folder: Path) -> Path:
        return files.write_text(Path(folder) / RESULTS_FILE,
                                json.dumps(self.to_json(), indent=2, default=str))

    @classmethod
    def load(cls, path: Path) -> Result:
        return cls.from_json(json.loads(Path(path).read_text()))

    @classmethod
    def load_checked(cls, path: Path) -> Result:
        """`load`, or BrokenResults naming the file and what is wrong with it: the one check
        of a saved result, for everything that reads one back (sync, compare, resume)."""
        try:
            raw = Path(path).read_bytes()
        except OSError as err:
            raise BrokenResults(path, f"cannot be read ({err.strerror or err})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BrokenResults(path, "is not text (a binary file?) — not an rnnexp result"
                                ) from None
        if not text.strip():
            raise BrokenResults(path, "is empty")
        try:
            data = json.loads(text)
        except ValueError as err:
            raise BrokenResults(path, f"is not complete JSON ({err})") from None
        if not isinstance(data, dict) or "status" not in data:
            raise BrokenResults(path, "is not an rnnexp result (no status)")
        problem = saved_problem(data)
        if problem:
            raise BrokenResults(path, problem)
        try:
            result = cls.from_json(data)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            raise BrokenResults(path, f"is not an rnnexp result ({err})") from None
        if result.status == OK and not result.timed:
            raise BrokenResults(path, "says ok but holds no timed phase")
        return result


STATUSES = (OK, INVALID, RECOMPILED, UNSUPPORTED, CRASHED, INTERRUPTED)
_TEXT = ("reason", "device", "device_name", "dtype", "git_commit", "started_at")
_MAPPINGS = ("config", "backend", "verification", "work", "platform", "timing",
             "environment", "roofline", "profile", "interleaving", "memory", "compile_cost")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _phase_problem(name: str, phase: Any) -> Optional[str]:
    """What is wrong with a saved phase's statistics, if anything: every statistic a finite
    number (or null), every sample and per-process value finite and not negative."""
    where = f'"phases.{name}'
    if not isinstance(phase, dict):
        return f"{where}\" is {type(phase).__name__}, not an object"
    if "not_applicable" in phase:
        return None if isinstance(phase["not_applicable"], str) else \
            f'{where}.not_applicable" is not text'
    for key in (f.name for f in dataclasses.fields(PhaseStats)):
        value = phase.get(key)
        if key in ("samples_ms", "process_medians_ms"):
            if not isinstance(value or [], list):
                return f'{where}.{key}" is not a list'
            bad = [v for v in value or [] if not (_number(v) and v >= 0)]
            if bad:
                return (f'{where}.{key}" holds {bad[0]!r} ({len(bad)} of {len(value)}): '
                        "a time must be a finite number ≥ 0")
        elif key == "rounds_ms":
            rows = value or []
            if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
                return f'{where}.rounds_ms" is not a list of lists'
            if any(v is not None and not (_number(v) and v >= 0) for r in rows for v in r):
                return f'{where}.rounds_ms" holds a time that is not a finite number ≥ 0'
        elif key != "not_applicable" and value is not None and not _number(value):
            return f'{where}.{key}": {value!r} is not a finite number'
    return None


def saved_problem(data: Mapping[str, Any]) -> Optional[str]:
    """The first field of a saved result (results.json, parsed) that no Result holds — a
    status no job ends with, text that is a number, a NaN or negative sample — named with
    its value; None when it is a result."""
    status = data.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        return f'"status": {json.dumps(status)} is not a status ({", ".join(STATUSES)})'
    for key in _TEXT:
        if not isinstance(data.get(key, ""), str):
            return f'"{key}": {json.dumps(data[key])} is not text'
    if not isinstance(data.get("choices", {}), dict) or not all(
            isinstance(v, (str, type(None))) for v in data.get("choices", {}).values()):
        return '"choices" is not an object of group → option'
    if not isinstance(data.get("overrides", []), list) or not all(
            isinstance(o, str) for o in data.get("overrides", [])):
        return '"overrides" is not a list of text'
    for key in _MAPPINGS:
        if not isinstance(data.get(key) or {}, dict):
            return f'"{key}" is {type(data[key]).__name__}, not an object'
    if not (_number(data.get("duration_s", 0.0)) and data.get("duration_s", 0.0) >= 0):
        return f'"duration_s": {data["duration_s"]!r} is not a finite number ≥ 0'
    if not isinstance(data.get("schema", 1), int) or isinstance(data.get("schema"), bool):
        return f'"schema": {json.dumps(data["schema"])} is not a version number'
    if not isinstance(data.get("phases") or {}, dict):
        return '"phases" is not an object'
    for name, phase in (data.get("phases") or {}).items():
        problem = _phase_problem(name, phase)
        if problem:
            return problem
    return None


class BrokenResults(RnnexpError):
    """A results.json that cannot be read as a result: never counted as one."""

    def __init__(self, path: Path, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")


def phase_stats(samples: Samples, work: Work, no_backward_reason: str = "",
                per_process: Sequence[Samples] = (), drift: Mapping[str, float] = {},
                drift_runs: int = 0) -> dict[str, PhaseStats]:
    """Statistics, rates and raw samples for forward, backward and their per-iteration sum;
    with the samples of each process, the between-process interval too (with each phase's
    drift between runs, `drift`, from `drift_runs` earlier runs, when known)."""

    def between(phase: str) -> dict[str, Any]:
        return dict(drift=drift.get(phase), drift_runs=drift_runs,
                    rounds=[s.rounds for s in per_process])

    phases = {"forward": PhaseStats.of(samples.forward_ms, tokens=work.tokens,
                                       flops=work.flops_fwd, nbytes=work.bytes_fwd,
                                       per_process=[s.forward_ms for s in per_process],
                                       **between("forward"))}
    if samples.backward_ms:
        phases["backward"] = PhaseStats.of(samples.backward_ms, tokens=work.tokens,
                                           flops=work.flops_bwd, nbytes=work.bytes_bwd,
                                           per_process=[s.backward_ms for s in per_process],
                                           **between("backward"))
        phases["total"] = PhaseStats.of(samples.total_ms, tokens=work.tokens,
                                        flops=work.flops_fwd + work.flops_bwd,
                                        nbytes=work.bytes_fwd + work.bytes_bwd,
                                        per_process=[s.total_ms for s in per_process],
                                        **between("total"))
    else:
        phases["backward"] = PhaseStats(not_applicable=no_backward_reason or "not timed")
    return phases


def without_rates(phases: dict[str, PhaseStats]) -> dict[str, PhaseStats]:
    """The phases of a result that is not a valid timing: samples and statistics stay for
    diagnosis, rates go, so nothing downstream can present them as throughput."""
    return {k: p.without_rates() for k, p in phases.items()}


def status_text(status: str, flags: Sequence[str]) -> str:
    """A status with the machine's flags beside it, `ok (busy, high_spread)`: wherever a
    status is shown, a timing taken on a busy machine must not read as a plain ok."""
    return f"{status} ({', '.join(flags)})" if flags else status


def quartiles(phase: PhaseStats) -> tuple[Optional[float], Optional[float]]:
    """The 25th and 75th percentiles of a phase's iterations (None when not timed)."""
    if not phase.timed or not phase.samples_ms:
        return None, None
    q1, q3 = stats.quartiles(phase.samples_ms)
    return q1, q3


@dataclass
class Row:
    """One job as the summary table, CSV, compare and the charts show it."""

    job: str
    label: str
    choices: dict[str, str]
    status: str
    reason: str = ""
    fwd_median_ms: Optional[float] = None
    fwd_iqr_ms: Optional[float] = None
    bwd_median_ms: Optional[float] = None
    bwd_iqr_ms: Optional[float] = None
    tokens_per_s: Optional[float] = None
    run_id: str = ""
    # The machine's flags while it was timed (rnnexp.machine.environment), and the quartiles of the
    # iterations that the charts' whiskers show.
    flags: list[str] = field(default_factory=list)
    fwd_q1_ms: Optional[float] = None
    fwd_q3_ms: Optional[float] = None
    bwd_q1_ms: Optional[float] = None
    bwd_q3_ms: Optional[float] = None

    COLUMNS = ("job", "label", "status", "flags", "fwd_median_ms", "fwd_q1_ms", "fwd_q3_ms",
               "fwd_iqr_ms", "bwd_median_ms", "bwd_q1_ms", "bwd_q3_ms", "bwd_iqr_ms",
               "tokens_per_s", "reason")

    @classmethod
    def of(cls, job: str, r: Result) -> Row:
        fwd, bwd = r.phase("forward"), r.phase("backward")
        (fq1, fq3), (bq1, bq3) = quartiles(fwd), quartiles(bwd)
        return cls(job=job, label=r.label, choices=dict(r.choices), status=r.status,
                   reason=r.reason, fwd_median_ms=fwd.median_ms, fwd_iqr_ms=fwd.iqr_ms,
                   bwd_median_ms=bwd.median_ms, bwd_iqr_ms=bwd.iqr_ms,
                   tokens_per_s=r.rate_phase.tokens_per_s if r.status == OK else None,
                   flags=r.flags, fwd_q1_ms=fq1, fwd_q3_ms=fq3, bwd_q1_ms=bq1, bwd_q3_ms=bq3)

    def columns(self) -> dict[str, Any]:
        values = {c: getattr(self, c) for c in self.COLUMNS}
        values["flags"] = ",".join(self.flags)
        return values
