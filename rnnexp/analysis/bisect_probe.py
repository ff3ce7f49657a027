"""A bisection's probes and its course: each probe a sweep of the good end and the probed
environment measured interleaved (`python -m rnnexp -m … bench.python=GOOD,PROBE`), read back
and judged — by round (rnnexp.analysis.significance.paired) on time, or by the count's
tolerance (significance.counts) with `bench.metric=instructions` — and the search that asks
rnnexp.analysis.bisect for the next probe until the breakpoint is known, with its outcome.

A probe whose sweep did not run, whose environment could not run rnnexp, or whose
measurement crashed or failed verification is failed, never a slowdown; the good end failing
ends the bisection with a one-line error.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from rnnexp.analysis import significance, sweeps
from rnnexp.analysis.bisect import Bisection, Probe
from rnnexp.analysis.history import INSTRUCTIONS, TIME
from rnnexp.analysis.sweeps import Run
from rnnexp.errors import RnnexpError
from rnnexp.results.result import OK


def command(overrides: Sequence[str], good: str, probe: str, folder: Path,
            metric: str = TIME) -> list[str]:
    """The probe's sweep: the measurement under both interpreters, interleaved."""
    sinks = [] if any(o.startswith("sinks=") for o in overrides) else ["sinks=[json]"]
    counted = ["bench.metric=instructions"] if metric == INSTRUCTIONS else []
    return [sys.executable, "-m", "rnnexp", "-m", *overrides, *counted, *sinks,
            f"bench.python={good},{probe}", f"hydra.sweep.dir={folder}"]


def measure(index: int, overrides: Sequence[str], good: str, probe: str, folder: Path,
            metric: str = TIME) -> Probe:
    """Run the probe's sweep in `folder` (its output in probe.log) and judge it."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "probe.log", "w") as log:
        done = subprocess.run(command(overrides, good, probe, folder, metric), stdout=log,
                              stderr=subprocess.STDOUT)
    return judged(index, folder, good, probe, done.returncode, metric)


def _last_error(folder: Path) -> str:
    log = folder / "probe.log"
    lines = [ln for ln in (log.read_text(errors="replace") if log.exists() else "").splitlines()
             if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return (errors or lines or ["no output"])[-1].strip()[:200]


def _phase(run: Run, metric: str) -> str:
    if metric == INSTRUCTIONS:
        counted = run.result.instructions.phases if run.result.instructions else {}
        return "total" if "total" in counted else "forward"
    return "total" if run.result.phase("total").timed else "forward"


def difference(base: Run, cand: Run, metric: str) -> Optional[significance.Difference]:
    """The probe against the good end: paired by round on time; on counts, the count's
    tolerance. None when the candidate was not counted."""
    phase = _phase(base, metric)
    if metric == INSTRUCTIONS:
        a, b = base.result.instructions, cand.result.instructions
        if a is None or b is None or phase not in a.phases or phase not in b.phases:
            return None
        return significance.counts(a.phases[phase].process_medians or [a.phases[phase].median],
                                   b.phases[phase].process_medians or [b.phases[phase].median])
    return significance.paired(base.result.phase(phase).rounds_ms,
                               cand.result.phase(phase).rounds_ms)


def judged(index: int, folder: Path, good: str, probe: str, returncode: int,
           metric: str = TIME) -> Probe:
    """The probe's sweep read back: PROBE against GOOD, or why it failed."""
    try:
        runs = sweeps.from_folder(folder).runs
    except RnnexpError:
        return Probe(index, failed=f"did not run (exit {returncode}): {_last_error(folder)}")
    by_python = {r.config.get("bench.python"): r for r in runs}
    base, cand = by_python.get(good), by_python.get(probe)
    if base is None or base.row.status != OK:
        why = f"{base.row.status}: {base.row.reason}" if base else _last_error(folder)
        raise RnnexpError(f"the good end did not measure in {folder}: {why}")
    if cand is None or cand.row.status != OK:
        why = f"{cand.row.status}: {cand.row.reason}" if cand else _last_error(folder)
        return Probe(index, failed=why[:200])
    diff = difference(base, cand, metric)
    if diff is None:
        return Probe(index, failed="not counted: no instruction count in its result")
    out = Probe(index, difference=diff)
    if not out.usable:
        out.failed = f"could not judge: {diff.why_not or 'no interval'}"
    return out


def search(b: Bisection, probe: Callable[[int], Probe], max_probes: int,
           seen: Callable[[Bisection, Probe], None] = lambda b, p: None) -> Bisection:
    """Probe what `b` asks next until it is done or `max_probes` were taken; `seen` hears of
    each probe as it comes."""
    while len(b.probes) < max_probes:
        m = b.next_probe()
        if m is None:
            break
        p = probe(m)
        b.observe(p)
        seen(b, p)
    return b


def after_each(b: Bisection) -> list[tuple[int, float]]:
    """The most likely first slow environment and its probability after each probe."""
    shadow, out = Bisection(b.n, b.confidence), []
    for p in b.probes:
        shadow.observe(p)
        out.append(shadow.culprit())
    return out


@dataclass
class Outcome:
    """How a bisection ended: the bad end not slower; the breakpoint known (`culprit` with
    probability `p`, its last probe `effect`); or only a range `low`–`high`."""

    real: bool
    culprit: int
    p: float
    delta: float  # the bad end's log slowdown and its standard error
    se: float
    low: int = 0
    high: int = 0
    effect: Optional[Probe] = None

    @property
    def known(self) -> bool:
        return self.real and self.low == 0

    def size_text(self) -> str:
        return (f"{100 * math.expm1(self.delta):+.1f}% (± {100 * 1.96 * self.se:.1f})"
                if math.isfinite(self.delta) else "not measured")


def outcome(b: Bisection) -> Outcome:
    culprit, p = b.culprit()
    delta, se = b.effect()
    out = Outcome(real=bool(b.effect_is_real()), culprit=culprit, p=p, delta=delta, se=se)
    if out.real and p < b.confidence:
        out.low, out.high = b.likely_range()
    at = [q for q in b.probes if q.index == culprit and not q.failed]
    out.effect = at[-1] if at else None
    return out


def reproduce(overrides: Sequence[str], before: str, after: str, metric: str = TIME,
              repo: Optional[Path] = None, commit: str = "") -> list[str]:
    """The commands that show the culprit's effect again: its change, the interleaved A/B of
    the environment before it against it, and the comparison."""
    counted = " bench.metric=instructions" if metric == INSTRUCTIONS else ""
    lines = [f"python -m rnnexp -m {' '.join(overrides)}{counted} bench.python={before},{after}",
             f"python -m rnnexp compare --baseline bench.python={before}"]
    if commit:
        lines.insert(0, f"git -C {repo} show {commit}")
    return lines
