"""Worker processes for measuring, without a fresh `import torch` each.

Two reasons to measure in fresh processes: TorchScript's executor and fuser settings are
process-global and do not reliably switch back (a `legacy` job after a `profiling` one in the
same process still runs profiling-executor graphs), and the process is the replicate: a
configuration measured in several processes shows the spread between them, which no number
of samples in one process can (rnnexp.run.schedule). The basic launcher runs a whole sweep in
one process and joblib/loky reuses workers, so neither holds without this.

A worker hosts one or more configurations (`slot`s), each a measurer built once: those of a
window whose process-global state is the same (rnnexp.run.blocks) take turns in it.

Workers are forked from multiprocessing's fork server, which imports torch and the project
once (per launching process, i.e. once per sweep) before it forks anything: each worker is a
new process with fresh TorchScript state, started in tens of milliseconds instead of seconds.
The fork server itself never runs a tensor operation, so no thread pool or device context is
forked. A worker receives the pickled plan (checked already, nothing re-decided), answers
the scheduler's requests (rnnexp.measure.measurer) over a pipe, and errors come back as one line,
for the configuration they concern. A worker leaves signals to the job's process (which ends it
at once on Ctrl-C or SIGTERM: the scheduler closes every worker on the way out) and dies with
the fork server if that is killed outright, which itself exits with the job's process.

While another worker is timed, an idle one is stopped (SIGSTOP, `park`) rather than left
waiting: its OpenMP threads spin for a while after each parallel region (libgomp's
GOMP_SPINCOUNT), and a stopped process takes no CPU whatever its threads were doing. It is
continued (SIGCONT) right before its next request.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

from rnnexp import errors
from rnnexp.machine import memory
from rnnexp.machine import platform as platform_mod
from rnnexp.measure import callgrind, forkserver_tie, job, timing
from rnnexp.measure.measurer import Measurer, Ready

# Imported by the fork server before it forks a worker: torch, the measuring code and the
# common models and backends (a worker imports anything else a plan names on unpickling).
PRELOAD = ["rnnexp.measure.forkserver_tie",  # first: tied to this process (it says why)
           "rnnexp.measure.measurer", "rnnexp.backends.vendor", "rnnexp.backends.torchscript",
           "rnnexp.models.native", "rnnexp.models.loops", "rnnexp.models.eltwise",
           # Imported by autograd on the first backward (with sympy: ~0.45 s a worker).
           "torch.fx.experimental.symbolic_shapes"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


# A Unix socket's path holds at most 107 bytes, and the fork server's socket lives in
# multiprocessing's temporary folder (TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX): under a long
# TMPDIR (a cluster job's, a test's) no worker could start. That folder then goes under a
# short writable one; everything else keeps TMPDIR.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-xxxxxxxx/listener-xxxxxxxx")
SHORT_TEMP = ("/tmp", "/var/tmp", "/dev/shm")


def _short_socket_folder() -> None:
    from multiprocessing import util

    if len(tempfile.gettempdir()) + SOCKET_SUFFIX <= SOCKET_PATH_MAX:
        return
    short = next((d for d in SHORT_TEMP if os.access(d, os.W_OK)), None)
    if short is None:
        return  # multiprocessing's own error then names the path
    previous, tempfile.tempdir = tempfile.tempdir, short
    try:
        util.get_temp_dir()  # made once a process, and kept
    finally:
        tempfile.tempdir = previous


def _context():
    ctx = mp.get_context("forkserver")
    _short_socket_folder()
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

    def __init__(self, python: str, child: Connection, launcher: Sequence[str] = (),
                 extra_env: Optional[dict[str, str]] = None):
        fd = child.fileno()
        # Its own rnnexp and torch: nothing of this process's paths (PYTHONPATH, the current
        # folder, which `python -m` puts first) may shadow them.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(extra_env or {})
        self._popen = subprocess.Popen([*launcher, python, "-m", "rnnexp.measure.isolation",
                                        str(fd)],
                                       pass_fds=[fd], cwd=tempfile.gettempdir(), env=env)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def pid(self) -> int:
        return self._popen.pid

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
    """A worker under another interpreter: the plans come over the inherited socket, and
    the platform it reports is this interpreter's."""
    _serve(Connection(fd), foreign_platform=True)


