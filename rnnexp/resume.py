"""Resuming a sweep: which of its jobs were already measured in its folder.

Hydra cannot resume a multirun; re-running the same command with `resume=true` and the
earlier sweep's folder (`hydra.sweep.dir=...`) skips every job whose configuration was
already measured there with status `ok` under the same code version (git commit) and torch
version. Jobs that failed, crashed, were declined or were killed run again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from rnnexp.results import OK, Result
from rnnexp.sinks import load_jobs

# Config fields that do not change what is measured.
NOT_MEASURED = ("resume", "sinks")


def config_key(config: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in NOT_MEASURED},
                      sort_keys=True, default=str)


def measured(result: Result) -> tuple[str, str, str]:
    """What makes two measurements the same: configuration, code and torch versions."""
    torch_version = result.platform.torch_version if result.platform else ""
    return config_key(result.config), result.git_commit, torch_version


def finished_jobs(sweep_dir: Path, configs: Sequence[Mapping[str, Any]], git_commit: str,
                  torch_version: str) -> list[int]:
    """Job numbers (indexes into `configs`, the sweep's jobs in order) already measured `ok`
    in the sweep folder."""
    done = {measured(r) for _, r in load_jobs(sweep_dir) if r.status == OK}
    return [num for num, config in enumerate(configs)
            if (config_key(config), git_commit, torch_version) in done]
