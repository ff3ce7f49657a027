"""`python -m rnnexp compare`: a sweep's medians and spread, and differences with their
significance — within one sweep against a baseline option, or between two sweeps (A/B).

A sweep is a results folder (outputs/sweeps/<date>/<time>, or one run's folder) or a sweep
recorded in MLflow (parent run id or name; default: the latest). `--baseline KEY=VALUE`
compares every run with the run of the same sweep that differs from it only in KEY (if none
exists and exactly one run matches, that run is the baseline for all). `--against SWEEP`
compares every run with the run of the other sweep that measured the same configuration.

KEY is any config field or group (`model`, `seed`, `shape.seq_len`, `bench.python`).

Every cell gets the speedup (baseline ÷ candidate) with its 95% interval, judged at the unit
of replication, the process (rnnexp.analysis.significance): paired by round for jobs measured
in the same interleaved window (and by process where they shared worker processes), run
against run — between-process spread plus the drift between runs — otherwise;
Holm-corrected across all cells. A cell is a speedup, "~" (the interval lies within
±`--min-effect`) or "cannot tell ±X%" (the interval is that wide here); a run timed on a
busy machine, or one process a side with no spread between processes known, cannot tell.
Beside each speedup the table shows the two levels it is the ratio of, and how many
processes each side had.
`--fail-on-regression PCT` exits with code 3 when any cell is significantly slower than its
baseline by PCT% or more, for CI gates.
A second table shows each run's peak memory per phase and start-up (time to first result,
compile time, steady iteration) and, against a baseline, the break-even: after how many
iterations the run, start-up included, has cost less than its baseline (rnnexp.models.compile_cost).
The chart is saved (and logged to the sweep's parent run when it is in MLflow): with a
baseline, both sides of every cell and the speedup; with `--roofline` the sweep's roofline
chart (rnnexp.analysis.roofline_chart) too. Beside the chart, the comparison's HTML report
(rnnexp.analysis.report: matrix, forest plot, roofline, every cell's details), logged there
too.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from rich.markup import escape
from rich.table import Table

from rnnexp.config.credentials import redact
from rnnexp.config.schema import default_store_uri
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.report import console, print_error, print_warning

# What reads and judges results (torch, SciPy and MLflow come with them) is imported by the
# functions that use it: an argument error and --help answer without them.
if TYPE_CHECKING:
    from rnnexp.analysis import nodes
    from rnnexp.analysis.report.model import Report
    from rnnexp.analysis.significance import Difference
    from rnnexp.analysis.sweeps import Run, Sweep

EXIT_USER_ERROR = exit_codes.USER_ERROR
EXIT_REGRESSION = exit_codes.REGRESSION
# rnnexp.analysis.significance.MIN_EFFECT in %, repeated here so that parsing the arguments
# needs no SciPy (tests/analysis/test_compare.py holds the two equal).
MIN_EFFECT_PCT = 3.0


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = OneLineParser(prog="rnnexp compare",
                           description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("sweeps", nargs="*", default=[], metavar="SWEEP",
                        help="a results.json, a run or sweep folder (or a folder of them: "
                             "outputs/runs), or an MLflow sweep's parent run id or name "
                             "(default: the latest sweep in the store); two: the first is "
                             "the baseline of the second, as --against (pyperf compare_to)")
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="e.g. backend=cudnn or model=lstm: differences against it")
    parser.add_argument("--against", default=None, metavar="SWEEP",
                        help="a second sweep (folder, parent run id or name) as the baseline: "
                             "A/B by matching configurations")
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT_PCT,
                        metavar="PCT", help="smallest difference shown, in %% (default: "
                                            f"{MIN_EFFECT_PCT:g})")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help=f"exit {EXIT_REGRESSION} if a cell is significantly slower than "
                             "its baseline by PCT%% or more")
    parser.add_argument("--tracking-uri", default=default_store_uri(),
                        help=f"MLflow store (default: {default_store_uri()})")
    parser.add_argument("--experiment", default="rnnexp", help="experiment (default: rnnexp)")
    parser.add_argument("--output", type=Path, default=None,
                        help="chart PNG path (default: outputs/compare/<sweep>.png)")
    parser.add_argument("--roofline", action="store_true",
                        help="also draw the roofline chart: <sweep folder>/summary/roofline.png "
                             "when the folder is on this machine, else beside the chart")
    args = parser.parse_args(argv)
    two_given(args)
    if args.baseline and args.against:
        raise RnnexpError("--baseline and --against: choose one (a baseline option within "
                          "one sweep, or a baseline sweep)")
    if args.fail_on_regression is not None and not (args.baseline or args.against):
        raise RnnexpError("--fail-on-regression needs a baseline — add --against SWEEP or "
                          "--baseline KEY=VALUE")
    for name in ("min_effect", "fail_on_regression"):
        value = getattr(args, name)
        if value is not None and not 0 <= value < 100:
            raise RnnexpError(f"--{name.replace('_', '-')} {value:g}: a percentage in "
                              "[0, 100) — e.g. 5 for 5%")
    return args


def two_given(args: argparse.Namespace) -> None:
    """SWEEP, or BASELINE SWEEP (what `pyperf compare_to a.json b.json` users type): the
    sweep compared (`args.sweep`) and the baseline sweep (`args.against`)."""
    if len(args.sweeps) > 2:
        raise RnnexpError(f"{len(args.sweeps)} sweeps given: compare one, or a baseline and a "
                          "candidate (rnnexp compare BASELINE CANDIDATE)")
    if len(args.sweeps) == 2 and args.against:
        raise RnnexpError("two sweeps and --against: the first of the two is the baseline "
                          "already — drop --against, or give one sweep")
    if len(args.sweeps) == 2 and args.baseline:
        raise RnnexpError("two sweeps and --baseline: the first of the two is the baseline "
                          "— drop --baseline, or give one sweep")
    args.sweep = args.sweeps[-1] if args.sweeps else None
    if len(args.sweeps) == 2:
        args.against = args.sweeps[0]
    check_output(args.output)


def check_output(png: Optional[Path]) -> None:
    """--output names a file that can be made, before anything is read or drawn (a bad
    argument: exit 2, as for hydra.run.dir)."""
    if png is None:
        return
    if png.is_dir():
        raise RnnexpError(f"--output {png}: is a folder — name a .png file in it")
    parent = png.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".rnnexp-check-", suffix=".png")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise RnnexpError(f"--output {png}: cannot be written in {parent} "
                          f"({err.strerror or err}) — choose a writable folder") from None


class Stores:
    """The MLflow store, opened only if a sweep is named by run id or name."""

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment, self._conn = uri, experiment, None

    def load(self, name: Optional[str]) -> Sweep:
        """Results on disk when `name` is a path that exists or is plainly meant as one, else
        the sweep recorded in MLflow under that run id or name (None: the latest)."""
        from rnnexp.analysis import sweeps
        from rnnexp.results.sinks.mlflow import store

        if name is not None and (Path(name).expanduser().exists() or
                                 sweeps.looks_like_a_path(name)):
            return sweeps.from_folder(Path(name))
        if self._conn is None:
            try:
                self._conn = store.connect(self.uri, self.experiment, create=False)
            except store.StoreError as err:
                if name is None:
                    raise
                raise RnnexpError(f"{name}: no such file or folder, nor a sweep to look up in "
                                  f"MLflow ({err})") from None
        return sweeps.from_store(*self._conn, name)

    @property
    def client(self):
        return self._conn[0] if self._conn else None


def _linked(key: str, name: str) -> bool:
    """`name` is `key` or one of its sub-fields (model.hidden_size for model)."""
    return name == key or name.startswith(key + ".")


def parse_baseline(text: str, runs: list[Run]) -> tuple[str, str]:
    """--baseline KEY=VALUE on any config field or group of the sweep."""
    return parse_choice(text, runs, "--baseline", "this sweep")


def parse_choice(text: str, runs: list[Run], option: str, scope: str) -> tuple[str, str]:
    """KEY=VALUE on any config field or group of `runs` (`option` and `scope` name them in
    errors) that some timed run has: how compare, and the tools beside it, select runs."""
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise RnnexpError(f"{option} '{text}': expected KEY=VALUE, e.g. model=lstm or "
                          "shape.seq_len=20")
    fields = sorted({k for r in runs for k in r.config})
    if key not in fields:
        varied = [k for k in fields if len({r.config.get(k) for r in runs}) > 1]
        raise RnnexpError(f"{option} {key}: not a config field of {scope} — "
                          + (f"it varies in {', '.join(varied)}" if varied else
                             "nothing varies in it") + _did_you_mean(key, fields))
    values = sorted({r.config.get(key, "?") for r in runs})
    if not any(r.config.get(key) == value and r.row.fwd_median_ms is not None for r in runs):
        raise RnnexpError(f"{option} {text}: matches no timed run of {scope} — "
                          f"{key} was {', '.join(values)}")
    return key, value


def _did_you_mean(key: str, fields: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, fields, n=1)
    return f" — did you mean {close[0]}?" if close else ""


def baselines_within(runs: list[Run], key: str, value: str) -> list[Optional[Run]]:
    """Each run's baseline: the run whose measurement (rnnexp.results.identity, taken the same way)
    differs from it only in `key` (and its sub-fields)."""
    def rest(r: Run):
        return tuple(sorted((k, v) for k, v in r.identity.items() if not _linked(key, k)))

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


ORDER = ("model", "backend", "shape", "deepbench", "device", "bench", "sinks")
# Fields that vary with a group of another name: a DeepBench problem sets the shape.
LINKED = {"deepbench": ("shape",)}


def varying(runs: list[Run]) -> list[str]:
    """The config fields that tell the runs apart (groups first), at least one. When and
    from which commit each was measured are not among them (sweeps.told_apart adds them
    where nothing else does)."""
    from rnnexp.analysis.sweeps import COMMIT, WHEN

    keys = sorted({k for r in runs for k in r.config} - {WHEN, COMMIT},
                  key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    vary = [k for k in keys if len({r.config.get(k) for r in runs}) > 1]
    # A group's own sub-fields vary with it: the group names the row already.
    groups = [k for k in vary if k in ORDER]
    owners = [(g, o) for g in groups for o in (g, *LINKED.get(g, ()))]
    vary = [k for k in vary if not any(_linked(o, k) and o != k and k != g
                                       for g, o in owners)]
    return vary or [k for k in keys if k in ORDER][:1]


def caption(compared: bool) -> str:
    if not compared:
        from rnnexp.results.result import QUARTILES_NOTE

        return f"ms: {QUARTILES_NOTE}"
    return ("baseline and ms: the two levels a speedup compares, in ms — paired by round "
            "(rounds' level removed by median polish, then the mean of the processes' "
            "levels) for jobs measured interleaved, the geometric mean of the process "
            "medians otherwise — and median [q1, q3] of the samples where nothing "
            "is compared; speedup = baseline ÷ candidate of those levels (>1: faster) with its "
            "95% interval over the processes (t; and the drift between runs for runs "
            "measured apart, + the spread between nodes for runs of different cluster "
            "nodes); Holm-corrected; ~ = the interval lies within ±min-effect; "
            "cannot tell ±X% = the interval is that wide here; cannot tell = nothing can be "
            "said (a busy machine, one process a side: see the line below); processes: the "
            "baseline's/the candidate's, shared = the same worker processes, paired by "
            "process; ! = a run of this cell was flagged (oversubscribed, high spread, "
            "drifting)")


def processes_cell(cells: Cells, i: int) -> str:
    from rnnexp.analysis.sweeps import PHASES

    d = next((cells[(i, p)] for p, _ in PHASES if (i, p) in cells), None)
    return "—" if d is None else d.processes_text


def table(runs: list[Run], bases: Optional[list[Optional[Run]]], cells: Cells, title: str,
          keys: Sequence[str]) -> Table:
    from rnnexp.analysis.sweeps import PHASES

    t = Table(title=title, caption=caption(bases is not None))
    for k in keys:
        t.add_column(k)
    for p, _ in PHASES:
        if bases is not None:
            t.add_column(f"{p} baseline", justify="right")
        t.add_column(f"{p} ms", justify="right")
        if bases is not None:
            t.add_column(f"{p} speedup", justify="right")
    if bases is not None:
        t.add_column("processes", justify="right")
    t.add_column("status")
    for i, r in enumerate(runs):
        base = bases[i] if bases is not None else None
        row = [r.config.get(k, "?") for k in keys]
        for p, _ in PHASES:
            d = cells.get((i, p))
            if bases is not None:
                row.append("(this run)" if base is r else base.shown_ms(
                    p, d and d.baseline_ms, d and d.unit) if base else "no match")
            row.append(r.shown_ms(p, d and d.candidate_ms, d and d.unit))
            if bases is not None:
                mark = " !" if d and (flagged(r) or flagged(base)) else ""
                row.append("base" if base is r else d.cell() + mark if d else "—")
        if bases is not None:
            row.append(processes_cell(cells, i))
        t.add_row(*row, status_cell(r))
    return t


def status_cell(r: Run) -> str:
    from rnnexp.results.result import OK

    if r.row.status != OK:
        return f"[yellow]{escape(r.row.status)}[/]: {escape(r.row.reason)}"
    return "[green]ok[/]" + (f" [yellow]({escape(', '.join(r.flags))})[/]" if r.flags else "")


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


def how_judged(cells: Cells) -> str:
    """One line: how many cells were judged which way, and why some could not be."""
    from rnnexp.analysis import significance

    methods = Counter(d.method for d in cells.values())
    parts = [f"{n} {m}" for m, n in sorted(methods.items())]
    reasons = Counter(d.why_not for d in cells.values() if d.why_not)
    line = "cells judged: " + ", ".join(parts)
    disagree = sum(d.note.startswith("counts disagree") for d in cells.values())
    if disagree:
        line += (f"; instruction counts disagree with time in {disagree} cell"
                 f"{'s' * (disagree > 1)}, judged by time there")
    if reasons:
        line += "; nothing said for " + "; ".join(f"{n} ({why})" for why, n in
                                                   reasons.most_common())
    if methods.get(significance.RUNS):
        line += (" — runs measured at different times meet the machine's drift between "
                 "runs: measure A and B in one interleaved sweep to resolve smaller "
                 "differences (docs: comparing)")
    return line


@dataclass
class Comparison:
    """A sweep's runs, each with its baseline (None: nothing compared), and the cells judged."""

    sweep: Sweep
    runs: list[Run]
    bases: Optional[list[Optional[Run]]]
    title: str
    cells: Cells = field(default_factory=dict)


