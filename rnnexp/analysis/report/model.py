"""What a report shows, as plain data: the templates and figures read these and nothing else,
so a report can be built from any source — a sweep's runs, a comparison, a history.

Every configuration is a `Cell` with a number; the number is the same in the status matrix,
the forest plot, the roofline, the verdict table and the list of cells, and opens the cell's
details. A history's series come in as `Series` (points with their intervals and the change
points found in them): pass them to `Report.series` and the page shows a section for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

# A cell's kind, which colours it: timed and trusted; timed on a machine flagged busy,
# oversubscribed, with high spread, drifting or throttled; refused before any timing (with
# its reason); timed but its verification failed (with its numbers); anything else that
# stopped it (crashed, recompiled inside the timed loop, interrupted).
OK, FLAGGED, REFUSED, INVALID, FAILED = "ok", "flagged", "refused", "invalid", "failed"
KINDS = (OK, FLAGGED, REFUSED, INVALID, FAILED)

# A compared phase's verdict, as the page names it.
FASTER, SLOWER, SAME, CANNOT_TELL = "faster", "slower", "~", "cannot tell"


@dataclass
class Section:
    """A titled table in a cell's details: name → value rows, or rows under `columns`."""

    title: str
    rows: list[list[str]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Verdict:
    """One phase of a cell against its baseline."""

    number: int  # the candidate cell's
    label: str
    phase: str  # fwd | bwd
    baseline: str  # who the baseline is: "#3", or a job of the baseline sweep
    baseline_ms: str  # the levels the speedup is the ratio of (as compare's table shows)
    candidate_ms: str
    speedup: float  # baseline ÷ candidate (>1: the candidate is faster)
    low: float  # its 95% interval (nan: none could be formed)
    high: float
    verdict: str  # FASTER | SLOWER | SAME | CANNOT_TELL
    text: str  # as compare's table shows it: "1.25× (1.10–1.40)", "~", "cannot tell ±12%"
    method: str  # how it was paired: "paired by round" | "run against run"
    p_holm: float
    why_not: str = ""  # why nothing could be said
    regression: bool = False  # slower, and beyond the gate when there is one
    processes: str = ""  # each side's processes: "3/3", "3/3 shared" (the same workers)
    flagged: bool = False  # a side was timed on a flagged machine

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass
class Cell:
    """One configuration (job) of the report."""

    number: int
    job: str  # its folder in the sweep, or its MLflow run name
    label: str
    axes: dict[str, str]  # its values of the fields that vary
    status: str  # as recorded: ok, unsupported, verification_failed, crashed, ...
    kind: str  # one of KINDS
    headline: str  # "ok", "ok (busy)", "refused", "verification failed", "crashed"
    reason: str = ""  # one line: the refusal's reason, the verification's numbers, the crash
    flags: list[str] = field(default_factory=list)
    fwd: str = "—"  # median [25th, 75th percentile], ms
    bwd: str = "—"
    # bench.metric=instructions: median instructions per iteration and their range over
    # every counted iteration ("" where the cell was not counted).
    fwd_instr: str = ""
    bwd_instr: str = ""
    is_baseline: bool = False
    verdicts: list[Verdict] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    command: str = ""  # the command that measures it again
    # Samples over rounds, per phase: {phase: [[ms per round, per process]]} or, without
    # rounds, {phase: [[samples]]}; `rounds` says which.
    samples: dict[str, list[list[Optional[float]]]] = field(default_factory=dict)
    rounds: bool = False
    samples_note: str = ""

    @property
    def regression(self) -> bool:
        return any(v.regression for v in self.verdicts)


@dataclass
class MatrixRow:
    values: list[str]  # its values of the row fields
    cells: list[list[Cell]]  # one list per column (several runs can share a position)


@dataclass
class Matrix:
    """The cells laid out by the fields that vary: rows by all but one, columns by that one
    (the backend where it varies)."""

    row_fields: list[str]
    column_field: str  # "" when one field varies: one column
    columns: list[str]
    rows: list[MatrixRow]


@dataclass
class RooflinePoint:
    number: int
    label: str
    intensity: float  # FLOP per byte of minimum traffic
    gflops: float
    peak_gflops: float
    peak_gbps: float
    where: str  # the device and dtype whose ceilings apply
    pct_attainable: Optional[float] = None
    bound: str = ""


@dataclass
class Roofline:
    points: list[RooflinePoint]
    missing: int = 0  # ok cells that carry no roofline metrics


@dataclass
class Comparison:
    """The cells against their baselines."""

    baseline: str  # what the baseline is: "model=lstm", "sweep <name>"
    verdicts: list[Verdict]
    how_judged: str  # compare's one line
    min_effect: float  # fraction: differences below it are not reported
    gate: Optional[float] = None  # --fail-on-regression, a fraction
    regressions: list[str] = field(default_factory=list)  # compare's lines for the gate
    flagged: int = 0  # cells whose runs were timed on a flagged machine


@dataclass
class EnvRow:
    name: str
    values: list[str]  # one per column

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


@dataclass
class Environment:
    """Versions, device, clocks and code of each side (one column without a comparison)."""

    columns: list[str]
    rows: list[EnvRow]

    @property
    def differences(self) -> list[EnvRow]:
        return [r for r in self.rows if r.differs]


@dataclass
class SeriesPoint:
    at: str  # what the point is (a commit, a torch version, a date)
    median_ms: float
    low_ms: Optional[float] = None  # its interval, when known
    high_ms: Optional[float] = None
    note: str = ""  # shown on hover: the run, the sweep, the machine


@dataclass
class ChangePoint:
    index: int  # the first point of the new level
    before_ms: float
    after_ms: float
    note: str = ""  # e.g. "commit abc123: +12% (p=0.001)"

    @property
    def change(self) -> float:
        """Relative change of the level (0.1 = 10% slower)."""
        return self.after_ms / self.before_ms - 1 if self.before_ms else math.inf

    @property
    def verdict(self) -> str:
        return SLOWER if self.change > 0 else FASTER


@dataclass
class Series:
    """One measurement's history: its points in order and the change points found in them."""

    title: str  # the measurement: its label and phase
    points: list[SeriesPoint]
    change_points: list[ChangePoint] = field(default_factory=list)
    unit: str = "ms"
    note: str = ""  # how the change points were found


@dataclass
class Report:
    title: str
    generated: str  # when, and by which rnnexp code
    sources: list[str]  # the sweeps it reads, with their MLflow parent runs
    cells: list[Cell]
    matrix: Matrix
    comparison: Optional[Comparison] = None
    roofline: Optional[Roofline] = None
    environment: Optional[Environment] = None
    series: list[Series] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {k: sum(c.kind == k for c in self.cells) for k in KINDS}

    @property
    def counted(self) -> bool:
        """Some cell carries instruction counts: the cells' table shows them."""
        return any(c.fwd_instr or c.bwd_instr for c in self.cells)

    def cell(self, number: int) -> Cell:
        return self.cells[number - 1]
