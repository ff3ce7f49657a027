"""The signals that end rnnexp's work, and how each ends it cleanly.

- SIGTERM (what `kill` and schedulers send) and SIGINT (Ctrl-C) end the run: the first one
  raises `Interrupted` where the program is, so the current job is recorded KILLED (and a
  sweep's parent run too) before the process exits with 128 + the signal number. While that
  is written, a second signal ends the process at once.
- SIGUSR1/SIGUSR2 from a scheduler end the job only. SLURM warns a job before its time limit
  or before preempting it with a user signal (submitit asks for SIGUSR2 by default,
  `SUBMITIT_PREEMPT_SIGNAL` may choose SIGUSR1; its local executor sends the same at the
  time limit). Their default action ends the process without a word, and submitit's own
  handler would requeue the whole job or fail it as a crash. Here, while a job measures,
  the signal raises `Killed` inside it: the job is recorded `interrupted` with the reason
  (MLflow run KILLED) and returns, so the other jobs of the sweep keep their results and
  `resume=true` runs this one again.
- In a cluster scheduler's batch task (rnnexp's SLURM launcher: `sigterm_from_scheduler`),
  SIGTERM is the scheduler's too — scancel, requeue, preemption, a node set down — and ends
  the task's jobs as SIGUSR1/2 do, not the sweep: the sweep's parent run belongs to the
  launching process, which sees the task end.
- While a finished result is recorded (`deferred`), SIGINT/SIGTERM wait until it is written:
  a signal never turns a measured result into an interrupted one.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

from rnnexp.errors import Interrupted
from rnnexp.results import exit_codes


def _scheduler_signals() -> dict[int, str]:
    """The scheduler's warning signals, and what they mean when they reach a job."""
    return {signal.SIGUSR1: "SIGUSR1 from the scheduler (time limit or preemption)",
            signal.SIGUSR2: "SIGUSR2 from the scheduler (time limit or preemption)"}


@dataclass
class Disposition:
    """How this process takes signals, and what came: which end the run (`handled`), which
    are the scheduler's (`scheduler`: signal → what it means), the SIGINT/SIGTERM received,
    how many `deferred` blocks are open and the signal that came meanwhile (raised as they
    close), and the scheduler's signals received (`scheduler_signalled`)."""

    handled: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
    scheduler: dict[int, str] = field(default_factory=_scheduler_signals)
    received: list[int] = field(default_factory=list)
    deferring: int = 0
    deferred: list[int] = field(default_factory=list)
    from_scheduler: list[int] = field(default_factory=list)


# Signal handlers belong to the process, not to a run: its one disposition, owned here.
PROCESS = Disposition()


def _handler(signum: int, frame) -> None:
    if PROCESS.received:  # a second signal while the first is being handled: stop now
        os._exit(exit_codes.for_signal(signum))
    PROCESS.received.append(signum)
    if PROCESS.deferring:
        PROCESS.deferred.append(signum)
        return
    raise Interrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT/SIGTERM wait for the block to finish, then raise `Interrupted` (a second signal
    still ends the process at once)."""
    PROCESS.deferring += 1
    try:
        yield
    finally:
        PROCESS.deferring -= 1
    if not PROCESS.deferring and PROCESS.deferred:
        raise Interrupted(PROCESS.deferred.pop())


def install() -> None:
    """From now on SIGINT and SIGTERM raise `Interrupted` (in the main thread, the only one
    that may set handlers: a job in a thread is stopped by its launching process)."""
    if threading.current_thread() is threading.main_thread():
        for signum in PROCESS.handled:
            signal.signal(signum, _handler)


def signum_of(err: BaseException) -> int:
    """The signal that ended the run: an Interrupted's, or SIGINT for a KeyboardInterrupt."""
    return err.signum if isinstance(err, Interrupted) else signal.SIGINT


class Killed(KeyboardInterrupt):
    """Raised in the job when the scheduler signals it. A KeyboardInterrupt, so no
    `except Exception` on the way (a backend's compile fallback, say) can swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(
            f"killed: {PROCESS.scheduler.get(signum, signal.Signals(signum).name)}")


def _raise_killed(signum: int, frame) -> None:
    settle()  # once is enough: recording the result must not be cut by a second signal
    PROCESS.from_scheduler.append(signum)
    raise Killed(signum)


def sigterm_from_scheduler() -> None:
    """From now on SIGTERM is the scheduler's (this process is a batch task): it stops the
    jobs measuring like SIGUSR1/2, and `install` leaves it to them."""
    PROCESS.handled = tuple(s for s in PROCESS.handled if s != signal.SIGTERM)
    PROCESS.scheduler[signal.SIGTERM] = ("SIGTERM from the scheduler (cancel, requeue, "
                                         "preemption or time limit)")


def scheduler_signalled() -> Optional[int]:
    """The last scheduler signal this process received while it measured or recorded (None:
    none came): a batch task starts no more work after one."""
    return PROCESS.from_scheduler[-1] if PROCESS.from_scheduler else None


def _set_scheduler(handler) -> None:
    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        for signum in PROCESS.scheduler:
            signal.signal(signum, handler)


def stop_job_on_scheduler() -> None:
    """From now on the scheduler's signals stop the job with `Killed`."""
    _set_scheduler(_raise_killed)


def _note(signum: int, frame) -> None:
    PROCESS.from_scheduler.append(signum)


def settle() -> None:
    """The measurement is over: a late scheduler signal no longer cuts the recording of its
    result, only noted (`scheduler_signalled`); the scheduler's hard kill still ends the
    process when it comes."""
    _set_scheduler(_note)
