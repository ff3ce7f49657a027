"""The results table on the console: after a single run; for a sweep, one table at its end
(the jobs' own tables would repeat its rows, footnotes and warnings), then where everything
went — the sweep's folder, its jobs by name, its summary files — and the command to run
next."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.results import job_links, summary
from rnnexp.results.report import console, print_warning, results_table
from rnnexp.results.result import INTERRUPTED, OK, RESULTS_FILE, Instructions, Result
from rnnexp.results.sinks import Jobs, Sink, Sweep

# A sweep names its job folders one by one up to this many, else one example.
JOBS_LISTED = 4


class Console(Sink):
    """`wide`: the table adds dtype, GFLOP/s, GB/s and the verification error
    (sinks.console.wide=true)."""

    def __init__(self, wide: bool = False):
        self.wide = bool(wide)

    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        if result.status == INTERRUPTED:
            return  # the process says so in one line as it exits
        if sweep is not None:
            return  # the sweep's table at its end shows it, with the others
        console.print(results_table([result], wide=self.wide))
        if result.instructions is not None:
            console.print(counts_line(result.instructions), highlight=False)
        if result.environment is not None and result.environment.warnings:
            print_warning(result.environment.warning_line())
        if (Path(output_dir) / RESULTS_FILE).exists():
            console.print(f"results: {Path(output_dir) / RESULTS_FILE}", highlight=False)

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        results = [r for _, r in jobs]
        console.print(results_table(results, title=f"rnnexp sweep: {len(jobs)} jobs",
                                    wide=self.wide, shorten=True))
        for line in sweep_warnings(jobs):
            print_warning(line)

    def on_sweep_closed(self, sweep: Sweep, jobs: Jobs) -> None:
        for line in where_it_went(sweep.path, jobs):
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def counts_line(ins: Instructions) -> str:
    """bench.metric=instructions: each phase's count per iteration, its spread and cost."""
    parts = [f"{name} {c.median:,.0f} (±{50 * c.spread:.2f}%"
             + (f", {c.ns_per_instruction:.3f} ns each)" if c.ns_per_instruction else ")")
             for name, c in ins.phases.items()]
    return f"instructions ({ins.tool}, one thread, ISA pinned): " + " · ".join(parts)


def sweep_warnings(jobs: Jobs) -> list[str]:
    """Each reason the machine was flagged for, once for all the jobs it was true of (the
    status column shows each job's flags): `… in 3 jobs (lstm, py, jit): spread high: …`,
    with the first job's figures when theirs differ."""
    by_flag: dict[str, list[tuple[str, str]]] = {}
    for name, (_, r) in zip(job_links.names(jobs), jobs, strict=True):
        env = r.environment
        if env is None or not env.warnings:
            continue
        pairs = zip(env.flags, env.warnings, strict=True) if len(env.flags) == len(env.warnings) \
            else [("", "; ".join(env.warnings))]
        for flag, why in pairs:
            by_flag.setdefault(flag, []).append((name, why))
    lines = []
    for seen in by_flag.values():
        names = [n for n, _ in seen]
        who = seen[0][0] if len(seen) == 1 else f"{len(seen)} jobs" + (
            f" ({', '.join(names)})" if len(seen) <= JOBS_LISTED else "")
        same = len({why for _, why in seen}) == 1
        lines.append(f"timings may not be trustworthy in {who}: {seen[0][1]}"
                     + ("" if same else f" — {seen[0][0]}'s figures; each job's are in its "
                                        "results.json"))
    return lines


def shown(path: Path) -> str:
    """`path` relative to the current folder when it is inside it (shorter to type)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def where_it_went(sweep_dir: Path, jobs: Jobs) -> list[str]:
    """The sweep's folder, its jobs by name, the summary files it holds, and what to run
    next."""
    sweep_dir = Path(sweep_dir)
    lines = [f"sweep: {shown(sweep_dir)}/"]
    linked = (sweep_dir / job_links.LINKS).is_dir()
    pairs = [(name, os.path.relpath(folder, sweep_dir))
             for name, (folder, _) in zip(job_links.names(jobs), jobs, strict=True)]
    if pairs:
        def one(name: str, folder: str) -> str:
            return f"{job_links.LINKS}/{name} → {folder}/" if linked else f"{folder}/ {name}"

        if len(pairs) <= JOBS_LISTED:
            lines.append("  " + " · ".join(one(n, f) for n, f in pairs)
                         + "  (each: results.json, .hydra/)")
        else:
            lines.append(f"  {len(pairs)} jobs, e.g. {one(*pairs[0])}  (each: results.json, "
                         ".hydra/)")
    files = [name for name in (*summary.SUMMARY_FILES, summary.CHART, summary.REPORT)
             if (sweep_dir / summary.SUMMARY_DIR / name).is_file()]
    if files:
        described = {summary.CHART: f"{summary.CHART} (chart)",
                     summary.REPORT: f"{summary.REPORT} (open in a browser)"}
        lines.append(f"  {summary.SUMMARY_DIR}/ " + " · ".join(described.get(f, f)
                                                                for f in files))
    command = next_command(sweep_dir, [r for _, r in jobs])
    if command:
        lines.append(f"next: {command}")
    return lines


def next_command(sweep_dir: Path, results: Sequence[Result]) -> str:
    """`rnnexp compare <sweep> --baseline KEY=VALUE`: the first key the sweep varies, at the
    value of its first timed job; without a baseline when nothing varies; nothing when fewer
    than two jobs were timed."""
    timed = [r for r in results if r.status == OK]
    if len(timed) < 2:
        return ""
    command = f"rnnexp compare {shlex.quote(shown(sweep_dir))}"
    key = swept_key(timed)
    if key is None:
        return command
    value = dict(o.lstrip("+~").split("=", 1) for o in timed[0].overrides
                 if "=" in o).get(key) or timed[0].choices.get(key, "")
    return f"{command} --baseline {shlex.quote(f'{key}={value}')}"


def swept_key(results: Sequence[Result]) -> Optional[str]:
    """The first override (in command-line order) whose value differs between the jobs,
    else the first config group that does; None when nothing tells them apart."""
    def values(r: Result) -> dict[str, str]:
        return dict(o.lstrip("+~").split("=", 1) for o in r.overrides if "=" in o)

    seen = [values(r) for r in results]
    for key in seen[0]:
        if not key.startswith(("hydra", "sinks")) and len({v.get(key) for v in seen}) > 1:
            return key
    for key in results[0].choices:
        if len({r.choices.get(key) for r in results}) > 1:
            return key
    return None
