"""One job from a validated config to a `Result`: plan (rnnexp.job), then execute
(rnnexp.execution) — in fresh worker processes where the backend or bench.processes asks
(rnnexp.schedule) — and the records of jobs that did not run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rnnexp import execution, job, memory, platform, roofline
from rnnexp.errors import Interrupted, JobCrashed, RnnexpError, crash_line, signal_name
from rnnexp.results import CRASHED, INTERRUPTED, UNSUPPORTED, Result
from rnnexp.schema import Config
from rnnexp.timing import Progress


def run(cfg: Config, choices: dict[str, str], overrides: list[str],
        progress: Optional[Progress] = None, output_dir: Optional[Path] = None,
        planned: Optional[job.Plan] = None) -> Result:
    """Raises RnnexpError (one line) when the job is refused before timing, JobCrashed (one
    line) when it crashes. `planned`: the job's plan, if made already."""
    planned = planned or job.plan(cfg, choices, overrides)
    planned.output_dir = output_dir
    try:
        result = execution.execute(planned, progress=progress)
    except RnnexpError:
        raise
    except Exception as err:  # one line for the record; an out-of-memory names the shape
        raise JobCrashed(memory.crash_line(cfg.shape, err)) from err
    result.git_commit = platform.git_commit()
    if cfg.bench.roofline:  # after timing, in this process: never inside a timed region
        result.roofline = roofline.of_result(result)
    return result


def not_run(cfg: Config, choices: dict[str, str], overrides: list[str],
            err: BaseException) -> Result:
    """The record of a job that was declined, crashed or interrupted."""
    if isinstance(err, KeyboardInterrupt):
        # Ctrl-C, or the scheduler's signal (rnnexp.preemption.Killed) with its reason
        status, reason = INTERRUPTED, str(err) or "interrupted (SIGINT)"
    elif isinstance(err, Interrupted):
        status, reason = INTERRUPTED, f"interrupted ({signal_name(err.signum)})"
    elif isinstance(err, RnnexpError) and not isinstance(err, JobCrashed):
        status, reason = UNSUPPORTED, str(err)
    elif isinstance(err, JobCrashed):
        status, reason = CRASHED, str(err)
    else:
        status, reason = CRASHED, crash_line(err)
    return Result(choices=dict(choices), overrides=list(overrides),
                  config=job.plain_config(cfg), status=status, reason=reason,
                  platform=platform.current(), git_commit=platform.git_commit())
