"""`python -m rnnexp matrix`: which model × backend combinations run on this machine.

Each cell comes from composing that combination like the CLI does and calling `job.plan`,
the same checks every job makes before timing — there is no second table to keep in sync.
Refusals found only by trying (e.g. inductor on a model dynamo cannot capture) show up when
the job runs, not here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_dir
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from rnnexp.app.config_check import CONF_DIR, CONFIG_NAME, group_options
from rnnexp.config import kernel_plugins, schema
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.report import console, err_console

if TYPE_CHECKING:  # with torch: imported once the arguments are read, under the progress bar
    from rnnexp.machine.platform import Platform

OK = "✓"


def support(models: Sequence[str], backends: Sequence[str], device: str = "auto",
            plat: Platform | None = None, extra: Sequence[str] = (),
            progress: Progress | None = None) -> dict[tuple[str, str], str]:
    """{(model, backend): "" if it runs here, else the one-line reason}; `extra` overrides
    (e.g. dtype=bfloat16) apply to every cell. `progress` advances once a cell."""
    from rnnexp.measure import job

    schema.register()
    kernel_plugins.register()
    cells = {}
    task = progress.add_task("checking", total=len(models) * len(backends)) \
        if progress else None
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for model in models:
            for backend in backends:
                if progress is not None and task is not None:
                    progress.update(task, description=f"checking {model} × {backend}")
                choices = {"model": model, "backend": backend, "device": device}
                overrides = [f"{k}={v}" for k, v in choices.items()] + list(extra)
                try:
                    cfg = schema.validate(compose(config_name=CONFIG_NAME, overrides=overrides))
                    job.plan(cfg, choices, overrides, plat=plat)
                    cells[model, backend] = ""
                except RnnexpError as err:
                    cells[model, backend] = str(err)
                if progress is not None and task is not None:
                    progress.advance(task)
    return cells


@dataclass
class Reason:
    """One footnote: a refusal shared by several models, their names in place of one."""

    why: str  # the refusal with the model's name as {models}
    models: list[str] = field(default_factory=list)
    advices: list[str] = field(default_factory=list)  # what to use instead, per model

    def add(self, model: str, advice: str) -> None:
        if model not in self.models:
            self.models.append(model)
            self.advices.append(advice)

    def line(self) -> str:
        text = self.why.replace("{models}", ", ".join(self.models))
        if not self.advices[0]:
            return text
        if len(set(self.advices)) == 1:
            return f"{text} — {self.advices[0]}"
        return f"{text} — e.g. for {self.models[0]}: {self.advices[0]}"


def reason_key(model: str, why: str) -> tuple[str, str]:
    """(the refusal without the model's own name, the advice after " — "): cells refused
    for the same reason share a footnote; 28 near-copies told nothing more than 8."""
    head, _, advice = why.partition(" — ")
    return re.sub(rf"\bmodel={re.escape(model)}\b", "model={models}", head), advice


def render(models: Sequence[str], backends: Sequence[str], cells: dict, title: str) -> None:
    """A ✓/✗ grid, then each distinct reason once, numbered, its models named together."""
    reasons: dict[str, Reason] = {}
    table = Table(title=title)
    table.add_column("model")
    for b in backends:
        table.add_column(b, justify="center")
    for m in models:
        row = []
        for b in backends:
            why = cells[m, b]
            if not why:
                row.append(f"[green]{OK}[/]")
                continue
            head, advice = reason_key(m, why)
            reasons.setdefault(head, Reason(why=head)).add(m, advice)
            row.append(f"[red]✗{list(reasons).index(head) + 1}[/]")
        table.add_row(m, *row)
    console.print(table)
    for i, reason in enumerate(reasons.values(), 1):
        console.print(f"✗{i} {reason.line()}", highlight=False, soft_wrap=True, markup=False)


def _names(text: str | None, group: str) -> list[str]:
    options = group_options(group)
    if not text:
        return options
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in options]
    if unknown:
        raise RnnexpError(f"--{group}s: no such option {', '.join(unknown)} — choose from: "
                          f"{', '.join(options)}")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    parser = OneLineParser(prog="rnnexp matrix", description=__doc__)
    parser.add_argument("--device", default="auto", choices=group_options("device"),
                        help="device option to check under (default: auto)")
    parser.add_argument("--models", help="comma-separated model options (default: all)")
    parser.add_argument("--backends", help="comma-separated backend options (default: all)")
    args = parser.parse_args(argv)
    models, backends = _names(args.models, "model"), _names(args.backends, "backend")
    # Each cell plans a job (~0.3 s), after torch's import and the platform's probe: say how
    # far it is from the first second rather than stay silent a minute.
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True) as progress:
        starting = progress.add_task("reading this machine's PyTorch build and devices",
                                     total=None)
        from rnnexp.machine.platform import current as current_platform

        plat = current_platform()
        progress.remove_task(starting)
        cells = support(models, backends, args.device, plat, progress=progress)
    render(models, backends, cells,
           f"device={args.device} · torch {plat.torch_version} · {plat.build} · "
           f"{plat.gpu_count} GPU(s)")