def _serve(conn, foreign_platform: bool = False) -> None:
    """The worker's main: answer requests until told to exit."""
    # Ctrl-C reaches the whole process group; the job's process decides and ends this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # What the fork server imported lives as long as this process: frozen, no collection
    # scans it (a full one otherwise costs ~0.1 s with torch loaded, before every warm-up).
    timing.freeze_once()
    slots: dict[int, Measurer] = {}
    try:
        while True:
            request = conn.recv()
            if request[0] == "exit":
                return
            conn.send(handle(slots, request, foreign_platform))
    except (EOFError, OSError):  # the job's process is gone
        return
    finally:
        for measurer in slots.values():
            measurer.close()
        conn.close()


def handle(slots: dict[int, Measurer], request: tuple, foreign_platform: bool = False
           ) -> tuple:
    """One request for one slot, answered ("ok", value) or as the error that ended that
    slot's configuration here: ("error", type name, line) or ("crash", line)."""
    try:
        return ("ok", serve(slots, request, foreign_platform))
    except errors.RnnexpError as err:
        _drop(slots, request[1])
        return ("error", type(err).__name__, str(err))
    except Exception as err:  # the parent records a crash of this configuration
        if errors.full_error():  # as for the job's own process
            traceback.print_exc()
        return ("crash", crash_line(_drop(slots, request[1]), request, err))


def serve(slots: dict[int, Measurer], request: tuple, foreign_platform: bool = False) -> Any:
    """One request of Host's for one slot, in this process: its answer, or the error that
    ended that slot's configuration (raised; the caller drops the slot). A worker answers
    through `handle`, the job's own process through Local."""
    kind, slot = request[0], request[1]
    if kind in ("add", "build"):
        planned, verify_model = request[2], request[3]
        if foreign_platform:
            planned.plat = platform_mod.current()
        measurer = slots[slot] = Measurer(planned, verify_model=verify_model)
        if kind == "build":
            measurer.build(one_thread=True)
            return None
        return _ready(measurer, measurer.setup(), foreign_platform)
    measurer = slots.get(slot)
    if measurer is None:
        raise errors.JobCrashed(f"slot {slot} of this process was never set up")
    if kind == "warm":
        return _ready(measurer, measurer.warm(), foreign_platform)
    if kind == "round":
        return measurer.round(request[2], request[3])
    if kind == "finish":
        finished = measurer.finish()  # a crash in it is still this slot's: named by its plan
        slots.pop(slot)
        return finished
    _drop(slots, slot)
    return None


def _ready(measurer: Measurer, ready: Ready, foreign_platform: bool) -> Ready:
    """A worker under another interpreter (bench.python) says whose platform and checkout
    it measured with."""
    if foreign_platform:
        ready.platform = measurer.p.plat
        ready.git_commit = platform_mod.git_commit()
    return ready


def crash_line(measurer: Optional[Measurer], request: tuple, err: BaseException) -> str:
    """One line for a crash of a slot's configuration; an out-of-memory names its shape."""
    planned = measurer.p if measurer else None
    if planned is None and request[0] in ("add", "build"):  # it failed being made
        planned = request[2]
    if planned is None:
        return errors.crash_line(err)
    return memory.crash_line(planned.cfg.shape, err)


def _drop(slots: dict[int, Measurer], slot: int) -> Optional[Measurer]:
    measurer = slots.pop(slot, None)
    if measurer is not None:
        measurer.close()
    return measurer


def decode(answer: tuple) -> Any:
    """A worker's answer, or its error raised as one line."""
    if answer[0] == "ok":
        return answer[1]
    if answer[0] == "crash":
        raise errors.JobCrashed(answer[1])
    # Re-raised as one line (ConfigError's own signature is not needed here).
    kinds = {"UnsupportedError": errors.UnsupportedError, "JobCrashed": errors.JobCrashed}
    raise kinds.get(answer[1], errors.RnnexpError)(answer[2])


class Host(Protocol):
    """A process that measures configurations in slots: a Worker, or Local (the job's own
    process). `request` starts a call ("add", slot, plan, verify_model): build, verify and
    warm up — or that in two calls, ("build", slot, plan, verify_model) on one intra-op
    thread and ("warm", slot) —, ("round", slot, n, block), ("finish", slot) or ("drop",
    slot); `answer` waits for it."""

    def request(self, *message: Any) -> None: ...

    def answer(self) -> Any: ...

    def alive(self) -> bool: ...

    def park(self) -> None: ...

    def unpark(self) -> None: ...

    def exit(self) -> None: ...

    def close(self) -> None: ...


