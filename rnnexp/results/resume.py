"""Resuming a sweep: which of its jobs were already measured in its folder.

Hydra cannot resume a multirun; re-running the same command with `resume=true` and the
earlier sweep's folder (`hydra.sweep.dir=...`) skips every job that was already measured
there with status `ok`: the same measurement (rnnexp.results.identity), taken the same way (a job
whose iteration count differs runs again), under the same code version (git commit) and
torch version. Jobs that failed, crashed, were declined or were killed run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from rnnexp.results.identity import MeasurementKey
from rnnexp.results.result import OK
from rnnexp.results.sinks import load_jobs


def finished_jobs(sweep_dir: Path, configs: Sequence[Mapping[str, Any]], git_commit: str,
                  torch_version: str) -> list[int]:
    """Job numbers (indexes into `configs`, the sweep's jobs in order, as plain resolved
    configs) already measured `ok` in the sweep folder."""
    done = {MeasurementKey.of_result(r).taken_as() for _, r in load_jobs(sweep_dir)
            if r.status == OK}
    return [num for num, config in enumerate(configs)
            if MeasurementKey.of_config(config, torch_version, git_commit).taken_as() in done]
