"""`rnnexp search OVERRIDES`: the fastest configuration of a space, without measuring it all.

The space is written as a sweep is (`backend=aten,jit,inductor backend.mode=default,
max-autotune dtype=float32,bfloat16 bench.num_threads=range(1,3) model=jit shape=small`);
Optuna proposes cells in windows of `--batch`, each measured interleaved with the baseline
(the first value of every key, or `--baseline`), until `--budget` cells have been tried.
The two fastest, by the lower end of their speedup's 95% interval, are measured again in a
fresh window with the baseline, and the winner of that window is announced with its
interval. Everything is kept in the search's folder (the windows' sweeps, the study in
study.db: `--folder` of an earlier search goes on with it) and in MLflow (a parent run, every
trial a child run).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.app.search import confirm, precheck, space, study, tracking, window
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import console, err_console

SUMMARY = "search.json"


def parse_args(argv: Optional[Sequence[str]]):
    parser = OneLineParser(prog="rnnexp search",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUES",
                        help="the space in Hydra's sweep syntax (several values: searched; "
                             "one: fixed for every cell)")
    parser.add_argument("--baseline", default="", metavar="'KEY=VALUE ...'",
                        help="the cell every window compares with (default: the first value "
                             "of every searched key)")
    parser.add_argument("--budget", type=int, default=None, metavar="N",
                        help="cells to measure; cells their plan refuses cost nothing "
                             "(default: 10%% of the space, at least 8)")
    parser.add_argument("--batch", type=int, default=4, metavar="N",
                        help="cells per interleaved window, the baseline besides (default 4)")
    parser.add_argument("--objectives", default="time,memory",
                        help="time (always), memory, compile (time to a first result); "
                             "default: time,memory")
    parser.add_argument("--sampler", default="gp", choices=study.SAMPLERS,
                        help="Optuna's GPSampler with a noisy objective (default), TPE, "
                             "random, or Optuna's default (TPE)")
    parser.add_argument("--seed", type=int, default=None, help="the sampler's seed")
    parser.add_argument("--folder", type=Path, default=None,
                        help="the search's folder (default: outputs/searches/<date>/<time>); "
                             "an earlier search's folder goes on with its study")
    parser.add_argument("--no-confirm", action="store_true",
                        help="announce the search's own best without the fresh A/B")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--no-mlflow", action="store_true", help="record nothing in MLflow")
    args = parser.parse_args(argv)
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    unknown = [o for o in objectives if o not in study.OBJECTIVES]
    if unknown or "time" not in objectives:
        raise RnnexpError(f"--objectives {args.objectives}: time and any of memory, compile "
                          "— e.g. time,memory")
    args.objectives = ("time", *(o for o in objectives if o != "time"))
    for name in ("budget", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise RnnexpError(f"--{name} {value}: must be ≥ 1")
    return args


def default_budget(size: int) -> int:
    return min(size, max(8, math.ceil(size / 10)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    s = space.parse(args.overrides, args.baseline.split())
    refused = precheck.refusal(s.command_line(s.baseline))
    if refused is not None:
        raise RnnexpError(f"the baseline {s.label(s.baseline)} cannot run here: "
                          f"{refused.reason} — choose another with --baseline")
    folder = args.folder or Path("outputs/searches") / datetime.now().strftime(
        "%Y-%m-%d/%H-%M-%S")
    settings = study.Settings(objectives=args.objectives,
                              budget=args.budget or default_budget(s.size),
                              batch=args.batch, sampler=args.sampler, seed=args.seed)
    tracker = None if args.no_mlflow else tracking.Tracker(args.tracking_uri, args.experiment)
    search = study.Search(s, folder, settings, say=say,
                          on_told=tracker.trial if tracker else None)
    shape = " × ".join(str(len(d.values())) for d in s.dimensions)
    console.print(f"search: {s.size} cells ({shape}), budget {settings.budget}, windows of "
                  f"{settings.batch} + the baseline "
                  f"({escape(s.label(s.baseline))}); sampler {settings.sampler}; "
                  f"objectives {', '.join(settings.objectives)}; folder {folder}",
                  highlight=False)
    if tracker:
        tracker.start(s, folder, {"budget": str(settings.budget), "batch": str(settings.batch),
                                  "sampler": settings.sampler,
                                  "objectives": ",".join(settings.objectives)})
    try:
        search.run()
        console.print(trials_table(search))
        if len(settings.objectives) > 1:
            console.print(pareto_table(search))
        code = announce(search, args.no_confirm, tracker)
    except BaseException as err:
        if tracker:
            tracker.end("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED",
                        {"reason": str(err) or type(err).__name__})
        raise
    if tracker:
        tracker.end("FINISHED", json.loads((folder / SUMMARY).read_text()).get("announced", {}))
    return code


def say(text: str) -> None:
    err_console.print(text, highlight=False, markup=False, soft_wrap=True)


def _x(value) -> str:
    return f"{value:.3f}" if window.finite(value) else "—"


def trials_table(search: study.Search) -> Table:
    t = Table(title=f"cells tried ({search.tried} of {search.space.size}: {search.measured} "
                    "measured), fastest first "
                    "by the lower end of the speedup's 95% interval",
              caption="speedup = baseline ÷ cell, paired by round in the cell's window")
    for col in ("#", "cell", "speedup", "95% interval", "peak MiB", "status"):
        t.add_column(col, justify="right" if col in ("#", "speedup", "peak MiB") else "left")
    ranked = study.ranked(search.study)
    rest = [t for t in search.first_of().values() if t not in ranked]
    for tr in [*ranked, *sorted(rest, key=lambda t: t.number)]:
        a = tr.user_attrs
        ok = study.constraints(tr)[0] <= 0
        t.add_row(str(tr.number), escape(a.get("cell", "")), _x(a.get("speedup")),
                  f"{_x(a.get('low'))}–{_x(a.get('high'))}" if ok else "",
                  _x(a.get("peak_mb")),
                  "[green]ok[/]" if ok else f"[yellow]{escape(a.get('status', ''))}[/]: "
                  f"{escape(str(a.get('reason', ''))[:120])}")
    return t


def pareto_table(search: study.Search) -> Table:
    names = search.settings.objectives
    t = Table(title="Pareto front (no other cell is better in every objective)")
    t.add_column("#", justify="right")
    t.add_column("cell")
    for o in names:
        t.add_column({"time": "speedup ≥", "memory": "peak MiB",
                      "compile": "first result s"}[o], justify="right")
    for tr in study.pareto(search.study):
        t.add_row(str(tr.number), escape(tr.user_attrs.get("cell", "")),
                  *(_x(math.exp(v) if o == "time" else v)
                    for o, v in zip(names, tr.values, strict=True)))
    return t


def announce(search: study.Search, no_confirm: bool, tracker) -> int:
    """The fastest two re-measured against the baseline, and the winner said."""
    ranked = study.ranked(search.study)
    summary: dict = {"tried": search.tried, "measured": search.measured,
                     "cells": search.space.size,
                     "trials": [{"number": t.number, **t.user_attrs, "values": t.values}
                                for t in search.first_of().values()]}
    if not ranked:
        (search.folder / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        err_console.print("no cell of the space ran here: see the reasons above", style="red")
        return exit_codes.JOB_FAILED
    picks = [(t.number, dict(t.params)) for t in ranked[:2]]
    if no_confirm:
        best = ranked[0]
        summary["announced"] = {"cell": best.user_attrs["cell"], "trial": best.number,
                                "speedup": best.user_attrs["speedup"], "confirmed": False}
        console.print(f"fastest found (not confirmed): {escape(best.user_attrs['cell'])} — "
                      f"{best.user_attrs['speedup']:.3f}× the baseline", highlight=False)
        (search.folder / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        return exit_codes.OK
    say(f"confirming: {' and '.join(search.space.label(p) for _, p in picks)} against the "
        "baseline in a fresh interleaved window")
    c = confirm.confirm(search.space, picks, search.folder, search.measure)
    if tracker:
        for i, cand in enumerate(c.candidates):
            tracker.confirmed(cand.trial, cand.measured, "confirm winner" if i == 0 else
                              "confirm runner-up")
    console.print(confirmation_table(search, c))
    won = c.winner
    if won is None:
        err_console.print("the confirmation window timed neither candidate: see "
                          f"{c.folder}", style="red")
        summary["announced"] = {"confirmed": False, "reason": "confirmation failed"}
        (search.folder / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        return exit_codes.JOB_FAILED
    d = won.difference
    assert d is not None
    text = (f"fastest: {search.space.label(won.params)} — {d.speedup:.3f}× the baseline "
            f"(95% interval {_x(d.low)}–{_x(d.high)}, confirmed in a fresh window)")
    if c.head_to_head is not None:
        h = c.head_to_head
        versus = c.candidates[1] if won is c.candidates[0] else c.candidates[0]
        if won is not c.candidates[0]:
            h_speed, h_low, h_high = 1 / h.speedup, 1 / h.high, 1 / h.low
        else:
            h_speed, h_low, h_high = h.speedup, h.low, h.high
        text += (f"; against the runner-up {search.space.label(versus.params)}: "
                 f"{h_speed:.3f}× ({_x(h_low)}–{_x(h_high)})"
                 + ("" if h.real else " — not a real difference here"))
    console.print(text, highlight=False, markup=False, soft_wrap=True)
    summary["announced"] = {"cell": search.space.label(won.params), "trial": won.trial,
                            "speedup": d.speedup, "low": d.low, "high": d.high,
                            "confirmed": True}
    (search.folder / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    return exit_codes.OK


def confirmation_table(search: study.Search, c: confirm.Confirmation) -> Table:
    t = Table(title="confirmation: a fresh interleaved window with the baseline",
              caption="speedup = baseline ÷ cell, paired by round; Holm-corrected together")
    for col in ("search's rank", "cell", "speedup", "95% interval", "verdict"):
        t.add_column(col)
    for i, cand in enumerate(c.candidates, 1):
        d = cand.difference
        r = cand.measured.result
        status = r.status if r else "missing"
        t.add_row(str(i), escape(search.space.label(cand.params)),
                  _x(d.speedup) if d else "—", f"{_x(d.low)}–{_x(d.high)}" if d else "—",
                  escape(d.cell()) if d and cand.ok else escape(status))
    return t
