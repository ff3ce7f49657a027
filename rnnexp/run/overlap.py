"""Work of a sweep's own process that runs while its first window's workers set up, and never
while a sample is timed.

Starting a sweep's record in the sinks — MLflow's parent run: importing MLflow and opening
its store cost seconds — needs nothing the workers make, and the workers' build, verify and
warm-up need nothing of it; meanwhile the sweep's process only waits for the workers'
answers. So that work runs in a thread (`start`), and is finished (`finish`) before the first
timed sample (rnnexp.run.interleave's envelope) and before anything reads what it made (a
job's record, the sweep's end or abort). A failure in it is raised where it is finished, as
if the work had run there.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

_pending: list[tuple[threading.Thread, list[BaseException]]] = []


def start(work: Callable[[], None], name: str = "rnnexp-overlap") -> None:
    """Run `work` in a thread of this process from now until `finish`."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as err:  # raised again by `finish`, in the caller's thread
            failed.append(err)

    thread = threading.Thread(target=run, name=name)
    _pending.append((thread, failed))
    thread.start()


def pending() -> bool:
    """Work started and not finished yet."""
    return bool(_pending)


def finish(raise_errors: bool = True) -> None:
    """Wait for all work started; the first error one raised is raised here (unless
    `raise_errors` is false: a sweep already ending for another reason)."""
    first: Optional[BaseException] = None
    while _pending:
        thread, failed = _pending.pop(0)
        thread.join()
        if failed and first is None:
            first = failed[0]
    if first is not None and raise_errors:
        raise first