def paired(args: argparse.Namespace, stores: Stores) -> Comparison:
    """The sweep and, with --against or --baseline, each run's baseline."""
    sweep = stores.load(args.sweep)
    runs = sweep.runs
    if args.against:
        base_sweep = stores.load(args.against)
        what = differs(runs, base_sweep.runs)
        return Comparison(sweep, runs, baselines_across(runs, base_sweep.runs),
                          f"{sweep.name}  vs baseline  {base_sweep.name}  ("
                          + ("; ".join(what) if what else "no config difference recorded")
                          + ")")
    if args.baseline:
        key, value = parse_baseline(args.baseline, runs)
        return Comparison(sweep, runs, baselines_within(runs, key, value),
                          f"{sweep.name}  (baseline {key}={value}; rows differ from it in "
                          f"{key})")
    return Comparison(sweep, runs, None, sweep.name)


def draw_chart(c: Comparison, keys: list[str], png: Path, client) -> None:
    """Both sides of every cell and the speedup, or the medians alone without a baseline;
    logged to the sweep's parent run when it is in MLflow."""
    from rnnexp.analysis import compare_chart
    from rnnexp.results import summary
    from rnnexp.results.result import OK, label

    ok = [r for r in c.runs if r.row.status == OK]
    if not ok:
        return
    if c.bases is not None:
        compare_chart.draw(c.runs, c.bases, c.cells, keys, png, c.title)
    else:
        summary.chart([r.row for r in ok], png, f"{c.title}: median ms",
                      labels=[label(r.config, keys) for r in ok])
    where = ""
    if c.sweep.run_id and client is not None:
        client.log_artifact(c.sweep.run_id, str(png), "compare")
        where = f" (also logged to run {c.sweep.run_id} under compare/)"
    console.print(f"chart: {png}{where}", highlight=False)


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
    return EXIT_REGRESSION if found else 0


