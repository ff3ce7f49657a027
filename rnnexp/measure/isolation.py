"""Fresh worker processes for measuring, without a fresh `import torch` each.

Two reasons to measure in a fresh process: TorchScript's executor and fuser settings are
process-global and do not reliably switch back (a `legacy` job after a `profiling` one in the
same process still runs profiling-executor graphs), and a configuration measured in several
processes shows the spread between runs (rnnexp.run.schedule). The basic launcher runs a whole
sweep in one process and joblib/loky reuses workers, so neither holds without this.

Workers are forked from multiprocessing's fork server, which imports torch and the project
once (per launching process, i.e. once per sweep) before it forks anything: each worker is a
new process with fresh TorchScript state, started in tens of milliseconds instead of seconds.
The fork server itself never runs a tensor operation, so no thread pool or device context is
forked. A worker receives the pickled plan (checked already, nothing re-decided), answers
the scheduler's requests (rnnexp.measure.measurer) over a pipe, and errors come back as one line.
A worker leaves signals to the job's process (which ends it at once on Ctrl-C or SIGTERM: the
scheduler closes every share on the way out) and dies with the fork server if that is killed
outright, which itself exits with the job's process.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from typing import Any, Optional

from rnnexp import errors
from rnnexp.machine import memory
from rnnexp.machine import platform as platform_mod
from rnnexp.measure import forkserver_tie, job, timing
from rnnexp.measure.measurer import Finished, Measurer, Ready, Round

# Imported by the fork server before it forks a worker: torch, the measuring code and the
# common models and backends (a worker imports anything else a plan names on unpickling).
PRELOAD = ["rnnexp.measure.forkserver_tie",  # first: tied to this process (it says why)
           "rnnexp.measure.measurer", "rnnexp.backends.vendor", "rnnexp.backends.torchscript",
           "rnnexp.models.native", "rnnexp.models.loops", "rnnexp.models.eltwise",
           # Imported by autograd on the first backward (with sympy: ~0.45 s a worker).
           "torch.fx.experimental.symbolic_shapes"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _context():
    ctx = mp.get_context("forkserver")
    forkserver_tie.mark_launcher()
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def prestart() -> None:
    """Start the fork server now: it imports torch and the measuring code while this process
    goes on (config checks, the store, Hydra), on another core, instead of when the first
    worker is asked for."""
    from multiprocessing import forkserver

    _context()  # its preload list
    forkserver.ensure_running()


def _start(proc) -> None:
    """Start a worker from any process. The child is told the parent's global start method;
    inside a joblib/loky worker that is "loky", which a fresh process cannot resolve, so the
    child would die before running anything: the fork server's method is announced instead."""
    previous = mp.get_start_method(allow_none=True)
    foreign = previous not in (None, *mp.get_all_start_methods())
    if foreign:
        mp.set_start_method("forkserver", force=True)
    try:
        proc.start()
    finally:
        if foreign:
            mp.set_start_method(previous, force=True)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphan if the parent is
    killed with SIGKILL and cannot clean up)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


class _Foreign:
    """A worker under another interpreter (bench.python), with the calls of a
    multiprocessing Process that Worker uses."""

    def __init__(self, python: str, child: Connection):
        fd = child.fileno()
        # Its own rnnexp and torch: nothing of this process's paths (PYTHONPATH, the current
        # folder, which `python -m` puts first) may shadow them.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self._popen = subprocess.Popen([python, "-m", "rnnexp.measure.isolation", str(fd)],
                                       pass_fds=[fd], cwd=tempfile.gettempdir(), env=env)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> Optional[int]:
        return self._popen.poll()

    def join(self, timeout: Optional[float] = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()


def _foreign_main(fd: int) -> None:
    """A worker under another interpreter: the plan comes over the inherited socket, and the
    platform it reports is this interpreter's."""
    conn = Connection(fd)
    planned, verify_model = conn.recv()
    planned.plat = platform_mod.current()
    _serve(conn, planned, verify_model, foreign_platform=True)


def _serve(conn, planned: job.Plan, verify_model: bool, foreign_platform: bool = False
           ) -> None:
    """The worker's main: set up, then answer requests until told to finish."""
    # Ctrl-C reaches the whole process group; the job's process decides and ends this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # What the fork server imported lives as long as this process: frozen, no collection
    # scans it (a full one otherwise costs ~0.1 s with torch loaded, before every warm-up).
    timing.freeze_once()
    measurer = Measurer(planned, verify_model=verify_model)
    try:
        ready = measurer.setup()
        if foreign_platform:
            ready.platform = planned.plat
        conn.send(("ok", ready))
        while True:
            request = conn.recv()
            if request[0] == "round":
                conn.send(("ok", measurer.round(request[1], request[2])))
            else:
                conn.send(("ok", measurer.finish()))
                return
    except errors.RnnexpError as err:
        conn.send(("error", type(err).__name__, str(err)))
    except Exception as err:  # the parent records a crash with this line
        if errors.full_error():  # as for the job's own process
            traceback.print_exc()
        conn.send(("crash", memory.crash_line(planned.cfg.shape, err)))
    finally:
        measurer.close()
        conn.close()


class Worker:
    """A measurer in a fresh worker process; the same calls as `measurer.Measurer`."""

    def __init__(self, planned: job.Plan, *, verify_model: bool):
        ctx = _context()
        self._finished = False
        self._conn, child = ctx.Pipe()
        python = planned.cfg.bench.python
        if job.foreign(python):
            self._proc: Any = _Foreign(str(python), child)
            child.close()
            self._conn.send((planned, verify_model))
            return
        self._proc = ctx.Process(target=_serve, args=(child, planned, verify_model),
                                 daemon=True)
        _start(self._proc)
        child.close()

    def _answer(self) -> Any:
        while not self._conn.poll(1.0):
            if not self._proc.is_alive():
                raise errors.JobCrashed(f"the worker process exited with code "
                                        f"{self._proc.exitcode} before reporting a result")
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):  # closed or reset: the worker is gone
            raise errors.JobCrashed("the worker process exited before reporting a result"
                                    ) from None
        if msg[0] == "ok":
            return msg[1]
        if msg[0] == "crash":
            raise errors.JobCrashed(msg[1])
        # Re-raised as one line (ConfigError's own signature is not needed here).
        unsupported = msg[1] == "UnsupportedError"
        raise (errors.UnsupportedError if unsupported else errors.RnnexpError)(msg[2])

    def setup(self) -> Ready:
        return self._answer()

    def _ask(self, request: tuple) -> None:
        try:
            self._conn.send(request)
        except OSError:  # the pipe broke: the worker is gone
            self._proc.join(timeout=1)
            raise errors.JobCrashed(f"the worker process exited with code "
                                    f"{self._proc.exitcode} before reporting a result"
                                    ) from None

    def round(self, n: int, block: int) -> Round:
        self._ask(("round", n, block))
        return self._answer()

    def finish(self) -> Finished:
        self._ask(("finish",))
        finished = self._answer()
        self._finished = True  # it exits by itself; multiprocessing reaps it later
        return finished

    def close(self) -> None:
        """Stop the worker (it may be blocked waiting for a request). The scheduler closes
        every worker on its way out, an interrupt or a signal included."""
        if not self._finished:
            terminate(self._proc)
        self._conn.close()


def terminate(proc) -> None:
    """End a worker process that has not exited: terminate, then kill."""
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)



if __name__ == "__main__":  # a worker under another interpreter (bench.python)
    _foreign_main(int(sys.argv[1]))
