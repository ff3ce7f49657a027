"""Ending a sweep's jobs with the sweep. Launchers that run jobs in processes of their own —
submitit's (`rnnexp_local`: a process per job), joblib's loky workers — leave them running
when the launching process is interrupted, and they would record "ok" runs under a parent
that was ended KILLED. Here they get SIGINT — the job records itself `interrupted` — and, if
one has not ended after a grace period, everything the sweep started is killed; the jobs that
left no result are then recorded `interrupted` from the launching process.

A launching process killed outright (SIGKILL: the OOM killer, a scheduler) cannot do that, and
such job processes would go on measuring for nobody: under a launcher whose jobs run on this
machine (`local_launcher`), each job process ends as soon as the launching process is gone
(`end_with_launcher`), and its workers with it (rnnexp.measure.forkserver_tie). Jobs a cluster
runs (rnnexp_slurm) belong to the cluster, and are left to it (scancel).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Mapping

import psutil

# How a job process of a launcher shows in its command line (submitit runs each job with
# `python -u -m submitit.core._submit`, loky starts workers from its own package). The
# helpers of multiprocessing and loky that only track resources are no jobs.
JOB_MARKERS = ("submitit.core._submit", "joblib.externals.loky")
HELPER_MARKERS = ("resource_tracker", "semaphore_tracker")
# Long enough for every job to record its result: each job process imports MLflow and
# opens the store then, one after the other on a fresh SQLite file (~10-20 s each on 2 busy
# cores).
GRACE_S = 120.0


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def job_processes() -> list[psutil.Process]:
    """The processes below this one that run a sweep's jobs."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        line = _cmdline(proc)
        if any(m in line for m in JOB_MARKERS) and not any(m in line for m in HELPER_MARKERS):
            out.append(proc)
    return out


def end_jobs(grace_s: float = GRACE_S) -> int:
    """SIGINT to every job process, then — after `grace_s` at most — SIGKILL to whatever this
    process started that still runs. Returns how many job processes there were."""
    jobs = job_processes()
    if jobs:
        from rnnexp.results.report import err_console

        err_console.print(f"stopping {len(jobs)} job process(es): each records its job as "
                          f"interrupted (up to {grace_s:.0f} s)",
                          highlight=False, markup=False, soft_wrap=True)
    for proc in jobs:
        try:
            proc.send_signal(signal.SIGINT)
        except psutil.NoSuchProcess:
            pass
    _, late = psutil.wait_procs(jobs, timeout=grace_s)
    if late:
        from rnnexp.results.report import print_warning

        print_warning(f"{len(late)} job process(es) still running {grace_s:.0f} s after "
                      "SIGINT: killed")
    rest = psutil.Process().children(recursive=True)
    for proc in rest:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(rest, timeout=5)
    return len(jobs)


# "<pid> <start time>" of the launching process, for the job processes it starts here.
LAUNCHER_ENV = "RNNEXP_SWEEP_LAUNCHER"
# Launchers whose job processes run on this machine: joblib's, submitit's local executor.
LOCAL_LAUNCHERS = ("JoblibLauncher", "LocalLauncher")
WATCH_S = 0.5


def local_launcher(launcher: Mapping[str, Any]) -> bool:
    return str(launcher.get("_target_", "")).rsplit(".", 1)[-1] in LOCAL_LAUNCHERS


def jobs_end_with_this_process(launcher: Mapping[str, Any]) -> None:
    """Before a launch (the sweeper): the job processes a local launcher starts learn which
    process launched them, through their environment."""
    if local_launcher(launcher):
        me = psutil.Process()
        os.environ[LAUNCHER_ENV] = f"{me.pid} {me.create_time()}"
    else:
        os.environ.pop(LAUNCHER_ENV, None)


def _gone(pid: int, started: float) -> bool:
    try:
        proc = psutil.Process(pid)
        # Killed and not yet reaped by its parent, or its number taken by another process.
        return proc.status() == psutil.STATUS_ZOMBIE or proc.create_time() != started
    except psutil.NoSuchProcess:
        return True


def _watch(pid: int, started: float) -> None:
    while not _gone(pid, started):
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)  # nothing to record for: the sweep is gone


_watching: list[threading.Thread] = []


def end_with_launcher() -> None:
    """In a job process of a local launcher: end (SIGKILL) as soon as the process that
    launched the sweep is gone — its parent (a loky worker) or not (submitit's)."""
    pid, _, started = os.environ.get(LAUNCHER_ENV, "").partition(" ")
    if _watching or not pid.isdigit() or int(pid) == os.getpid():
        return
    watch = threading.Thread(target=_watch, args=(int(pid), float(started)), daemon=True,
                             name="rnnexp-launcher-watch")
    watch.start()
    _watching.append(watch)
