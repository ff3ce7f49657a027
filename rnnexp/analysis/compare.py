"""Pairing and verdicts of `rnnexp compare` (the command: rnnexp.app.commands.compare): each
run's baseline — within one sweep, the run that differs from it only in one key; across two
sweeps, the run that measured the same configuration — and every pair judged at the unit of
replication, the process (rnnexp.analysis.significance): paired by round for jobs measured in
the same interleaved window, run against run otherwise, the node as a random effect across
cluster nodes; Holm-corrected across all cells. Which sweeps and runs are compared:
rnnexp.analysis.compare_select; how the result is shown: rnnexp.analysis.compare_render."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from rnnexp.results import exit_codes
from rnnexp.results.report import print_error, print_warning

# What judges results (SciPy) is imported by the functions that use it.
if TYPE_CHECKING:
    from rnnexp.analysis import nodes
    from rnnexp.analysis.significance import Difference
    from rnnexp.analysis.sweeps import Run, Sweep


def linked(key: str, name: str) -> bool:
    """`name` is `key` or one of its sub-fields (model.hidden_size for model)."""
    return name == key or name.startswith(key + ".")


def baselines_within(runs: list[Run], key: str, value: str) -> list[Optional[Run]]:
    """Each run's baseline: the run whose measurement (rnnexp.results.identity, taken the same way)
    differs from it only in `key` (and its sub-fields)."""
    def rest(r: Run):
        return tuple(sorted((k, v) for k, v in r.identity.items() if not linked(key, k)))

    single = [r for r in runs if r.row.fwd_median_ms is not None and
              r.config.get(key) == value]
    base_of = {rest(r): r for r in single}
    return [base_of.get(rest(r)) or (single[0] if len(single) == 1 else None) for r in runs]


def match_keys(*groups: Sequence[Run]) -> list[str]:
    """The entries of the runs' measurement keys that vary inside either sweep: they tell
    measurements apart. An entry constant inside each sweep but different between them (a
    changed option; the git commit and torch version are never in the keys compared) is
    what the A/B comparison is about."""
    keys = set()
    for runs in groups:
        for k in {k for r in runs for k in r.identity}:
            if len({r.identity.get(k) for r in runs}) > 1:
                keys.add(k)
    return sorted(keys)


def baselines_across(runs: list[Run], base: list[Run]) -> list[Optional[Run]]:
    """Each run's counterpart in the baseline sweep (same values of the varying entries);
    several counterparts (repeats) count as more runs of one baseline."""
    keys = match_keys(runs, base)

    def key(r: Run):
        return tuple(r.identity.get(k) for k in keys)

    from rnnexp.results.result import OK

    found: dict[tuple, Run] = {}
    for b in base:
        if b.row.status != OK:
            continue
        if key(b) in found:
            found[key(b)].repeats.append(b)
        else:
            found[key(b)] = b
    return [found.get(key(r)) for r in runs]


def differs(runs: Sequence[Run], base: Sequence[Run]) -> list[str]:
    """What two sweeps differ in: entries constant inside each but not the same in both, and
    the torch and code versions."""
    def constant(group: Sequence[Run]) -> dict[str, str]:
        out = {}
        for k in {k for r in group for k in r.config}:
            values = {r.config.get(k) for r in group}
            if len(values) == 1:
                out[k] = values.pop()
        for name, get in (("torch", lambda r: r.result.platform.torch_version
                           if r.result.platform else ""),
                          ("commit", lambda r: r.result.git_commit[:10])):
            values = {get(r) for r in group}
            if len(values) == 1:
                out[name] = values.pop()
        return out

    a, b = constant(runs), constant(base)
    return [f"{k}: {b[k]} → {a[k]}" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]


Cells = dict[tuple[int, str], "Difference"]  # (run index, phase) → difference


def difference(base: Run, run: Run, phase: str,
               between_nodes: Optional[nodes.Spread] = None) -> Optional[Difference]:
    """Paired by round when both were measured in the same interleaved window, else run
    against run — with the node as a random effect (`between_nodes`: its spread) when the two
    were measured on different cluster nodes; None when a side has no timing for the phase.
    A side timed on a busy machine says nothing of the difference."""
    from rnnexp.analysis import nodes, significance
    from rnnexp.machine.environment import BUSY

    b, c = base.stats(phase), run.stats(phase)
    if not (b.timed and c.timed):
        return None
    if base.window is not None and base.window == run.window and b.rounds_ms and c.rounds_ms:
        d = significance.paired(base.side(phase), run.side(phase))
    elif nodes.crossed(base, run):
        d = nodes.across(base, run, phase, between_nodes)
    else:
        base_level, run_level = base.level(phase), run.level(phase)
        assert base_level is not None and run_level is not None
        d = significance.between_runs(base_level, run_level)
    busy = next((r for r in (base, run) if BUSY in r.flags), None)
    if busy is not None:
        return significance.cannot_tell(d, f"{busy.row.label} was timed on a busy machine")
    return d


def judge(runs: list[Run], bases: list[Optional[Run]], min_effect: float,
          equivalence: Optional[float] = None) -> Cells:
    """Every timed run against its baseline, per phase, Holm-corrected across all cells."""
    from rnnexp.analysis import nodes, significance
    from rnnexp.analysis.sweeps import PHASES
    from rnnexp.results.result import OK

    where, diffs = [], []
    between = {p: nodes.spread(sweeps_of(runs, bases), p) for p, _ in PHASES}
    for i, (run, base) in enumerate(zip(runs, bases, strict=True)):
        if base is None or base is run or run.row.status != OK or base.row.status != OK:
            continue
        for p, _ in PHASES:
            d = difference(base, run, p, between[p])
            if d is not None:
                where.append((i, p))
                diffs.append(d)
    significance.decide(diffs, min_effect=min_effect, equivalence=equivalence)
    cells = dict(zip(where, diffs, strict=True))
    for i, (run, base) in enumerate(zip(runs, bases, strict=True)):
        if base is None or base is run or run.row.status != OK or base.row.status != OK:
            continue
        for p, _ in PHASES:  # bench.metric=instructions on both sides: judged on counts
            b, c = base.counts(p), run.counts(p)
            if b and c:
                cells[(i, p)] = significance.calibrate(significance.counts(b, c),
                                                       cells.get((i, p)))
    return cells


def sweeps_of(runs: list[Run], bases: Sequence[Optional[Run]]) -> list[list[Run]]:
    """The runs compared, by sweep: the baselines are a sweep of their own with --against."""
    mine = {id(r) for r in runs}
    others = list({id(b): b for b in bases if b is not None and id(b) not in mine}.values())
    return [runs, others] if others else [runs]


def flagged(run: Optional[Run]) -> bool:
    return bool(run and run.flags)


def doubtful_cells(runs: list[Run], bases: Optional[list[Optional[Run]]], cells: Cells) -> int:
    """How many cells involve a run whose environment was flagged."""
    if bases is None:
        return 0
    return sum(flagged(runs[i]) or flagged(bases[i]) for i, _ in cells)


def regressions(runs: list[Run], cells: Cells, pct: float) -> list[str]:
    """One line per cell significantly slower than its baseline by at least pct %."""
    lines = []
    for (i, p), d in sorted(cells.items()):
        if d.verdict == "slower" and 100 * d.slowdown >= pct:
            judged = (f"interval {d.low:.3f}–{d.high:.3f} by the count's tolerance, "
                      f"{d.method}" if d.unit == "instructions" else
                      f"95% interval {d.low:.3f}–{d.high:.3f}, {d.method}, Holm-corrected "
                      f"p={d.p_holm:.2g}")
            lines.append(f"regression: {runs[i].row.label} {p} {100 * d.slowdown:.1f}% slower "
                         f"than its baseline (speedup {d.speedup:.3f}×, {judged})"
                         + (f"; {d.note}" if d.note else ""))
    return lines


@dataclass
class Comparison:
    """A sweep's runs, each with its baseline (None: nothing compared), and the cells judged."""

    sweep: Sweep
    runs: list[Run]
    bases: Optional[list[Optional[Run]]]
    title: str
    cells: Cells = field(default_factory=dict)


def verdict(c: Comparison, fail_on_regression: Optional[float]) -> int:
    """Warn of cells on a flagged machine; with --fail-on-regression, the gate's exit code."""
    doubtful = doubtful_cells(c.runs, c.bases, c.cells)
    if doubtful:
        print_warning(f"{doubtful} of {len(c.cells)} cells (marked !) compare runs timed on a "
                      "machine flagged busy, oversubscribed, with high spread or drifting: "
                      "their differences may come from the machine (a busy one's cannot "
                      "tell) — rerun with bench.quiet=wait")
    if fail_on_regression is None:
        return 0
    found = regressions(c.runs, c.cells, fail_on_regression)
    for line in found:
        print_error(line)
    return exit_codes.REGRESSION if found else 0