def compare(args: argparse.Namespace) -> int:
    from rnnexp.analysis import compare_costs, nodes, sweeps
    from rnnexp.analysis.report import publish
    from rnnexp.analysis.sweeps import PHASES
    from rnnexp.results.result import label
    from rnnexp.results.sinks.mlflow import store

    with store.http_limits():
        stores = Stores(args.tracking_uri, args.experiment)
        c = paired(args, stores)
        if c.bases is not None:
            c.cells = judge(c.runs, c.bases, args.min_effect / 100,
                            (args.fail_on_regression or 0) / 100)
        keys = sweeps.told_apart(c.runs, varying(c.runs))
        console.print(table(c.runs, c.bases, c.cells, c.title, keys))
        if c.cells:
            console.print(how_judged(c.cells), highlight=False, markup=False)
            crossed = nodes.crossings_line(
                c.runs, c.bases or [], lambda r: label(r.config, keys),
                {p: nodes.spread(sweeps_of(c.runs, c.bases or []), p) for p, _ in PHASES})
            if crossed:
                console.print(crossed, highlight=False, markup=False, soft_wrap=True)
        if compare_costs.recorded(c.runs):
            console.print(compare_costs.table(c.runs, c.bases, keys, c.title))
        png = args.output or Path("outputs/compare") / chart_name(c.sweep, args)
        try:
            draw_chart(c, keys, png, stores.client)
            if args.roofline:
                draw_roofline(c.sweep, c.runs, keys, png, stores.client)
            publish.write(report_of(c, keys, args), png.with_suffix(".html"), [c.sweep],
                          stores.client, "compare")
        except OSError as err:  # a full disk, a folder gone: the tables above stand
            print_error(f"cannot write {err.filename or png} ({err.strerror or err}) — the "
                        "comparison above is complete, its chart is not saved")
            # A regression found is the gate's answer, and wins.
            return verdict(c, args.fail_on_regression) or exit_codes.OUTPUT_FAILED
    return verdict(c, args.fail_on_regression)


