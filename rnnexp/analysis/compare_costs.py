"""compare's second table: what each run costs besides its time per iteration — peak memory
per phase, the start-up (time to first result, compile time) — and, against its baseline,
after how many iterations a run has paid its start-up back (rnnexp.models.compile_cost)."""

from __future__ import annotations

from typing import Optional, Sequence

from rich.table import Table

from rnnexp.analysis.sweeps import Run
from rnnexp.models.compile_cost import break_even
from rnnexp.results.result import OK

CAPTION = ("peak MiB above each phase's start (kind as recorded: cuda_peak_mb or rss_hwm_mb), "
           "× its baseline's · first s: build to first result (compiler's own seconds) · "
           "steady ms: median per iteration · break-even: iterations after which the run, "
           "start-up included, has cost less in all than its baseline")


def _mib(run: Run, phase: str) -> Optional[float]:
    mem = run.result.memory
    return mem.of(phase) if mem is not None and mem.kind else None


def _memory_cell(run: Run, base: Optional[Run], phase: str) -> str:
    mine = _mib(run, phase)
    if mine is None:
        return "—"
    cell = f"{mine:.3g}"
    theirs = _mib(base, phase) if base is not None and base is not run else None
    same_kind = base is not None and base.result.memory is not None and \
        base.result.memory.kind == run.result.memory.kind  # type: ignore[union-attr]
    if theirs and same_kind:
        cell += f" ({mine / theirs:.2f}×)"
    return cell


def _first(run: Run) -> str:
    cost = run.result.compile_cost
    if cost is None or cost.time_to_first_s is None:
        return "—"
    own = f" ({cost.compile_s:.3g})" if cost.compile_s is not None else ""
    return f"{cost.time_to_first_s:.3g}{own}"


def _steady(run: Run) -> str:
    cost = run.result.compile_cost
    return "—" if cost is None or cost.steady_ms is None else f"{cost.steady_ms:.3f}"


def break_even_cell(run: Run, base: Optional[Run]) -> str:
    if base is None:
        return "no match"
    if base is run:
        return "base"
    mine, theirs = run.result.compile_cost, base.result.compile_cost
    if mine is None or theirs is None or run.row.status != OK or base.row.status != OK:
        return "—"
    found = break_even(mine, theirs)
    return found.text() if found is not None else "—"


def recorded(runs: Sequence[Run]) -> bool:
    """Some run recorded memory or a start-up (results of older versions did not)."""
    return any(r.result.memory is not None or r.result.compile_cost is not None for r in runs)


def table(runs: Sequence[Run], bases: Optional[Sequence[Optional[Run]]],
          keys: Sequence[str], title: str) -> Table:
    t = Table(title=f"{title}: memory and start-up", caption=CAPTION)
    for k in keys:
        t.add_column(k)
    for col in ("fwd peak MiB", "bwd peak MiB", "first s", "steady ms"):
        t.add_column(col, justify="right")
    if bases is not None:
        t.add_column("break-even", justify="right")
    for i, r in enumerate(runs):
        base = bases[i] if bases is not None else None
        row = [r.config.get(k, "?") for k in keys]
        row += [_memory_cell(r, base, "forward"), _memory_cell(r, base, "backward"),
                _first(r), _steady(r)]
        if bases is not None:
            row.append(break_even_cell(r, base))
        t.add_row(*row)
    return t
