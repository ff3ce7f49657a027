"""One job from a validated config to a `Result`: plan, then execute — in fresh worker
processes where the backend or bench.processes asks (rnnexp.schedule) — and the records of
jobs that did not run."""

from __future__ import annotations

from typing import Optional

from rnnexp import job, platform
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.results import CRASHED, INTERRUPTED, UNSUPPORTED, Result
from rnnexp.schema import Config
from rnnexp.timing import Progress


def run(cfg: Config, choices: dict[str, str], overrides: list[str],
        progress: Optional[Progress] = None) -> Result:
    """Raises RnnexpError (one line) when the job is refused before timing."""
    planned = job.plan(cfg, choices, overrides)
    result = job.execute(planned, progress=progress)
    result.git_commit = platform.git_commit()
    return result


def not_run(cfg: Config, choices: dict[str, str], overrides: list[str],
            err: BaseException) -> Result:
    """The record of a job that was declined, crashed or interrupted."""
    if isinstance(err, KeyboardInterrupt):
        status, reason = INTERRUPTED, "interrupted"
    elif isinstance(err, RnnexpError) and not isinstance(err, JobCrashed):
        status, reason = UNSUPPORTED, str(err)
    elif isinstance(err, JobCrashed):
        status, reason = CRASHED, str(err)
    else:
        status, reason = CRASHED, f"{type(err).__name__}: {err}"
    return Result(choices=dict(choices), overrides=list(overrides),
                  config=job.plain_config(cfg), status=status, reason=reason,
                  platform=platform.current(), git_commit=platform.git_commit())
