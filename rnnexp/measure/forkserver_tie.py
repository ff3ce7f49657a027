"""Multiprocessing's fork server, and every worker it forks, end with the process that
started it (the job's process: rnnexp.measure.isolation).

Nothing else ties them to it. The fork server exits once no process holds its "alive" pipe —
but multiprocessing hands that pipe to every worker it forks, and a worker ends with the
fork server (PR_SET_PDEATHSIG) or at its next message to the job's process. So when the job's
process is killed outright (SIGKILL: the OOM killer, a scheduler) while a worker is busy
building, verifying or timing, each keeps the other alive until the worker's phase ends —
minutes at a large shape.

The fork server imports this module first (its preload list, which multiprocessing imports
before the fork server forks anything). Imported there — and only there — the fork server
  - asks Linux to SIGKILL it when the process that started it dies — the one named in
    LAUNCHER_ENV, which `mark_launcher` sets just before the fork server starts — and exits
    if that process is gone already (it died before this line);
  - asks the same of every process it forks, towards itself, before any of that child's own
    code runs (`os.register_at_fork`): a worker never outlives the fork server either.
PR_SET_PDEATHSIG fires when the *thread* that started the process ends: a fork server
started from another thread than the main one (which would be killed when that thread
finishes) watches its parent by polling instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

# "<pid>" (started from that process's main thread) or "<pid>:poll" (from another thread).
LAUNCHER_ENV = "RNNEXP_FORKSERVER_LAUNCHER"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 0.5


def mark_launcher() -> None:
    """Called by the process about to start the fork server: it is the one to die with."""
    main = threading.current_thread() is threading.main_thread()
    os.environ[LAUNCHER_ENV] = f"{os.getpid()}" + ("" if main else ":poll")


def die_with_parent() -> bool:
    """SIGKILL to this process when its parent (thread) dies; False where Linux cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(1)


def tie(launcher: int, poll: bool) -> None:
    """This process (the fork server) ends with `launcher`, and its children with it."""
    if poll:
        threading.Thread(target=_watch, args=(launcher,), name="rnnexp-tie", daemon=True).start()
    else:
        die_with_parent()
    if os.getppid() != launcher:  # it died before the line above took effect
        os._exit(1)
    server = os.getpid()

    def child() -> None:
        die_with_parent()
        if os.getppid() != server:
            os._exit(1)

    os.register_at_fork(after_in_child=child)


def in_fork_server() -> bool:
    """This module is being imported by multiprocessing's fork server, as its preload."""
    from multiprocessing import forkserver

    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def _from_environment() -> None:
    pid, _, mode = os.environ.get(LAUNCHER_ENV, "").partition(":")
    if pid.isdigit() and in_fork_server():
        tie(int(pid), poll=mode == "poll")


_from_environment()