class Local:
    """Slots measured in the job's own process (a lone configuration whose backend needs no
    process of its own): each request runs at once, its answer is kept for `answer`.
    Errors keep their type; a crash is one line with the exception as its cause."""

    def __init__(self) -> None:
        self._slots: dict[int, Measurer] = {}
        self._answer: Any = None
        self._error: Optional[BaseException] = None

    def request(self, *message: Any) -> None:
        self._answer, self._error = None, None
        try:
            self._answer = serve(self._slots, message)
        except errors.RnnexpError as err:
            _drop(self._slots, message[1])
            self._error = err
        except Exception as err:
            crash = errors.JobCrashed(crash_line(_drop(self._slots, message[1]), message, err))
            crash.__cause__ = err  # shown with HYDRA_FULL_ERROR=1, as any crash here
            self._error = crash

    def answer(self) -> Any:
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return self._answer

    def alive(self) -> bool:
        return True

    def park(self) -> None:
        pass  # this process is the one that asks

    def unpark(self) -> None:
        pass

    def exit(self) -> None:
        pass

    def close(self) -> None:
        for slot in list(self._slots):
            _drop(self._slots, slot)


class Worker:
    """A worker process hosting slots; the calls of Host. `python` (bench.python): another
    interpreter than this one's, or None. `pinned`: a fresh interpreter with the ISA and
    threads pinned (rnnexp.measure.callgrind.PINNED_ENV: bench.metric=instructions, whose
    time is the counts' calibration); `counting`: that, under Callgrind."""

    def __init__(self, python: Optional[str] = None, pinned: bool = False,
                 counting: bool = False):
        ctx = _context()
        self._parked = False
        self._waiting = False  # a request is out, its answer not read
        self._conn, child = ctx.Pipe()
        self.dumps: Optional[Path] = None  # a counting worker's dump folder
        if pinned or counting:
            env = dict(callgrind.COUNTING_ENV if counting else callgrind.PINNED_ENV)
            launcher: list[str] = []
            if counting:
                prefix = callgrind.out_prefix()
                self.dumps = prefix.parent
                env[callgrind.OUT_ENV] = str(prefix)
                launcher = callgrind.command(prefix)
            self._proc: Any = _Foreign(str(python) if job.foreign(python) else sys.executable,
                                       child, launcher, env)
        elif job.foreign(python):
            self._proc = _Foreign(str(python), child)
        else:
            self._proc = ctx.Process(target=_serve, args=(child,), daemon=True)
            _start(self._proc)
        child.close()

    @property
    def connection(self) -> Connection:
        """What `multiprocessing.connection.wait` waits on: an answer is ready."""
        return self._conn

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid

    def request(self, *message: Any) -> None:
        try:
            self._conn.send(message)
        except OSError:  # the pipe broke: the worker is gone
            self._proc.join(timeout=1)
            raise errors.JobCrashed(self._gone()) from None
        self._waiting = True

    def answer(self) -> Any:
        while not self._conn.poll(1.0):
            if not self._proc.is_alive():
                raise errors.JobCrashed(self._gone())
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):  # closed or reset: the worker is gone
            raise errors.JobCrashed("the worker process exited before reporting a result"
                                    ) from None
        self._waiting = False
        return decode(msg)

    def _gone(self) -> str:
        return (f"the worker process exited with code {self._proc.exitcode} before reporting "
                "a result")

    def _signal(self, signum: int) -> None:
        try:
            os.kill(self._proc.pid, signum)
        except (ProcessLookupError, TypeError):  # gone (or never started): nothing to do
            pass

    def alive(self) -> bool:
        return self._proc.is_alive()

    def park(self) -> None:
        """Stopped while others are timed: none of its threads can take a core."""
        if not self._parked:
            self._signal(signal.SIGSTOP)
            self._parked = True

    def unpark(self) -> None:
        if self._parked:
            self._signal(signal.SIGCONT)
            self._parked = False

    def exit(self) -> None:
        """Ask it to exit (after its last answer): `close` then waits less."""
        self.unpark()  # a stopped process acts on no signal but SIGKILL and SIGCONT
        if not self._waiting and not self._conn.closed:
            try:
                self._conn.send(("exit",))
            except OSError:
                pass

    def close(self) -> None:
        """End the worker: it exits when asked, else (busy with a request: an interrupt or a
        signal came) it is terminated. The scheduler closes every worker on its way out."""
        self.exit()
        if not self._waiting:
            self._proc.join(timeout=1)
        terminate(self._proc)
        if not self._conn.closed:
            self._conn.close()
        if self.dumps is not None:
            shutil.rmtree(self.dumps, ignore_errors=True)


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
