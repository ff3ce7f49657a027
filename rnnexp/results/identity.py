"""What makes two runs the same measurement: `MeasurementKey`, the one definition that
resume, drift, compare and the config check share.

Two runs are the same measurement when they time the same work on the same kind of
device with the same code: equal keys. The key is read from the resolved config (a
`Result`'s, or a composed job's before it runs), so what a preset, a DeepBench problem or
an overridden field set is in it by value, whatever the command line said.

In the key (compared):
- `model`: the model's factory and its options (`model.build`, family, form, ...);
- `backend`: the backend *asked* (its node: `_target_` and options). The backend that ran
  follows from it on a given machine and torch (auto picks cudnn on an NVIDIA GPU), and
  what a run records of it (compile times, graph summaries) is not known before it runs;
- `shape`: every resolved shape field, those overridden on the command line included;
- `deepbench`: the DeepBench problem (empty when none: a run without one reads the same
  whether or not its rnnexp knew of DeepBench);
- `device`: the device asked (kind, index — in a sweep, the index placement chose);
- `dtype` and `seed` (the seed decides the weights and inputs);
- `bench`: the bench options that change the work timed — `WORK_BENCH`: whether backward
  runs, the thread count, iterations per sample (block_ms), the interpreter (python);
- `other`: any other top-level config entry (a preset's own), by value;
- `torch_version` and `commit`: the code that ran. Empty when unknown; `without_versions`
  drops them where versions are what is compared (an A/B between two checkouts).

Deliberately out: where results go (`sinks`), `resume`, and `method` — the bench options
that decide how long or how a measurement is taken (iterations, warm-up, processes,
precision, budget, verification, profiling, drift, quiet, ...). `method` rides along,
not compared: runs that differ only in it are reruns of one measurement (the drift history
pools them). Where a job must match how it was taken too — resume re-takes a job whose
iteration count differs; compare pairs a sweep's 10-iteration run with the other's —
`taken_as()` adds it. The machine a run was on (device name, resolved thread count) is a
partition of a measurement's history (rnnexp.run.drift), not part of the measurement.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from rnnexp.config.schema import Config
    from rnnexp.results.result import Result

# (field, value) pairs, sorted by field: a config node flattened to strings, hashable.
Fields = tuple[tuple[str, str], ...]

# Top-level config entries that are not part of any measurement.
NOT_MEASURED = ("resume", "sinks")
# The bench options that change the work timed; every other bench option is `method`.
WORK_BENCH = ("backward", "num_threads", "block_ms", "python")
GROUPS = ("model", "backend", "shape", "deepbench", "device", "bench")
VERSIONS = ("torch_version", "commit")


def _flat(node: Any, prefix: str = "") -> dict[str, str]:
    """`a.b.c` → value as text; lists as JSON (one value, as MLflow params show them), an
    enum by its name (as OmegaConf writes it into a plain config)."""
    if isinstance(node, Mapping):
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: _text(node)}


def _plain(node: Any) -> Any:
    """A typed config as nested dicts (dataclasses.asdict deep-copies every value: ~10×
    slower, and the check keys every job of a sweep)."""
    if dataclasses.is_dataclass(node):
        return {f.name: _plain(getattr(node, f.name)) for f in dataclasses.fields(node)}
    return node


def _text(value: Any) -> str:
    if isinstance(value, Enum):
        return value.name
    return json.dumps(value) if isinstance(value, (list, tuple)) else str(value)


def _fields(node: Any) -> Fields:
    return tuple(sorted(_flat(node).items())) if isinstance(node, Mapping) and node else ()


@dataclass(frozen=True)
class MeasurementKey:
    """One measurement's identity (see the module's docstring for what is in and out)."""

    model: Fields
    backend: Fields
    shape: Fields
    deepbench: Fields
    device: Fields
    dtype: str
    seed: str
    bench: Fields
    other: Fields = ()
    torch_version: str = ""
    commit: str = ""
    # How it was taken (iterations, processes, precision, ...): carried, not compared.
    method: Fields = field(default=(), compare=False)

    @classmethod
    def of_config(cls, config: Mapping[str, Any] | Config, torch_version: str = "",
                  commit: str = "") -> MeasurementKey:
        """From a resolved config: plain data (rnnexp.measure.job.plain_config, Result.config) or
        the typed `Config` the config check made (the same key)."""
        if dataclasses.is_dataclass(config):
            config = _plain(config)
        bench = dict(config.get("bench") or {})
        deepbench = config.get("deepbench") or {}
        rest = {k: v for k, v in config.items()
                if k not in (*NOT_MEASURED, *GROUPS, "dtype", "seed")}
        return cls(
            model=_fields(config.get("model")), backend=_fields(config.get("backend")),
            shape=_fields(config.get("shape")),
            deepbench=_fields(deepbench) if deepbench.get("set") else (),
            device=_fields(config.get("device")), dtype=_text(config.get("dtype", "")),
            seed=_text(config.get("seed", "")),
            bench=_fields({k: v for k, v in bench.items() if k in WORK_BENCH}),
            other=_fields(rest), torch_version=torch_version or "", commit=commit or "",
            method=_fields({k: v for k, v in bench.items() if k not in WORK_BENCH}))

    @classmethod
    def of_result(cls, result: Result) -> MeasurementKey:
        torch_version = result.platform.torch_version if result.platform else ""
        return cls.of_config(result.config, torch_version, result.git_commit)

    def without_versions(self) -> MeasurementKey:
        """The same measurement whatever code took it: what an A/B between checkouts or
        torch builds matches on."""
        return dataclasses.replace(self, torch_version="", commit="")

    def taken_as(self) -> tuple[MeasurementKey, Fields]:
        """The measurement and how it was taken: equal for a rerun of the same job."""
        return self, self.method

    def fields(self, method: bool = False) -> dict[str, str]:
        """The key as flat config fields (`shape.seq_len`, `dtype`, ...), versions as
        `torch_version` and `commit` when known; with `method`, the bench options of how it
        was taken too."""
        out: dict[str, str] = {}
        for group in GROUPS:
            out.update({f"{group}.{k}": v for k, v in getattr(self, group)})
        if method:
            out.update({f"bench.{k}": v for k, v in self.method})
        out.update({"dtype": self.dtype, "seed": self.seed, **dict(self.other)})
        out.update({v: getattr(self, v) for v in VERSIONS if getattr(self, v)})
        return out

    def to_json(self) -> dict[str, Any]:
        """The compared parts as plain data (the drift history stores it)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.compare:
                value = getattr(self, f.name)
                out[f.name] = dict(value) if isinstance(value, tuple) else value
        return out


def duplicates(keys: Sequence[MeasurementKey]) -> list[list[int]]:
    """Groups of job numbers (two or more) that take the same measurement the same way."""
    taken = [k.taken_as() for k in keys]
    counts = Counter(taken)
    return [[n for n, t in enumerate(taken) if t == same] for same, c in counts.items()
            if c > 1]
