"""`rnnexp bisect`: which environment between a good and a bad one made a measurement slower
— each probe an interleaved A/B against the good end, the next chosen from the evidence so
far, until the breakpoint is known to a stated confidence.

    rnnexp bisect --pythons GOOD/bin/python ... BAD/bin/python -- model=lstm backend=aten
    rnnexp bisect --commits GOOD..BAD [--repo .] -- model=lstm backend=aten shape=small

The overrides after `--` name one measurement (any Hydra override but `bench.python`). A probe
runs `python -m rnnexp -m OVERRIDES bench.python=GOOD,PROBE` (rnnexp's launcher measures
both interleaved, rounds in random order) and judges PROBE against GOOD paired by round
(rnnexp.analysis.significance.paired); the search is rnnexp.analysis.bisect's noisy
bisection. A probe whose environment cannot be built, or whose measurement crashed or failed
verification, is recorded as failed — never as a slowdown.
"""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.analysis import significance, sweeps
from rnnexp.analysis.bisect import CONFIDENCE, Bisection, Probe
from rnnexp.app import environments
from rnnexp.app.environments import Environment
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.report import console
from rnnexp.results.result import OK

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
    if not overrides:
        raise RnnexpError("no measurement named — add it after --, e.g. "
                          "-- model=lstm backend=aten shape=small")
    for o in overrides:
        if o.lstrip("+~").startswith("bench.python") or o in ("-m", "--multirun"):
            raise RnnexpError(f"'{o}': the bisection sets bench.python itself (and sweeps "
                              "over it) — name the measurement only")
        if "=" in o and "," in o.split("=", 1)[1] and not o.split("=", 1)[1].startswith("["):
            raise RnnexpError(f"'{o}': one measurement at a time — give one value")
    args.overrides = overrides
    args.workdir = args.workdir or Path("outputs/bisect") / datetime.now().strftime(
        "%Y-%m-%d_%H-%M-%S")
    return args


class Prober:
    """Runs probes: the sweep of GOOD and PROBE interleaved, judged paired by round."""

    def __init__(self, envs: list[Environment], args):
        self.envs, self.args = envs, args
        self.count = 0

    def ready(self, env: Environment) -> Environment:
        if self.args.commits:
            environments.make(env, self.args.repo.resolve(), self.args.base_python,
                              self.args.workdir.resolve(), self.args.install)
        return env

    def command(self, good: str, probe: str, folder: Path) -> list[str]:
        sinks = [] if any(o.startswith("sinks=") for o in self.args.overrides) else \
            ["sinks=[json]"]
        return [sys.executable, "-m", "rnnexp", "-m", *self.args.overrides, *sinks,
                f"bench.python={good},{probe}", f"hydra.sweep.dir={folder}"]

    def __call__(self, index: int) -> Probe:
        good, env = self.ready(self.envs[0]), self.ready(self.envs[index])
        if good.failed:
            raise RnnexpError(f"the good end {good.name} could not be made: {good.failed}")
        if env.failed:
            return Probe(index, failed=env.failed)
        self.count += 1
        folder = (self.args.workdir / f"probe-{self.count:02d}-env-{index}").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        cmd = self.command(str(good.python), str(env.python), folder)
        with open(folder / "probe.log", "w") as log:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
        return judged(index, folder, str(good.python), str(env.python), done.returncode)


