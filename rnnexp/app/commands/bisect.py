"""`rnnexp bisect`: which environment between a good and a bad one made a measurement slower
— each probe an interleaved A/B against the good end, the next chosen from the evidence so
far, until the breakpoint is known to a stated confidence.

    rnnexp bisect --pythons GOOD/bin/python ... BAD/bin/python -- model=lstm backend=aten
    rnnexp bisect --commits GOOD..BAD [--repo .] -- model=lstm backend=aten shape=small

The overrides after `--` name one measurement (any Hydra override but `bench.python`). A probe
runs `python -m rnnexp -m OVERRIDES bench.python=GOOD,PROBE` (rnnexp's launcher measures
both interleaved, rounds in random order) and judges PROBE against GOOD paired by round
(rnnexp.analysis.significance.paired); the search is rnnexp.analysis.bisect's noisy
bisection, its probes rnnexp.analysis.bisect_probe's. With `--metric instructions` each probe
is counted (bench.metric=instructions) and judged on its instruction counts. A probe whose
environment cannot be built, or whose measurement crashed or failed verification, is
recorded as failed — never as a slowdown. `--report PATH` writes the probes and the
posterior as an HTML page.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.analysis import bisect_probe, history, history_page
from rnnexp.analysis.bisect import CONFIDENCE, Bisection, Probe
from rnnexp.analysis.report import render
from rnnexp.app import environments
from rnnexp.app.commands import check_page_path
from rnnexp.app.environments import Environment
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.report import console

MAX_PROBES = 20


def parse_args(argv: Sequence[str]):
    argv = list(argv)
    overrides: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, overrides = argv[:at], argv[at + 1:]
    parser = OneLineParser(prog="rnnexp bisect",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--pythons", nargs="+", metavar="PYTHON",
                       help="interpreters in order, the good one first and the bad one last")
    where.add_argument("--commits", metavar="GOOD..BAD",
                       help="a commit range of --repo, each installed into a throwaway "
                            "environment when probed")
    parser.add_argument("--repo", type=Path, default=Path("."),
                        help="the git repository of --commits (default: here)")
    parser.add_argument("--base-python", default=sys.executable,
                        help="the environment whose packages a commit's environment runs on "
                             "(default: this interpreter)")
    parser.add_argument("--install", default=None, metavar="CMD",
                        help="install a commit's checkout, e.g. \"{python} -m pip install "
                             "--no-deps --no-build-isolation -e {src}\" (default: put the "
                             "checkout first on the path)")
    parser.add_argument("--metric", choices=list(history.METRICS), default=history.TIME,
                        help="judge each probe on time (interleaved, paired by round) or on "
                             "instruction counts (bench.metric=instructions: x86-64 Linux "
                             "with Valgrind, CPU only)")
    parser.add_argument("--report", type=Path, default=None, metavar="PATH",
                        help="also write the probes and the posterior as an HTML page")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE,
                        help=f"stop when the breakpoint is this probable (default {CONFIDENCE})")
    parser.add_argument("--max-probes", type=int, default=MAX_PROBES,
                        help=f"stop after this many probes (default {MAX_PROBES})")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="probes' sweeps and environments (default: outputs/bisect/<now>)")
    args = parser.parse_args(argv)
    if not 0.5 <= args.confidence < 1:
        raise RnnexpError(f"--confidence {args.confidence:g}: a probability in [0.5, 1) — "
                          "e.g. 0.95")
    if args.max_probes < 1:
        raise RnnexpError(f"--max-probes {args.max_probes}: at least 1")
    check_page_path("--report", args.report)
    if not overrides:
        raise RnnexpError("no measurement named — add it after --, e.g. "
                          "-- model=lstm backend=aten shape=small")
    for o in overrides:
        if o.lstrip("+~").startswith("bench.python") or o in ("-m", "--multirun"):
            raise RnnexpError(f"'{o}': the bisection sets bench.python itself (and sweeps "
                              "over it) — name the measurement only")
        if o.lstrip("+~").startswith("bench.metric="):
            raise RnnexpError(f"'{o}': choose what a probe is judged on with --metric "
                              "time|instructions")
        if "=" in o and "," in o.split("=", 1)[1] and not o.split("=", 1)[1].startswith("["):
            raise RnnexpError(f"'{o}': one measurement at a time — give one value")
    args.overrides = overrides
    args.workdir = args.workdir or Path("outputs/bisect") / datetime.now().strftime(
        "%Y-%m-%d_%H-%M-%S")
    return args


class Prober:
    """Runs probes: each environment made when first probed (commits), then the probe's
    sweep of GOOD and PROBE interleaved (rnnexp.analysis.bisect_probe)."""

    def __init__(self, envs: list[Environment], args):
        self.envs, self.args = envs, args
        self.count = 0

    def ready(self, env: Environment) -> Environment:
        if self.args.commits:
            environments.make(env, self.args.repo.resolve(), self.args.base_python,
                              self.args.workdir.resolve(), self.args.install)
        return env

    def __call__(self, index: int) -> Probe:
        good, env = self.ready(self.envs[0]), self.ready(self.envs[index])
        if good.failed:
            raise RnnexpError(f"the good end {good.name} could not be made: {good.failed}")
        if env.failed:
            return Probe(index, failed=env.failed)
        self.count += 1
        folder = (self.args.workdir / f"probe-{self.count:02d}-env-{index}").resolve()
        return bisect_probe.measure(index, self.args.overrides, str(good.python),
                                    str(env.python), folder, self.args.metric)


def slowdown_text(p: Probe) -> str:
    """+12.0% (+8.1 … +16.2): the candidate's time against the good end's."""
    if p.failed or p.difference is None:
        return "—"
    d = p.difference
    return (f"{100 * (1 / d.speedup - 1):+.1f}% ({100 * (1 / d.high - 1):+.1f} … "
            f"{100 * (1 / d.low - 1):+.1f})")


def probes_table(b: Bisection, envs: Sequence[Environment], metric: str) -> Table:
    what = "counted" if metric == history.INSTRUCTIONS else "an interleaved A/B"
    t = Table(title=f"probes: each {what} against the good end",
              caption="slowdown = probe ÷ good − 1, "
                      + ("by the count's tolerance" if metric == history.INSTRUCTIONS
                         else "paired by round, with its 95% interval"))
    for col in ("#", "environment", "slowdown (95%)", "reads as", "P(culprit) after"):
        t.add_column(col)
    for n, (p, (culprit, prob)) in enumerate(zip(b.probes, bisect_probe.after_each(b),
                                                 strict=True), 1):
        if p.failed:
            verdict = f"[yellow]failed[/] {escape(p.failed)}"
        else:
            slow = p.slowdown - 1.96 * p.se > 0
            verdict = "slower" if slow else ("good" if abs(p.slowdown) < 1.96 * p.se else "?")
        t.add_row(str(n), f"{p.index}: {escape(envs[p.index].name)}", slowdown_text(p),
                  verdict, f"{prob:.2f} on {culprit}")
    return t


def say(text: str) -> None:
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def bisect(args) -> int:
    envs = (environments.interpreters(args.pythons) if args.pythons
            else environments.commits(args.repo, args.commits))
    say(f"{len(envs)} environments, good: {envs[0].name}, bad: {envs[-1].name}; "
        f"work in {args.workdir}")

    def seen(b: Bisection, p: Probe) -> None:
        culprit, prob = b.culprit()
        say(f"probe {len(b.probes)}: env {p.index} ({envs[p.index].name}) "
            + (f"failed: {p.failed}" if p.failed else slowdown_text(p))
            + f" — most likely first slow: {culprit} (P={prob:.2f})")

    b = bisect_probe.search(Bisection(len(envs), args.confidence), Prober(envs, args),
                            args.max_probes, seen)
    console.print(probes_table(b, envs, args.metric))
    end = bisect_probe.outcome(b)
    verdict(end, b, envs, args)
    if args.report is not None:
        page = history_page.bisection(b, [e.name for e in envs], "rnnexp bisect",
                                      end.culprit if end.known else None)
        say(f"report: {render.write(page, args.report)} (open in a browser)")
    return 0


def verdict(end: bisect_probe.Outcome, b: Bisection, envs: Sequence[Environment],
            args) -> None:
    if not end.real:
        say(f"the bad end is not slower than the good end here: {end.size_text()} — nothing "
            "to bisect")
        return
    name = envs[end.culprit].name
    if not end.known:
        say(f"not known to {b.confidence:.0%} after {len(b.probes)} probes: the first slow "
            f"environment is {end.low}–{end.high} with P ≥ {b.confidence:.0%} (most likely "
            f"{end.culprit}: {name}, P={end.p:.2f})")
        return
    say(f"culprit: {name} (environment {end.culprit}; P={end.p:.2f} after {len(b.probes)} "
        f"probes, {len(b.failed)} failed)")
    if end.effect is not None:
        say(f"effect: {slowdown_text(end.effect)} against the good end")
    before, after = envs[end.culprit - 1], envs[end.culprit]
    lines = bisect_probe.reproduce(args.overrides, str(before.python), str(after.python),
                                   args.metric, args.repo, after.commit)
    say("reproduce:\n  " + "\n  ".join(lines))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp bisect ARGS`; errors reach rnnexp.app.commands' boundary."""
    return bisect(parse_args(argv or []))
