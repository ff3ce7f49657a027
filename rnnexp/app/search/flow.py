"""A whole search, from its command line to its announced winner: the space and its
baseline checked, the study run, the two fastest confirmed in a fresh window, the outcome
kept (`search.json` in the search's folder) and the parent run in MLflow opened and closed.
What is printed is the command's (rnnexp.app.commands.search)."""

from __future__ import annotations

import dataclasses
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from optuna.trial import FrozenTrial

from rnnexp.analysis.significance import Difference
from rnnexp.app.search import confirm, precheck, space, study, tracking
from rnnexp.errors import RnnexpError

SUMMARY = "search.json"
SEARCHES = Path("outputs/searches")


def default_budget(size: int) -> int:
    """10% of the space's cells, at least 8 (no more than the space)."""
    return min(size, max(8, math.ceil(size / 10)))


def prepare(overrides: Sequence[str], baseline: Sequence[str], settings: study.Settings,
            folder: Optional[Path] = None, tracker: Optional[tracking.Tracker] = None,
            say: Callable[[str], None] = lambda _: None) -> study.Search:
    """The search of a command line: its space parsed, its baseline one the plan runs
    (else one line), its budget by default 10% of the space, its folder by default
    outputs/searches/<date>/<time>."""
    s = space.parse(overrides, baseline)
    refused = precheck.refusal(s.command_line(s.baseline))
    if refused is not None:
        raise RnnexpError(f"the baseline {s.label(s.baseline)} cannot run here: "
                          f"{refused.reason} — choose another with --baseline")
    if settings.budget < 1:
        settings.budget = default_budget(s.size)
    folder = folder or SEARCHES / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    return study.Search(s, folder, settings, say=say,
                        on_told=tracker.trial if tracker else None)


@contextmanager
def tracked(search: study.Search, tracker: Optional[tracking.Tracker]) -> Iterator[None]:
    """The search's parent run in MLflow around what runs inside: opened (or reopened),
    then closed with the announced outcome, or as failed or killed with its reason."""
    if tracker is None:
        yield
        return
    st = search.settings
    tracker.start(search.space, search.folder,
                  {"budget": str(st.budget), "batch": str(st.batch), "sampler": st.sampler,
                   "objectives": ",".join(st.objectives)})
    try:
        yield
    except BaseException as err:
        tracker.end("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED",
                    {"reason": str(err) or type(err).__name__})
        raise
    summary = search.folder / SUMMARY
    tracker.end("FINISHED", json.loads(summary.read_text()).get("announced", {})
                if summary.is_file() else {})


@dataclass
class Outcome:
    """What a search concludes: its ranking, the confirmation (None: not asked, or nothing
    ran) and what is announced (as search.json holds it)."""

    ranked: list[FrozenTrial]
    confirmation: Optional[confirm.Confirmation] = None
    announced: dict[str, Any] = field(default_factory=dict)

    @property
    def winner(self) -> Optional[confirm.Confirmed]:
        return self.confirmation.winner if self.confirmation else None

    @property
    def runner_up(self) -> Optional[confirm.Confirmed]:
        c, won = self.confirmation, self.winner
        if c is None or won is None or len(c.candidates) < 2:
            return None
        return c.candidates[1] if won is c.candidates[0] else c.candidates[0]

    @property
    def versus(self) -> Optional[Difference]:
        """The runner-up's time ÷ the winner's in the fresh window (> 1: the winner faster),
        with its interval and verdict."""
        c = self.confirmation
        if c is None or c.head_to_head is None or self.winner is None:
            return None
        h = c.head_to_head  # the search's second ÷ its first
        if self.winner is c.candidates[0]:
            return h
        return dataclasses.replace(h, speedup=1 / h.speedup, low=1 / h.high, high=1 / h.low,
                                   baseline_ms=h.candidate_ms, candidate_ms=h.baseline_ms)


def conclude(search: study.Search, confirm_it: bool = True,
             tracker: Optional[tracking.Tracker] = None,
             say: Callable[[str], None] = lambda _: None) -> Outcome:
    """The search's outcome: the two fastest by the lower end of their intervals measured
    again with the baseline in a fresh window (unless `confirm_it` is false), the faster
    there announced; written to search.json."""
    ranked = study.ranked(search.study)
    out = Outcome(ranked)
    summary: dict = {"tried": search.tried, "measured": search.measured,
                     "cells": search.space.size,
                     "trials": [{"number": t.number, **t.user_attrs, "values": t.values}
                                for t in search.first_of().values()]}
    if not ranked:
        pass
    elif not confirm_it:
        best = ranked[0]
        out.announced = {"cell": best.user_attrs["cell"], "trial": best.number,
                         "speedup": best.user_attrs["speedup"], "confirmed": False}
    else:
        picks = [(t.number, dict(t.params)) for t in ranked[:2]]
        say(f"confirming: {' and '.join(search.space.label(p) for _, p in picks)} against "
            "the baseline in a fresh interleaved window")
        out.confirmation = confirm.confirm(search.space, picks, search.folder, search.measure)
        if tracker:
            for i, cand in enumerate(out.confirmation.candidates):
                tracker.confirmed(cand.trial, cand.measured,
                                  "confirm winner" if i == 0 else "confirm runner-up")
        won = out.winner
        if won is None:
            out.announced = {"confirmed": False, "reason": "confirmation failed"}
        else:
            d = won.difference
            assert d is not None
            out.announced = {"cell": search.space.label(won.params), "trial": won.trial,
                             "speedup": d.speedup, "low": d.low, "high": d.high,
                             "confirmed": True}
    if out.announced:
        summary["announced"] = out.announced
    (search.folder / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    return out
