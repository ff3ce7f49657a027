"""A recorded grid as a simulator of the measurement ("Tuning the Tuner", 2025: replaying a
recorded run compares strategies at a fraction of the cost).

A recording holds every cell of a space as the search measures it — windows of cells with
the baseline, interleaved — compactly: each cell's status and reason, the per-process round
medians of its timed phase (`rounds_ms`, [process][round]) and its window baseline's, its
peak memory and time to a first result. `Replay.measure` stands in for
rnnexp.app.search.window.measure: a window asked for returns each cell's recorded values,
paired with the baseline of the window it was recorded in (rnnexp.analysis.significance, as
measured); `Replay.refusal` stands in for the plan's check. The search above them is the one
that runs on real windows.

Replayed as recorded, a cell measured twice (the confirmation) repeats its numbers. Given a
random generator, every measurement draws its noise again from the recorded per-process
values (`redrawn`): a new level for each process, around the processes' mean with the
spread between them, and the rounds resampled — so a confirmation is a fresh window.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from rnnexp.analysis import significance
from rnnexp.app.search import precheck, window
from rnnexp.app.search.space import Space
from rnnexp.measure.records import RSS_HWM, PhaseMemory
from rnnexp.models.compile_cost import CompileCost
from rnnexp.results.result import OK, UNSUPPORTED, PhaseStats, Result


@dataclass
class Recording:
    grid: list[str]  # the space's command line
    cells: dict[tuple[str, ...], dict[str, Any]]  # a cell's own overrides → its record
    bases: list[dict[str, Any]]  # each recorded window's baseline
    _differences: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = json.loads(gzip.decompress(Path(path).read_bytes()))
        return cls.of(data)

    @classmethod
    def of(cls, data: dict) -> Recording:
        return cls(list(data["grid"]), {tuple(c["overrides"]): c for c in data["cells"]},
                   [w["base"] for w in data["windows"]])

    def speedup(self, key: tuple[str, ...]) -> Optional[float]:
        """The cell's recorded speedup against its window's baseline (None: not timed)."""
        d = self.difference(key)
        return d.speedup if d is not None else None

    def difference(self, key: tuple[str, ...]) -> Optional[significance.Difference]:
        if key not in self._differences:  # a bootstrap each: computed once per cell
            self._differences[key] = self._paired(key)
        return self._differences[key]

    def _paired(self, key: tuple[str, ...]) -> Optional[significance.Difference]:
        c = self.cells[key]
        if c["status"] != OK or c.get("window") is None or not c.get("rounds_ms"):
            return None
        base = self.bases[c["window"]]
        return significance.paired(base["rounds_ms"], c["rounds_ms"])

    def best(self) -> tuple[tuple[str, ...], float]:
        """The grid's fastest cell and its speedup."""
        timed = {k: s for k in self.cells if (s := self.speedup(k)) is not None}
        key = max(timed, key=lambda k: timed[k])
        return key, timed[key]


def _result(record: dict[str, Any]) -> Result:
    """What the search reads of a result, rebuilt from a cell's record."""
    rounds = record.get("rounds_ms") or []
    total = PhaseStats(median_ms=record.get("median_ms"), rounds_ms=rounds) if rounds else \
        PhaseStats(not_applicable=record.get("reason") or "not timed")
    peak = record.get("peak_mb")
    first = record.get("compile_s")
    return Result(choices={}, overrides=list(record["overrides"]), config={},
                  status=record["status"], reason=record.get("reason", ""),
                  phases={"total": total},
                  memory=PhaseMemory(kind=RSS_HWM, forward_mb=peak) if peak is not None
                  else None,
                  compile_cost=CompileCost(build_s=first, first_call_ms=0.0)
                  if first is not None else None)


Rounds = list[list[Optional[float]]]


def redrawn(base: Rounds, cell: Rounds, rng: random.Random) -> tuple[Rounds, Rounds]:
    """A cell's and its baseline's rounds measured again, as a simulation: each process of
    each side gets a new level (log-normal around its side's mean process level, with the
    spread between its processes), its rounds keep their shape around it, and rounds are
    resampled with replacement — the same rounds on both sides, which stay paired."""
    width = max(len(r) for r in (*base, *cell))
    picks = [rng.randrange(width) for _ in range(width)]

    def side(rows: Rounds) -> Rounds:
        logs = [[math.log(v) if v else None for v in row] for row in rows]
        levels = [statistics.fmean(x for x in row if x is not None) for row in logs]
        centre = statistics.fmean(levels)
        spread = statistics.stdev(levels) if len(levels) > 1 else 0.0
        out = []
        for row, level in zip(logs, levels, strict=True):
            new = rng.gauss(centre, spread)
            out.append([math.exp(row[i] - level + new) if i < len(row) and row[i] is not None
                        else None for i in picks])
        return out

    return side(base), side(cell)


class Replay:
    """The measurement of a recorded space, replayed; `windows` counts what was asked.
    `noise`: measurements draw their noise again (`redrawn`) from this generator."""

    def __init__(self, recording: Recording, space: Space,
                 noise: Optional[random.Random] = None):
        self.recording, self.space, self.noise = recording, space, noise
        self.windows = 0
        self.measured: list[tuple[str, ...]] = []

    def _measured(self, overrides: Sequence[str]) -> window.Measured:
        key = tuple(overrides)
        record = self.recording.cells[key]
        difference = self.recording.difference(key)
        if self.noise is not None and difference is not None:
            base, cell = redrawn(self.recording.bases[record["window"]]["rounds_ms"],
                                 record["rounds_ms"], self.noise)
            difference = significance.paired(base, cell)
        return window.Measured(list(overrides), _result(record), difference)

    def measure(self, cells: Sequence[Sequence[str]], baseline: Sequence[str],
                fixed: Sequence[str], folder: Path) -> window.Window:
        self.windows += 1
        self.measured += [tuple(c) for c in cells]
        base = self._measured(baseline)
        return window.Window(base, [self._measured(c) for c in cells], folder)

    def refusal(self, command_line: Sequence[str]) -> Optional[precheck.Refusal]:
        own = tuple(command_line[len(self.space.fixed):])
        record = self.recording.cells[own]
        if record["status"] == UNSUPPORTED:
            return precheck.Refusal(record.get("reason", ""), None)
        return None
