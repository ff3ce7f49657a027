"""fastrnns-compatible JSON (`bench.py --print-json oss|pep`) so existing dashboards keep
working. Upstream labelled CPU seconds as ms; here every value is milliseconds.

- oss: one object `{group: {name: mean_ms}}`, groups `<family>` and `<family>-backward`.
- pep: one `Caffe2Observer {...}` line per timed iteration, metric `<group>-<name>`.

A fastrnns runner name is the backend for nn.LSTM (its `cudnn`/`aten` runners) and the model
otherwise (`jit`, `py`, ...). Only verified results are emitted: a failed one is no timing.
"""

from __future__ import annotations

import json
from typing import Iterable

from rnnexp.results import OK, Result

FORMATS = ("oss", "pep")


def runner_name(r: Result) -> str:
    model = r.choices.get("model", "?")
    if model == "lstm":
        return r.backend.get("name") or r.choices.get("backend", "?")
    return model


def groups(r: Result) -> list[tuple[str, str]]:
    """(fastrnns group, phase) pairs: lstm ← forward, lstm-backward ← backward."""
    family = str(r.config.get("model", {}).get("family", "lstm"))
    pairs = [(family, "forward")]
    if "median_ms" in r.phases.get("backward", {}):
        pairs.append((f"{family}-backward", "backward"))
    return pairs


def oss(results: Iterable[Result]) -> str:
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if r.status != OK:
            continue
        for group, phase in groups(r):
            out.setdefault(group, {})[runner_name(r)] = r.phases[phase]["mean_ms"]
    return json.dumps(out)


def pep(results: Iterable[Result]) -> str:
    lines = []
    for r in results:
        if r.status != OK:
            continue
        for group, phase in groups(r):
            for value in r.phases[phase]["samples_ms"]:
                record = {"type": "NET", "metric": f"{group}-{runner_name(r)}", "unit": "ms",
                          "value": str(value)}
                lines.append("Caffe2Observer " + json.dumps(record))
    return "\n".join(lines)


def render(results: Iterable[Result], fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"fastrnns format: '{fmt}' is not one of {', '.join(FORMATS)}")
    return oss(results) if fmt == "oss" else pep(results)
