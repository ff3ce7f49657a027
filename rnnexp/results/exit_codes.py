"""What `python -m rnnexp` (and its tools) exit with. One table, documented in the README.

A sweep's jobs may run in other processes; its status is decided in the launching process
at the end of the sweep from the jobs' saved results, and `rnnexp.app.cli.main` exits with it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Iterable

OK = 0  # every job ran and was verified (or declined as unsupported within a sweep)
JOB_FAILED = 1  # a job failed verification, crashed, or recompiled while timed
USER_ERROR = 2  # bad input: refused before anything ran or was recorded
REGRESSION = 3  # rnnexp compare --fail-on-regression found a regression
# A result could not be written where it belongs (full disk, a folder gone or read-only): it
# is kept in a fallback folder that a one-line error names (rnnexp.app.recording).
OUTPUT_FAILED = 4
# Ended by a signal: 128 + its number, as shells report it.
SIGINT = 128 + signal.SIGINT  # 130, Ctrl-C
SIGTERM = 128 + signal.SIGTERM  # 143, kill / a scheduler


def for_signal(signum: int) -> int:
    return 128 + int(signum)


def for_statuses(statuses: Iterable[str]) -> int:
    """The exit status of a run or sweep whose jobs ended with these statuses."""
    from rnnexp.results.result import FAILED_STATUSES

    return JOB_FAILED if any(s in FAILED_STATUSES for s in statuses) else OK


@dataclass
class Exit:
    """The status the process exits with once Hydra returns (set by the job or the sweep's
    end), and whether a result of it went to a fallback folder (which the exit says)."""

    pending: int = OK
    unwritten: bool = False


# The process's one exit status, owned here.
PROCESS = Exit()


def note_unwritten() -> None:
    """A result of this process went to a fallback folder: the exit says so."""
    PROCESS.unwritten = True


def set_pending(code: int) -> None:
    PROCESS.pending = code


def pending() -> int:
    return OUTPUT_FAILED if PROCESS.unwritten else PROCESS.pending
