"""fastrnns-compatible JSON (`bench.py --print-json oss|pep`) on stdout, so existing dashboards
keep working. Upstream labelled CPU seconds as ms; here every value is milliseconds.

- oss: one object `{group: {name: mean_ms}}`, groups `<family>` and `<family>-backward`.
- pep: one `Caffe2Observer {...}` line per timed iteration, metric `<group>-<name>`.

A fastrnns runner name is the backend for nn.LSTM (its `cudnn`/`aten` runners) and the model
otherwise (`jit`, `py`, ...). Only verified results are emitted: a failed one is no timing.
A single run prints after its job, a sweep once at its end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from rnnexp.errors import ConfigError
from rnnexp.results.result import OK, Result
from rnnexp.results.sinks import Jobs, Sink, Sweep

FORMATS = ("oss", "pep")


def runner_name(r: Result) -> str:
    model = r.choices.get("model", "?")
    if model == "lstm":
        return r.backend.name or r.choices.get("backend", "?")
    return model


def groups(r: Result) -> list[tuple[str, str]]:
    """(fastrnns group, phase) pairs: lstm ← forward, lstm-backward ← backward."""
    family = str(r.config.get("model", {}).get("family", "lstm"))
    pairs = [(family, "forward")]
    if r.phase("backward").timed:
        pairs.append((f"{family}-backward", "backward"))
    return pairs


def oss(results: Iterable[Result]) -> str:
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if r.status != OK:
            continue
        for group, phase in groups(r):
            out.setdefault(group, {})[runner_name(r)] = r.phases[phase].mean_ms
    return json.dumps(out)


def pep(results: Iterable[Result]) -> str:
    lines = []
    for r in results:
        if r.status != OK:
            continue
        for group, phase in groups(r):
            for value in r.phases[phase].samples_ms:
                record = {"type": "NET", "metric": f"{group}-{runner_name(r)}", "unit": "ms",
                          "value": str(value)}
                lines.append("Caffe2Observer " + json.dumps(record))
    return "\n".join(lines)


def render(results: Iterable[Result], fmt: str) -> str:
    return oss(results) if fmt == "oss" else pep(results)


class FastrnnsJson(Sink):
    @classmethod
    def check_options(cls, format: str = "oss") -> None:
        if format not in FORMATS:
            raise ConfigError("sinks.fastrnns.format", f"'{format}' is not one of "
                              f"{', '.join(FORMATS)}")

    def __init__(self, format: str = "oss"):
        self.check_options(format)
        self.format = format

    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        if sweep is None:
            print(render([result], self.format), flush=True)

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        print(render([r for _, r in jobs], self.format), flush=True)
