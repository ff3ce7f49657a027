"""Run a planned job in a fresh `spawn` process when its backend sets process-global state
that does not reliably switch back (TorchScript executors and fusers).

The basic launcher runs every job of a sweep in one process and joblib/loky reuses worker
processes, so without this a `jit` job could run under the previous job's executor. The
child receives the pickled plan (checked already, nothing re-decided), streams progress
events back and returns the Result; a refusal or a crash comes back as one line with the
real exception. The child leaves signals to its parent (which kills it at once on Ctrl-C or
SIGTERM) and dies with it if the parent is killed outright.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import queue as queue_mod
import signal
import sys

from rnnexp import errors, job, memory
from rnnexp.results import Result
from rnnexp.timing import Progress

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _QueueProgress:
    """timing.Progress in the child: forwards events to the parent's progress bar."""

    def __init__(self, q):
        self._q = q

    def phase(self, name: str, total: int) -> None:
        self._q.put(("phase", name, total))

    def advance(self) -> None:
        self._q.put(("advance",))


def run(planned: job.Plan, progress: Progress | None = None) -> Result:
    """job.execute with every exception but a refusal turned into a one-line JobCrashed (an
    out-of-memory names the shape, and the memory is given back)."""
    try:
        return job.execute(planned, progress=progress)
    except errors.RnnexpError:
        raise
    except Exception as err:
        if memory.is_out_of_memory(err):
            memory.release()
            raise errors.JobCrashed(f"out of memory at {memory.shape_text(planned.cfg.shape)}: "
                                    f"{errors.crash_line(err)}") from err
        raise errors.JobCrashed(errors.crash_line(err)) from err


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphan if the parent is
    killed with SIGKILL and cannot clean up)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def _child(planned: job.Plan, q) -> None:
    # Ctrl-C reaches the whole process group; the parent decides and kills this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    try:
        q.put(("result", run(planned, progress=_QueueProgress(q))))
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


_ERRORS = {"UnsupportedError": errors.UnsupportedError, "JobCrashed": errors.JobCrashed}


def execute(planned: job.Plan, progress: Progress | None = None) -> Result:
    """job.execute (through `run`), in a fresh process if the backend asks for isolation."""
    if not planned.backend.isolate:
        return run(planned, progress=progress)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(planned, q), daemon=True)
    _start_spawned(proc)
    finished = False
    try:
        while True:
            try:
                msg = q.get(timeout=0.5)
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
                finished = True
                return msg[1]
            elif msg[0] == "error":
                finished = True
                # Re-raised as one line (ConfigError's own signature is not needed here).
                raise _ERRORS.get(msg[1], errors.RnnexpError)(msg[2])
    finally:
        # After a result the child exits by itself; otherwise (a signal, a crash) it is
        # killed now rather than left running.
        proc.join(timeout=30 if finished else 0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
