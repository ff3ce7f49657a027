"""A job stopped by its scheduler ends KILLED with the reason, and the sweep goes on.

SLURM warns a job before its time limit or before preempting it with a user signal (submitit
asks for SIGUSR2 by default, `SUBMITIT_PREEMPT_SIGNAL` may choose SIGUSR1; its local executor
sends the same at the time limit). Their default action ends the process without a word, and
submitit's own handler would requeue the whole job or fail it as a crash. Here the signal
raises `Killed` inside the job: the runner records an `interrupted` result with the reason
(MLflow run KILLED) and the job returns, so the other jobs of the sweep keep their results and
`resume=true` runs this one again.
"""

from __future__ import annotations

import signal
import threading

# The scheduler's warning signals, and what they mean when they reach a job.
SIGNALS = {
    signal.SIGUSR1: "SIGUSR1 from the scheduler (time limit or preemption)",
    signal.SIGUSR2: "SIGUSR2 from the scheduler (time limit or preemption)",
}


class Killed(KeyboardInterrupt):
    """Raised in the job when the scheduler signals it. A KeyboardInterrupt, so no
    `except Exception` on the way (a backend's compile fallback, say) can swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"killed: {SIGNALS.get(signum, signal.Signals(signum).name)}")


def _raise(signum: int, frame) -> None:
    settle()  # once is enough: recording the result must not be cut by a second signal
    raise Killed(signum)


def _set(handler) -> None:
    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        for signum in SIGNALS:
            signal.signal(signum, handler)


def install() -> None:
    """From now on the scheduler's signals stop the job with `Killed`."""
    _set(_raise)


def settle() -> None:
    """The measurement is over: a late signal no longer cuts the recording of its result
    (the scheduler's hard kill still ends the process when it comes)."""
    _set(signal.SIG_IGN)
