"""`python -m rnnexp matrix`: which model × backend combinations run on this machine.

Each cell comes from composing that combination like the CLI does and calling `job.plan`,
the same checks every job makes before timing (rnnexp.app.support) — there is no second
table to keep in sync. Refusals found only by trying (e.g. inductor on a model dynamo cannot
capture) show up when the job runs, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from rnnexp.app import support
from rnnexp.app.config_check import group_options
from rnnexp.errors import OneLineParser, RnnexpError
from rnnexp.results.report import console, err_console


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
        task = progress.add_task("checking", total=len(models) * len(backends))
        cells = {}
        for (model, backend), why in support.verdicts(models, backends, args.device, plat):
            cells[model, backend] = why
            progress.update(task, description=f"checked {model} × {backend}", advance=1)
    table, footnotes = support.grid(models, backends, cells,
                                    f"device={args.device} · torch {plat.torch_version} · "
                                    f"{plat.build} · {plat.gpu_count} GPU(s)")
    console.print(table)
    for line in footnotes:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
