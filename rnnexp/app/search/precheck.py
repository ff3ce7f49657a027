"""What a cell's plan refuses, found before it takes a place in a window: the same checks
every job makes before timing (rnnexp.app.config_check, rnnexp.measure.job.plan — the
support matrix asks them too), in this process, in well under a second. A refused cell is a
failed constraint with its reason and costs no measurement."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.app import config_check
from rnnexp.config import kernel_plugins, schema
from rnnexp.errors import RnnexpError
from rnnexp.measure import job
from rnnexp.results.result import Result
from rnnexp.run import execution


@dataclass
class Refusal:
    reason: str
    result: Optional[Result]  # the record a sweep would have made of it (None: no config)


def refusal(command_line: Sequence[str]) -> Optional[Refusal]:
    """None when the cell can be measured here, else why not."""
    schema.register(with_deepbench=any("deepbench" in o for o in command_line))
    kernel_plugins.register()
    overrides = list(command_line)
    try:
        cfg = config_check.check(overrides, multirun=False)[0]
    except RnnexpError as err:
        return Refusal(str(err), None)
    choices = {}
    for o in overrides:
        key, _, value = o.partition("=")
        if config_check.group_options(key.lstrip("+")):
            choices[key.lstrip("+")] = value
    try:
        job.plan(cfg, choices, overrides)
    except RnnexpError as err:
        return Refusal(str(err), execution.not_run(cfg, choices, overrides, err))
    return None


def record(refused: Refusal, folder: Path) -> Optional[Path]:
    """The refusal's results.json under `folder` (as a sweep records a declined job)."""
    if refused.result is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    refused.result.save(folder)
    return folder
