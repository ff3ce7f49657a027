"""Run a planned job in a fresh `spawn` process when its backend sets process-global state
that does not reliably switch back (TorchScript executors and fusers).

The basic launcher runs every job of a sweep in one process and joblib/loky reuses worker
processes, so without this a `jit` job could run under the previous job's executor. The
child receives the pickled plan (checked already, nothing re-decided), streams progress
events back and returns the Result; errors come back as one line.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod

from rnnexp import errors, job
from rnnexp.results import Result
from rnnexp.timing import Progress


class _QueueProgress:
    """timing.Progress in the child: forwards events to the parent's progress bar."""

    def __init__(self, q):
        self._q = q

    def phase(self, name: str, total: int) -> None:
        self._q.put(("phase", name, total))

    def advance(self) -> None:
        self._q.put(("advance",))


def _child(planned: job.Plan, q) -> None:
    try:
        q.put(("result", job.execute(planned, progress=_QueueProgress(q))))
    except errors.RnnexpError as err:
        q.put(("error", type(err).__name__, str(err)))


def _start_spawned(proc) -> None:
    """Start a spawn-context process from any process. The child is told the parent's global
    start method; inside a joblib/loky worker that is "loky", which a fresh interpreter cannot
    resolve, so the child would die before running anything. Spawn is announced instead."""
    previous = mp.get_start_method(allow_none=True)
    foreign = previous not in (None, *mp.get_all_start_methods())
    if foreign:
        mp.set_start_method("spawn", force=True)
    try:
        proc.start()
    finally:
        if foreign:
            mp.set_start_method(previous, force=True)


def execute(planned: job.Plan, progress: Progress | None = None) -> Result:
    """job.execute, in a fresh process if the backend asks for isolation."""
    if not planned.backend.isolate:
        return job.execute(planned, progress=progress)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(planned, q), daemon=True)
    _start_spawned(proc)
    try:
        while True:
            try:
                msg = q.get(timeout=1.0)
            except queue_mod.Empty:
                if not proc.is_alive():
                    raise errors.JobCrashed(f"the isolated job process exited with code "
                                             f"{proc.exitcode} before reporting a result"
                                             ) from None
                continue
            if msg[0] == "phase" and progress:
                progress.phase(msg[1], msg[2])
            elif msg[0] == "advance" and progress:
                progress.advance()
            elif msg[0] == "result":
                return msg[1]
            elif msg[0] == "error":
                # Re-raised as one line (ConfigError's own signature is not needed here).
                unsupported = msg[1] == "UnsupportedError"
                raise (errors.UnsupportedError if unsupported else errors.RnnexpError)(msg[2])
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
