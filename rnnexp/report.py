"""Console output: the rich progress bar of a timing loop and the results table."""

from __future__ import annotations

from typing import Iterable, Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rnnexp.credentials import redact
from rnnexp.results import OK, RECOMPILED, PhaseStats, Result, format_ms

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
    """A progress bar per phase (warmup, timed) of one job; implements timing.Progress."""

    def __init__(self, label: str, console: Console = console):
        self._label = label
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
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

    def advance(self) -> None:
        if self._task is not None:
            self._bar.advance(self._task)


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


def _ms(phase: PhaseStats) -> str:
    return format_ms(phase.median_ms, phase.iqr_ms) if phase.timed else "n/a"


def results_table(results: Iterable[Result], title: str = "rnnexp") -> Table:
    table = Table(title=title, caption="times: median ± IQR/2 in ms; rates at the median of "
                                       "forward+backward (forward alone if no backward); "
                                       "% peak: GFLOP/s · GB/s as % of the device's measured "
                                       "GEMM · copy peaks")
    for col in ("model", "backend", "shape", "device", "dtype"):
        table.add_column(col)
    for col in ("fwd ms", "bwd ms", "tokens/s", "GFLOP/s", "GB/s", "% peak"):
        table.add_column(col, justify="right")
    table.add_column("verified")
    table.add_column("status")
    for r in results:
        model, backend, shape = (r.choices.get(k, "?") for k in ("model", "backend", "shape"))
        if not r.timed:
            table.add_row(model, backend, shape, r.device or "—", r.dtype or "—",
                          "—", "—", "—", "—", "—", "—", "—",
                          f"[yellow]{r.status}[/]: {escape(r.reason)}")
            continue
        if r.backend.name and r.backend.name != backend:
            backend = f"{backend}→{r.backend.name}"
        times = [_ms(r.phase("forward")), _ms(r.phase("backward"))]
        rate = r.rate_phase
        rates = [_num(rate.tokens_per_s, ",.0f"), _num(rate.gflops, ".2f"),
                 _num(rate.gbps, ".2f"), _peak(r)]
        if r.status == OK:
            status = "[green]ok[/]"
            if r.environment is not None and r.environment.flags:  # see the warning line
                status += f" [yellow]({escape(', '.join(r.environment.flags))})[/]"
        else:
            # Not a valid result: the times stay visible for diagnosis, struck through.
            status = f"[red]{r.status}[/]"
            if r.status == RECOMPILED:  # which compilations landed in the samples
                status += f": {escape(r.reason)}"
            times = [f"[strike dim]{t}[/]" for t in times]
            rates = ["—"] * len(rates)
        table.add_row(model, backend, shape, r.device, r.dtype, *times, *rates, _verified(r),
                      status)
    return table
