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

import math
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.app.search import confirm, flow, study, tracking, window
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import console, err_console


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    settings = study.Settings(objectives=args.objectives, budget=args.budget or 0,
                              batch=args.batch, sampler=args.sampler, seed=args.seed)
    tracker = None if args.no_mlflow else tracking.Tracker(args.tracking_uri, args.experiment)
    search = flow.prepare(args.overrides, args.baseline.split(), settings, args.folder,
                          tracker, say)
    s = search.space
    shape = " × ".join(str(len(d.values())) for d in s.dimensions)
    console.print(f"search: {s.size} cells ({shape}), budget {settings.budget}, windows of "
                  f"{settings.batch} + the baseline "
                  f"({escape(s.label(s.baseline))}); sampler {settings.sampler}; "
                  f"objectives {', '.join(settings.objectives)}; folder {search.folder}",
                  highlight=False)
    with flow.tracked(search, tracker):
        search.run()
        console.print(trials_table(search))
        if len(settings.objectives) > 1:
            console.print(pareto_table(search))
        return announce(search, flow.conclude(search, not args.no_confirm, tracker, say))


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


def announce(search: study.Search, out: flow.Outcome) -> int:
    """The outcome said: the confirmed winner with its interval and its difference from the
    runner-up, or why there is none."""
    if not out.ranked:
        err_console.print("no cell of the space ran here: see the reasons above", style="red")
        return exit_codes.JOB_FAILED
    if out.confirmation is None:
        a = out.announced
        console.print(f"fastest found (not confirmed): {escape(a['cell'])} — "
                      f"{a['speedup']:.3f}× the baseline", highlight=False)
        return exit_codes.OK
    console.print(confirmation_table(search, out.confirmation))
    won = out.winner
    if won is None:
        err_console.print("the confirmation window timed neither candidate: see "
                          f"{out.confirmation.folder}", style="red")
        return exit_codes.JOB_FAILED
    d = won.difference
    assert d is not None
    text = (f"fastest: {search.space.label(won.params)} — {d.speedup:.3f}× the baseline "
            f"(95% interval {_x(d.low)}–{_x(d.high)}, confirmed in a fresh window)")
    h, other = out.versus, out.runner_up
    if h is not None and other is not None:
        text += (f"; against the runner-up {search.space.label(other.params)}: "
                 f"{h.speedup:.3f}× ({_x(h.low)}–{_x(h.high)})"
                 + ("" if h.real else " — not a real difference here"))
    console.print(text, highlight=False, markup=False, soft_wrap=True)
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
