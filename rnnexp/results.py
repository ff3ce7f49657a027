"""The result of one job: what ran, where, how fast, and whether it was verified.

`results.json` in the job's Hydra output folder is the record every other sink (console
table, MLflow, fastrnns JSON) is derived from, and what `rnnexp.sync` uploads later.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rnnexp import stats
from rnnexp.timing import Samples
from rnnexp.workload import Work

RESULTS_FILE = "results.json"
SCHEMA_VERSION = 1

# Status of a job.
OK = "ok"  # timed, verified (or verification skipped on request)
INVALID = "verification_failed"  # timed numbers exist but are not a valid result
UNSUPPORTED = "unsupported"  # declined before any timing, with a reason
CRASHED = "crashed"  # an exception stopped the job (recorded, then re-raised)
INTERRUPTED = "interrupted"  # Ctrl-C


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
    backend: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    work: dict[str, float] = field(default_factory=dict)
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    platform: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    schema: int = SCHEMA_VERSION

    @property
    def label(self) -> str:
        """model·backend·shape·device, e.g. jit_premul·te·small·cpu."""
        keys = ("model", "backend", "shape")
        return "·".join([*(self.choices.get(k, "?") for k in keys), self.device or "?"])

    def median(self, phase: str) -> Optional[float]:
        return self.phases.get(phase, {}).get("median_ms")

    def as_dict(self) -> dict:
        return asdict(self)

    def save(self, folder: Path) -> Path:
        path = Path(folder) / RESULTS_FILE
        path.write_text(json.dumps(self.as_dict(), indent=2, default=str))
        return path

    @classmethod
    def load(cls, path: Path) -> Result:
        data = json.loads(Path(path).read_text())
        return cls(**data)


def phase_summaries(samples: Samples, work: Work, no_backward_reason: str = ""
                    ) -> dict[str, dict[str, Any]]:
    """Statistics, rates and raw samples for forward, backward and their per-iteration sum."""
    phases: dict[str, dict[str, Any]] = {}
    parts = [("forward", samples.forward_ms, work.flops_fwd, work.bytes_fwd)]
    if samples.backward_ms:
        parts.append(("backward", samples.backward_ms, work.flops_bwd, work.bytes_bwd))
        parts.append(("total", samples.total_ms, work.flops_fwd + work.flops_bwd,
                      work.bytes_fwd + work.bytes_bwd))
    for name, values, flops, nbytes in parts:
        summary = stats.summarize(values)
        summary.update(stats.rates(summary["median_ms"], tokens=work.tokens, flops=flops,
                                   nbytes=nbytes))
        # Undefined statistics (a median interval from too few samples) are null, not NaN:
        # results.json stays strict JSON and MLflow gets no NaN metrics.
        summary = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                   for k, v in summary.items()}
        summary["samples_ms"] = list(values)
        phases[name] = summary
    if not samples.backward_ms:
        phases["backward"] = {"not_applicable": no_backward_reason or "not timed"}
    return phases
