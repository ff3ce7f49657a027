"""Which node measured a run, and comparisons between runs of different nodes: the node as a
random effect.

The same code runs at different speeds on nodes of one type — Laaber et al. (EMSE 2019) saw
coefficients of variation from 0.03% to more than 100% across cloud instances — and a
comparison holds when both sides share a node, in random order. rnnexp's SLURM launcher
measures each interleaved window on one node, so a pair compared paired by round never
crosses nodes; two runs of different windows may. Such a pair is compared run against run
(rnnexp.analysis.significance.between_runs) with one more variance component on each side:
the spread between nodes, σ²_node. It is estimated from the configurations a compared sweep
measured on more than one node — the pooled variance of each one's log level across its
nodes, which holds the run-to-run drift too, so it errs wide. Where no configuration was
measured on two nodes the spread is unknown, and so is the difference: the cell says so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from rnnexp.analysis import significance
from rnnexp.analysis.sweeps import Run
from rnnexp.results.result import OK

ACROSS = "across nodes"


def node_of(run: Run) -> str:
    """The cluster node the run was measured on ("" outside a scheduler's job)."""
    env = run.result.environment
    return env.scheduler.get("node", "") if env and env.scheduler else ""


def crossed(base: Run, run: Run) -> bool:
    """Both sides were measured on known, different nodes."""
    a, b = node_of(base), node_of(run)
    return bool(a and b and a != b)


@dataclass(frozen=True)
class Spread:
    """The variance of a configuration's log level between nodes, and its degrees of freedom
    (how many node-to-node differences it rests on)."""

    variance: float
    df: int
    configurations: int  # how many configurations, each on ≥ 2 nodes, it comes from


def spread(sweeps: Sequence[Sequence[Run]], phase: str) -> Optional[Spread]:
    """σ²_node in `phase`, pooled over the configurations that one sweep measured on several
    nodes (None: no sweep did). Each sweep on its own: the same configuration in two sweeps
    differs by what the sweeps differ in — what an A/B asks about."""
    squares, df, count = 0.0, 0, 0
    for runs in sweeps:
        levels: dict[object, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for run in runs:
            node, level = node_of(run), run.level(phase)
            if node and level is not None and run.row.status == OK:
                levels[run.key][node].append(level.log_center)
        for by_node in levels.values():
            if len(by_node) < 2:
                continue
            means = np.array([np.mean(v) for v in by_node.values()])
            squares += float(np.sum((means - means.mean()) ** 2))
            df += len(means) - 1
            count += 1
    return Spread(squares / df, df, count) if df else None


@dataclass
class NodeLevel(significance.Level):
    """A run's level with the spread between nodes as one more part of its uncertainty."""

    node_variance: float = 0.0
    node_df: int = 0

    def shared_parts(self) -> list[tuple[float, float]]:
        return [*super().shared_parts(), (self.node_variance, self.node_df)]


def across(base: Run, run: Run, phase: str, between: Optional[Spread]
           ) -> significance.Difference:
    """`run` against `base`, measured on different nodes: run against run, each side's
    level uncertain by the spread between nodes too."""
    b, c = base.level(phase), run.level(phase)
    assert b is not None and c is not None
    where = f"{node_of(base)} vs {node_of(run)}"
    if between is None:
        return significance.Difference(
            speedup=math.exp(b.log_center - c.log_center), low=math.nan, high=math.nan, p=1.0,
            method=ACROSS, why_not=f"measured on different nodes ({where}), and no "
                                   "configuration compared was measured on two nodes to give "
                                   "the spread between nodes",
            baseline_ms=math.exp(b.log_center), candidate_ms=math.exp(c.log_center),
            processes=(len(b.process_medians_ms), len(c.process_medians_ms)))
    sides = [NodeLevel(process_medians_ms=level.process_medians_ms, drift=level.drift,
                       drift_runs=level.drift_runs, node_variance=between.variance,
                       node_df=between.df) for level in (b, c)]
    d = significance.between_runs(*sides)
    d.method = ACROSS
    return d


def crossings(runs: Sequence[Run], bases: Sequence[Optional[Run]]) -> list[tuple[int, str]]:
    """(run index, "node1 → node2") of every compared pair whose sides crossed nodes."""
    return [(i, f"{node_of(b)} → {node_of(r)}")
            for i, (r, b) in enumerate(zip(runs, bases, strict=True))
            if b is not None and b is not r and crossed(b, r)]


def crossings_line(runs: Sequence[Run], bases: Sequence[Optional[Run]],
                   label: Callable[[Run], str], between: dict[str, Optional[Spread]]) -> str:
    """One line naming the pairs that crossed nodes and how they were judged ("" if none)."""
    found = crossings(runs, bases)
    if not found:
        return ""
    shown = ", ".join(f"{label(runs[i])} ({where})" for i, where in found[:6])
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    known = {p: s for p, s in between.items() if s is not None}
    how = ("; spread between nodes from " + ", ".join(
        f"{p}: {s.configurations} configuration(s), {s.df} df" for p, s in known.items())
        if known else "; the spread between nodes is unknown (no configuration compared was "
                      "measured on two nodes), so they cannot be told apart")
    return (f"crossed nodes: {len(found)} pair(s) measured on different nodes — {shown}{more}: "
            f"judged run against run with the node as a random effect{how}")
