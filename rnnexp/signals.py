"""SIGTERM (what `kill` and schedulers send) and SIGINT (Ctrl-C) end a run cleanly: the first
one raises `Interrupted` where the program is, so the current job is recorded KILLED (and a
sweep's parent run too) before the process exits with 128 + the signal number. While that is
written, a second signal ends the process at once."""

from __future__ import annotations

import os
import signal

from rnnexp.errors import Interrupted

HANDLED = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


def _handler(signum: int, frame) -> None:
    if _received:  # a second signal while the first is being handled: stop now
        os._exit(128 + signum)
    _received.append(signum)
    raise Interrupted(signum)


def install() -> None:
    for signum in HANDLED:
        signal.signal(signum, _handler)


def exit_code(err: BaseException) -> int:
    """128 + the signal's number, for an Interrupted or a KeyboardInterrupt."""
    return 128 + (err.signum if isinstance(err, Interrupted) else signal.SIGINT)