def report_of(c: Comparison, keys: list[str], args: argparse.Namespace,
              sources: Sequence[str] = ()) -> Report:
    """The comparison as an HTML report's data (rnnexp.analysis.report), judged as above."""
    from rnnexp.analysis.report import build

    gate = None if args.fail_on_regression is None else args.fail_on_regression / 100
    return build.report(
        c.title, sources or [c.sweep.name], c.runs, c.bases, c.cells, keys,
        baseline=args.baseline or f"sweep {args.against}", min_effect=args.min_effect / 100,
        gate=gate, how_judged=how_judged(c.cells) if c.cells else "",
        regressions=regressions(c.runs, c.cells, args.fail_on_regression) if gate else [],
        flagged=doubtful_cells(c.runs, c.bases, c.cells),
        sides=(f"baseline sweep {args.against}", "this sweep") if args.against else
        (f"baseline {args.baseline}", "the rest"))


def chart_name(sweep: Sweep, args: argparse.Namespace) -> str:
    """What the chart shows, in a short file name (rnnexp.analysis.compare_chart)."""
    from rnnexp.analysis import compare_chart

    return compare_chart.file_name(sweep.name, args.baseline, args.against)


def roofline_path(sweep: Sweep, chart: Path) -> Path:
    """In the sweep's folder when it is on this machine, else beside the fwd/bwd chart."""
    from rnnexp.analysis import roofline_chart
    from rnnexp.results import summary

    if sweep.folder is not None and sweep.folder.is_dir():
        return sweep.folder / summary.SUMMARY_DIR / roofline_chart.CHART
    return chart.with_name(f"{chart.stem}-{roofline_chart.CHART}")


