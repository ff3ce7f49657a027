"""Which model × backend combinations run on a machine: each cell is `job.plan`'s verdict
on that combination composed like the CLI composes it — the same checks every job makes
before timing, so there is no second table to keep in sync — and the ✓/✗ grid that shows
them, each distinct refusal once as a footnote.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_dir
from rich.table import Table

from rnnexp.app.config_check import CONF_DIR, CONFIG_NAME
from rnnexp.config import kernel_plugins, schema
from rnnexp.errors import RnnexpError

if TYPE_CHECKING:  # with torch
    from rnnexp.machine.platform import Platform

OK = "✓"

Cell = tuple[str, str]  # (model, backend)


def verdicts(models: Sequence[str], backends: Sequence[str], device: str = "auto",
             plat: Platform | None = None, extra: Sequence[str] = ()
             ) -> Iterator[tuple[Cell, str]]:
    """Each (model, backend) in turn with "" if it runs here, else the one-line reason;
    `extra` overrides (e.g. dtype=bfloat16) apply to every cell."""
    from rnnexp.measure import job

    schema.register()
    kernel_plugins.register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for model in models:
            for backend in backends:
                choices = {"model": model, "backend": backend, "device": device}
                overrides = [f"{k}={v}" for k, v in choices.items()] + list(extra)
                try:
                    cfg = schema.validate(compose(config_name=CONFIG_NAME, overrides=overrides))
                    job.plan(cfg, choices, overrides, plat=plat)
                    yield (model, backend), ""
                except RnnexpError as err:
                    yield (model, backend), str(err)


def support(models: Sequence[str], backends: Sequence[str], device: str = "auto",
            plat: Platform | None = None, extra: Sequence[str] = ()) -> dict[Cell, str]:
    """{(model, backend): "" if it runs here, else the one-line reason}."""
    return dict(verdicts(models, backends, device, plat, extra))


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


def grid(models: Sequence[str], backends: Sequence[str], cells: dict[Cell, str],
         title: str) -> tuple[Table, list[str]]:
    """A ✓/✗ grid, and each distinct reason once, numbered, its models named together."""
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
    return table, [f"✗{i} {reason.line()}" for i, reason in enumerate(reasons.values(), 1)]
