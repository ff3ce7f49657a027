"""Before a winner is announced: the two fastest cells of the search (by the conservative end
of their intervals) measured again in a fresh interleaved window with the baseline — new
processes, new rounds — and judged as `rnnexp compare` judges a window: each paired by round
with the baseline, and the two with each other, Holm-corrected together. The search's own
numbers picked them; this measurement, which did not, is the one announced."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rnnexp.analysis import significance
from rnnexp.analysis.significance import Difference
from rnnexp.app.search import window
from rnnexp.app.search.space import Params, Space
from rnnexp.results.result import OK

FOLDER = "confirm"


@dataclass
class Confirmed:
    """A candidate re-measured: its speedup against the baseline in the fresh window."""

    trial: int
    params: Params
    measured: window.Measured

    @property
    def difference(self) -> Optional[Difference]:
        return self.measured.difference

    @property
    def ok(self) -> bool:
        r = self.measured.result
        return r is not None and r.status == OK and self.difference is not None


@dataclass
class Confirmation:
    candidates: list[Confirmed]  # winner first, as the search ranked them
    head_to_head: Optional[Difference]  # the runner-up ÷ the winner (>1: the winner faster)
    folder: Path
    baseline: window.Measured

    @property
    def winner(self) -> Optional[Confirmed]:
        """The candidate faster in the fresh window. Both are measured anew beside the same
        baseline, by numbers that did not choose them, so the point estimate is unbiased
        here: the lower end of the interval, which keeps the search from taking a lucky
        measurement for a fast cell, would only prefer the less noisy of the two."""
        ok = [c for c in self.candidates if c.ok]
        if not ok:
            return None
        return max(ok, key=lambda c: (_speedup(c.difference), -c.trial))


def _speedup(d: Optional[Difference]) -> float:
    return d.speedup if d is not None and window.finite(d.speedup) else float("-inf")


def confirm(space: Space, picks: list[tuple[int, Params]], folder: Path,
            measure: window.Measure = window.measure) -> Confirmation:
    """`picks`: (trial number, params) of the winner and the runner-up (one: the winner
    alone); the baseline is never a pick of its own here (it is in the window anyway)."""
    base_key = space.key(space.baseline)
    cells = [(n, p) for n, p in picks if space.key(p) != base_key]
    w = measure([space.overrides(p) for _, p in cells], space.overrides(space.baseline),
                space.fixed, folder / FOLDER)
    found = [Confirmed(n, p, m) for (n, p), m in zip(cells, w.cells, strict=True)]
    if len(cells) < len(picks):  # the baseline itself was a pick: its own A/A
        n, p = next((n, p) for n, p in picks if space.key(p) == base_key)
        found.insert([space.key(q) for _, q in picks].index(base_key),
                     Confirmed(n, p, w.baseline))
    head = None
    ok = [c for c in found if c.ok]
    if len(ok) == 2:
        head = window.paired(ok[1].measured.result, ok[0].measured.result)
    significance.decide([d for d in [*(c.difference for c in ok), head] if d is not None])
    return Confirmation(found, head, folder / FOLDER, w.baseline)