def _last_error(folder: Path) -> str:
    lines = [ln for ln in (folder / "probe.log").read_text(errors="replace").splitlines()
             if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return (errors or lines or ["no output"])[-1].strip()[:200]


def judged(index: int, folder: Path, good: str, probe: str, returncode: int) -> Probe:
    """The probe's sweep read back: PROBE against GOOD paired by round, or why it failed."""
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
    phase = "total" if base.result.phase("total").timed else "forward"
    diff = significance.paired(base.result.phase(phase).rounds_ms,
                               cand.result.phase(phase).rounds_ms)
    probe_ = Probe(index, difference=diff)
    if not probe_.usable:
        probe_.failed = f"could not judge: {diff.why_not or 'no interval'}"
    return probe_


def slowdown_text(p: Probe) -> str:
    """+12.0% (+8.1 … +16.2): the candidate's time against the good end's."""
    if p.failed or p.difference is None:
        return "—"
    d = p.difference
    return (f"{100 * (1 / d.speedup - 1):+.1f}% ({100 * (1 / d.high - 1):+.1f} … "
            f"{100 * (1 / d.low - 1):+.1f})")


def probes_table(b: Bisection, envs: Sequence[Environment]) -> Table:
    t = Table(title="probes: each an interleaved A/B against the good end",
              caption="slowdown = probe ÷ good − 1, paired by round, with its 95% interval")
    for col in ("#", "environment", "slowdown (95%)", "reads as", "P(culprit) after"):
        t.add_column(col)
    shadow = Bisection(b.n, b.confidence)
    for n, p in enumerate(b.probes, 1):
        shadow.observe(p)
        if p.failed:
            verdict = f"[yellow]failed[/] {escape(p.failed)}"
        else:
            slow = p.slowdown - 1.96 * p.se > 0
            verdict = "slower" if slow else ("good" if abs(p.slowdown) < 1.96 * p.se else "?")
        culprit, prob = shadow.culprit()
        t.add_row(str(n), f"{p.index}: {escape(envs[p.index].name)}", slowdown_text(p),
                  verdict, f"{prob:.2f} on {culprit}")
    return t


def reproduce(args, envs: Sequence[Environment], culprit: int) -> list[str]:
    before, after = envs[culprit - 1], envs[culprit]
    pys = f"{before.python},{after.python}"
    lines = [f"python -m rnnexp -m {' '.join(args.overrides)} bench.python={pys}",
             f"python -m rnnexp compare --baseline bench.python={before.python}"]
    if after.commit:
        lines.insert(0, f"git -C {args.repo} show {after.commit}")
    return lines


def bisect(args) -> int:
    envs = (environments.interpreters(args.pythons) if args.pythons
            else environments.commits(args.repo, args.commits))
    console.print(f"{len(envs)} environments, good: {envs[0].name}, bad: {envs[-1].name}; "
                  f"work in {args.workdir}", highlight=False, markup=False, soft_wrap=True)
    b = Bisection(len(envs), args.confidence)
    probe = Prober(envs, args)
    while len(b.probes) < args.max_probes:
        m = b.next_probe()
        if m is None:
            break
        p = probe(m)
        b.observe(p)
        culprit, prob = b.culprit()
        console.print(f"probe {len(b.probes)}: env {m} ({envs[m].name}) "
                      + (f"failed: {p.failed}" if p.failed else slowdown_text(p))
                      + f" — most likely first slow: {culprit} (P={prob:.2f})",
                      highlight=False, markup=False, soft_wrap=True)
    console.print(probes_table(b, envs))
    return verdict(b, envs, args)


def verdict(b: Bisection, envs: Sequence[Environment], args) -> int:
    real = b.effect_is_real()
    if not real:
        delta, se = b.effect()
        size = (f"{100 * math.expm1(delta):+.1f}% (± {100 * 1.96 * se:.1f})"
                if math.isfinite(delta) else "not measured")
        console.print(f"the bad end is not slower than the good end here: {size} — nothing "
                      "to bisect", highlight=False, markup=False, soft_wrap=True)
        return 0
    culprit, prob = b.culprit()
    if prob < b.confidence:
        lo, hi = b.likely_range()
        console.print(f"not known to {b.confidence:.0%} after {len(b.probes)} probes: the first "
                      f"slow environment is {lo}–{hi} with P ≥ {b.confidence:.0%} (most likely "
                      f"{culprit}: {envs[culprit].name}, P={prob:.2f})", highlight=False,
                      markup=False, soft_wrap=True)
        return 0
    at = [p for p in b.probes if p.index == culprit and not p.failed]
    console.print(f"culprit: {envs[culprit].name} (environment {culprit}; P={prob:.2f} after "
                  f"{len(b.probes)} probes, {len(b.failed)} failed)", highlight=False,
                  markup=False, soft_wrap=True)
    if at:
        console.print(f"effect: {slowdown_text(at[-1])} against the good end", highlight=False,
                      markup=False, soft_wrap=True)
    console.print("reproduce:\n  " + "\n  ".join(reproduce(args, envs, culprit)),
                  highlight=False, markup=False, soft_wrap=True)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp bisect ARGS`; errors reach rnnexp.app.commands' boundary."""
    return bisect(parse_args(argv or []))
