"""Console output: the rich progress bar of a timing loop and the results table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from rnnexp.config.credentials import redact

if TYPE_CHECKING:  # the Result imports torch; print_error and print_warning must not
    from rnnexp.results.result import PhaseStats, Result

# Logs and CI are not terminals; give tables room there instead of rich's 80 columns.
console = Console(width=None if Console().is_terminal else 160)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 160)


def print_error(message: str) -> None:
    """The one line every command prints for a problem the user can fix (URI credentials
    redacted)."""
    err_console.print(f"[bold red]error:[/] {escape(redact(message))}", highlight=False,
                      soft_wrap=True)


def print_warning(message: str) -> None:
    """One line about something that weakens a result without stopping it."""
    err_console.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


class RichProgress:
    """A progress bar per phase (warmup, timed) of one job; implements timing.Progress. It is
    drawn when it advances — between a worker's samples, never while they are taken — not
    by a thread of its own ten times a second."""

    REDRAW_S = 0.1

    def __init__(self, label: str, console: Console = console):
        self._label = label
        self._drawn = 0.0
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),  # what is left of a long run, from its pace so far
            console=console,
            transient=False,
            auto_refresh=False,
        )
        self._task: Optional[int] = None

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def phase(self, name: str, total: int) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[self._task].total)
        self._task = self._bar.add_task(f"{self._label} {name}", total=total)
        self._draw()

    def advance(self) -> None:
        if self._task is not None:
            self._bar.advance(self._task)
            self._draw()

    def _draw(self) -> None:
        now = time.monotonic()
        if now - self._drawn >= self.REDRAW_S:
            self._drawn = now
            self._bar.refresh()


def _num(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _verified(result: Result) -> str:
    v = result.verification
    if v is None:
        return "—"
    err = v.max_abs_error
    if v.status == "passed":
        return f"[green]✓[/] {err:.1e}"
    if v.status == "failed":
        return f"[red]✗[/] {err:.1e}" if err is not None else "[red]✗[/]"
    return v.status or "—"


def percent(value: Optional[float]) -> str:
    return "—" if value is None else (f"{value:.0f}%" if value >= 10 else f"{value:.2g}%")


def _peak(result: Result) -> str:
    """GFLOP/s and GB/s as % of the device's measured GEMM and copy peaks."""
    roof = result.roofline
    if roof is None:
        return "—"
    return f"{percent(roof.pct_peak_flops)} · {percent(roof.pct_peak_bandwidth)}"


def _memory(result: Result) -> str:
    """Peak MiB above the phase's start, forward · backward (the kind is in the caption)."""
    mem = result.memory
    if mem is None or not mem.kind:
        return "—"
    return " · ".join(_num(v, ".3g") for v in (mem.forward_mb, mem.backward_mb))


def _start_up(result: Result) -> str:
    """Seconds from the build to the first result, with the compiler's own share."""
    cost = result.compile_cost
    if cost is None or cost.time_to_first_s is None:
        return "—"
    first = f"{cost.time_to_first_s:.3g}"
    return f"{first} ({cost.compile_s:.3g})" if cost.compile_s is not None else first


def _ms(phase: PhaseStats) -> str:
    from rnnexp.results.result import format_quartiles, quartiles

    return format_quartiles(phase.median_ms, *quartiles(phase)) if phase.timed else "n/a"


CAPTION = ("ms: median [25th, 75th percentile] of the timed iterations · rates at the median of "
           "forward+backward (forward alone if no backward) · % peak: GFLOP/s · GB/s as % of the "
           "device's measured GEMM · copy peaks")
WIDE_CAPTION = ("peak MiB: above each phase's start, forward · backward (cuda_peak_mb: CUDA "
                "allocator; rss_hwm_mb: process resident-set high-water mark) · first s: from the "
                "build to the first result (compiling, as its compiler reports it)")


def job_name(r: Result) -> str:
    """The job's label, with the backend that ran after the one asked for (auto→aten)."""
    backend = r.choices.get("backend", "?")
    if r.backend.name and r.backend.name != backend:
        return r.label.replace(f"·{backend}·", f"·{backend}→{r.backend.name}·", 1)
    return r.label


class Footnotes:
    """Long reasons under the table, each once, numbered: a reason in a cell wrapped over
    a dozen lines and pushed every column out of view."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.notes:
            self.notes.append(text)
        return f"[{self.notes.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{i}] {text}" for i, text in enumerate(self.notes, 1)]


def status_cell(r: Result, notes: Footnotes) -> str:
    """The status, with the machine's flags or a footnote saying why it is not ok."""
    from rnnexp.results.result import OK

    if r.status == OK:
        flags = f" [yellow]({escape(', '.join(r.flags))})[/]" if r.flags else ""
        unverified = r.verification is not None and r.verification.status != "passed"
        return "[green]ok[/]" + (" [yellow]not verified[/]" if unverified else "") + flags
    cell = f"[{'yellow' if not r.timed else 'red'}]{r.status}[/]"
    if r.verification is not None and r.verification.status == "failed":
        cell += f" {_verified(r)}"  # by how much it missed
    return cell + (f" {escape(notes.mark(r.reason))}" if r.reason else "")


def results_table(results: Iterable[Result], title: str = "rnnexp", wide: bool = False,
                  shorten: bool = False) -> Table:
    """One row per job: its name, times, rates and status, narrow enough for a terminal;
    `wide` adds dtype, GFLOP/s, GB/s and the verification error (all of it is in
    results.json). Reasons are numbered footnotes in the caption. `shorten` (a sweep's
    table): the parts of the name every row shares move to the title."""
    from rnnexp.results.result import OK
    from rnnexp.results.summary import split_common

    results = list(results)
    names = [job_name(r) for r in results]
    if shorten:
        names, common = split_common(names)
        title += f" — all {common}" if common else ""
    notes = Footnotes()
    table = Table(title=title, caption_justify="left")
    table.add_column("job", overflow="fold")
    if wide:
        table.add_column("dtype", no_wrap=True)
    numbers = ["fwd ms", "bwd ms", "tokens/s"] + (["GFLOP/s", "GB/s"] if wide else []) + \
        ["% peak"] + (["peak MiB", "first s"] if wide else [])
    for col in numbers:
        table.add_column(col, justify="right", no_wrap=True)
    if wide:
        table.add_column("verified", no_wrap=True)
    table.add_column("status")
    for r, name in zip(results, names, strict=True):
        times = [_ms(r.phase("forward")), _ms(r.phase("backward"))] if r.timed else \
            ["—", "—"]
        rate = r.rate_phase
        rates = [_num(rate.tokens_per_s, ",.0f")] + \
            ([_num(rate.gflops, ".2f"), _num(rate.gbps, ".2f")] if wide else []) + [_peak(r)]
        if r.status != OK:
            # Not a valid result: the times stay visible for diagnosis, struck through.
            times = [f"[strike dim]{t}[/]" if r.timed else t for t in times]
            rates = ["—"] * len(rates)
        if wide:
            rates += [_memory(r), _start_up(r)]
        extra = [r.dtype or "—"] if wide else []
        checked = [_verified(r)] if wide else []
        table.add_row(escape(name), *extra, *times, *rates, *checked,
                      status_cell(r, notes))
    table.caption = "\n".join([CAPTION, *([WIDE_CAPTION] if wide else []), *notes.lines()])
    return table