def draw_roofline(sweep: Sweep, runs: list[Run], keys: list[str], chart: Path, client) -> None:
    from rnnexp.analysis import roofline_chart

    pts, missing = roofline_chart.points(runs, keys)
    roof = roofline_chart.draw(pts, roofline_path(sweep, chart), f"{sweep.name}: roofline")
    logged = ""
    if sweep.run_id and client is not None:
        client.log_artifact(sweep.run_id, str(roof), "compare")
        logged = ", also logged under compare/"
    console.print(f"roofline: {roof} ({len(pts)} jobs"
                  + (f"; {missing} without roofline metrics left out" if missing else "")
                  + f"{logged})", highlight=False)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp compare ARGS`; errors reach rnnexp.app.commands' boundary."""
    args = parse_args(argv)
    try:
        return compare(args)
    except Exception as err:
        if not from_the_store(err) or isinstance(err, RnnexpError):
            raise
        from rnnexp.results.sinks.mlflow import store

        raise RnnexpError(f"MLflow store {redact(str(args.tracking_uri))}: "
                          f"{redact(store.short_reason(err))}") from None


def from_the_store(err: BaseException) -> bool:
    """An error of the MLflow store or the way to it (its client, HTTP, the database)."""
    from mlflow.exceptions import MlflowException

    return isinstance(err, MlflowException) or type(err).__module__.split(".")[0] in (
        "mlflow", "requests", "urllib3", "sqlalchemy", "sqlite3")


