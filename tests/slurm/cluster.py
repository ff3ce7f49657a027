"""A real SLURM cluster on this machine: munge, slurmctld and two slurmd nodes on 127.0.0.1.

Used by the SLURM tests (tests/slurm/conftest.py) and by people (`make slurm-up`,
`make slurm-down`). Everything the cluster keeps — its slurm.conf, munge key and socket,
state, spool, logs and pid files — lives in one folder of its own, and its daemons listen on
ports chosen free when it starts, so it never touches a system SLURM or another such cluster
on the same machine. Commands reach it with `SLURM_CONF=<folder>/slurm.conf`.

Debian's packages (munge, slurmctld, slurmd, slurm-client) are installed with apt-get when
missing, which needs root. The machine is one host but two SLURM nodes (`node1`, `node2`:
one slurmd each, `slurmd -N`), each declared with its half of the machine's real CPUs and
memory — so a sweep's tasks really land on different nodes, and a node can be drained while
the other works — and with a GPU that is not there: SLURM's generic resources take fake
devices (gres `gpu:fake`, whose device files are twins of /dev/null), so `--gpus-per-task`
is scheduled as on a GPU cluster while every job runs on the CPU. Job states come from the
controller itself (`scontrol show job`, kept for MIN_JOB_AGE_S after a job ends): no
accounting database.

    python -m tests.slurm.cluster up [FOLDER]     # install if needed, start, wait until idle
    python -m tests.slurm.cluster down [FOLDER]   # stop what `up` started
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import psutil

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
# The programs the cluster needs, and the package that brings each.
PROGRAMS = {"munged": "munge", "mungekey": "munge", "slurmctld": "slurmctld",
            "slurmd": "slurmd", "sbatch": "slurm-client", "scontrol": "slurm-client",
            "sinfo": "slurm-client", "squeue": "slurm-client", "scancel": "slurm-client"}
DEFAULT_HOME = Path("/tmp/rnnexp-slurm")
PARTITION = "debug"
# Nodes of the cluster, each a slurmd of its own on this machine, with this many fake GPUs.
NODES = 2
FAKE_GPUS = 1
# A finished job stays in the controller's memory (scontrol show job) this long: what the
# launcher reads a job's end from, without an accounting database.
MIN_JOB_AGE_S = 3600
START_TIMEOUT_S = 90.0


class Unavailable(RuntimeError):
    """This machine cannot install or start the cluster; the message says why, in one line."""


def _sbin(name: str) -> Optional[str]:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")


def missing_packages() -> list[str]:
    return sorted({pkg for prog, pkg in PROGRAMS.items() if _sbin(prog) is None})


def install() -> None:
    """Debian's SLURM and munge, with apt-get, where any of their programs is missing."""
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0:
        raise Unavailable(f"SLURM is not installed ({', '.join(missing)} missing) and "
                          "installing it needs root: run `make slurm-up` as root")
    if shutil.which("apt-get") is None:
        raise Unavailable(f"SLURM is not installed ({', '.join(missing)} missing) and this "
                          "machine has no apt-get to install it with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # stale package lists: update them once and try again
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0 or missing_packages():
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise Unavailable(f"apt-get could not install SLURM: {lines[-1]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb() -> int:
    """What the node offers jobs: this machine's memory less a margin for the system."""
    return max(512, int(psutil.virtual_memory().total / 2**20 * 0.9))


@dataclass
class Cluster:
    """A running cluster: its folder, and how to reach it."""

    home: Path

    @property
    def conf(self) -> Path:
        return self.home / "slurm.conf"

    @property
    def nodes(self) -> list[str]:
        return node_names()

    @property
    def has_gpus(self) -> bool:
        """Whether its nodes declare fake GPUs (not where device files cannot be made)."""
        gres = self.home / "gres.conf"
        return gres.exists() and bool(gres.read_text().strip())

    @property
    def env(self) -> dict[str, str]:
        """The environment of a command that talks to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *command: str, check: bool = True, timeout: float = 60
            ) -> subprocess.CompletedProcess:
        done = subprocess.run(list(command), env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {(done.stderr or done.stdout).strip()}")
        return done

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo shows it (idle, mix, alloc, drain, down*, ...)."""
        done = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        if done.returncode != 0:
            return {}
        return dict(line.split() for line in done.stdout.splitlines() if line.strip())

    def set_node(self, node: str, state: str, reason: str = "") -> None:
        """`scontrol update` of a node's state (drain, resume, down, ...)."""
        self.run("scontrol", "update", f"nodename={node}", f"state={state}",
                 *([f"reason={reason}"] if reason else []))

    def idle(self) -> bool:
        states = self.node_states()
        return bool(states) and all(states.get(n) == "idle" for n in self.nodes)

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return
            time.sleep(0.5)
        states = self.node_states()
        raise Unavailable(f"the SLURM nodes did not become idle in {timeout:.0f} s (sinfo: "
                          f"{states or 'no answer'}; logs in {self.home / 'log'})")

    def jobs(self) -> list[str]:
        """Ids of the jobs the controller has pending or running."""
        done = self.run("squeue", "-h", "-o", "%i", check=False)
        return done.stdout.split() if done.returncode == 0 else []

    def cancel_all(self) -> None:
        """Every job of this cluster cancelled, and gone from the queue (up to 60 s)."""
        if not self.jobs():
            return
        self.run("scancel", "--full", "--user", str(os.getuid()), check=False)
        deadline = time.monotonic() + 60
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)


def fake_gpus(folder: Path, count: int) -> list[Path]:
    """Device files for fake GPUs: character devices that are /dev/null's twins (SLURM wants
    a device it can stat; jobs get their indexes in CUDA_VISIBLE_DEVICES). None where this
    machine may not make device files."""
    made = []
    for i in range(count):
        path = folder / f"fakegpu{i}"
        if not path.exists():
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except OSError:
                return []
        made.append(path)
    return made


def node_names() -> list[str]:
    return [f"node{i + 1}" for i in range(NODES)]


def write_config(home: Path) -> None:
    """slurm.conf, gres.conf and the munge key for a cluster in `home`: NODES nodes, each a
    slurmd of its own on this machine with its share of the CPUs and memory."""
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log", "run", "munge", "dev"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(home / "munge", 0o700)
    names = node_names()
    gpus = fake_gpus(home / "dev", FAKE_GPUS * len(names))
    cpus = max(1, (os.cpu_count() or 1) // len(names))
    memory = max(256, memory_mb() // len(names))
    nodes = []
    gres = []
    for i, name in enumerate(names):
        mine = gpus[i * FAKE_GPUS:(i + 1) * FAKE_GPUS]
        nodes.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 "
                     f"Port={free_port()} CPUs={cpus} RealMemory={memory} "
                     + (f"Gres=gpu:fake:{len(mine)} " if mine else "") + "State=UNKNOWN")
        if mine:
            gres.append(f"NodeName={name} Name=gpu Type=fake "
                        f"File={','.join(str(g) for g in mine)}")
    conf = f"""\
# A cluster of {len(names)} nodes on this machine (tests/slurm/cluster.py); nothing outside
# {home}.
ClusterName=rnnexp
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={home / 'munge' / 'munge.socket'}
StateSaveLocation={home / 'state'}
SlurmdSpoolDir={home / 'spool'}/%n
SlurmctldPidFile={home / 'run' / 'slurmctld.pid'}
SlurmdPidFile={home / 'run'}/slurmd-%n.pid
SlurmctldLogFile={home / 'log' / 'slurmctld.log'}
SlurmdLogFile={home / 'log'}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Schedule at once: a test's sweep should not wait for the next scheduling pass.
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge={MIN_JOB_AGE_S}
KillWait=10
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
{chr(10).join(nodes)}
PartitionName={PARTITION} Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP
"""
    (home / "slurm.conf").write_text(conf)
    (home / "gres.conf").write_text("".join(line + "\n" for line in gres))
    for name in names:
        (home / "spool" / name).mkdir(exist_ok=True)
    key = home / "munge" / "munge.key"
    if not key.exists():
        subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True)
        os.chmod(key, 0o400)


def _pid(path: Path) -> Optional[int]:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def _start(command: Sequence[str], home: Path, env: dict) -> None:
    done = subprocess.run(list(command), env=env, capture_output=True, text=True, cwd=home,
                          start_new_session=True)
    if done.returncode != 0:
        raise Unavailable(f"{Path(command[0]).name} did not start: "
                          f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or '?'}")


def up(home: Path = DEFAULT_HOME) -> Cluster:
    """The cluster in `home`, installed if needed, started, and its nodes idle."""
    home = Path(home).resolve()
    cluster = Cluster(home)
    install()
    if _pid(home / "run" / "slurmctld.pid") and cluster.idle():
        return cluster  # already up
    down(home)
    write_config(home)
    env = cluster.env
    munge = home / "munge"
    _start([_sbin("munged"), f"--socket={munge / 'munge.socket'}",
            f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={home / 'log' / 'munged.log'}", f"--seed-file={munge / 'seed'}",
            "--force"], home, env)
    _start([_sbin("slurmctld"), "-c", "-f", str(cluster.conf)], home, env)
    for node in cluster.nodes:
        _start([_sbin("slurmd"), "-c", "-N", node, "-f", str(cluster.conf)], home, env)
    cluster.wait_idle()
    return cluster


def down(home: Path = DEFAULT_HOME) -> None:
    """Stop the cluster's jobs and daemons (those whose pid files are in `home`)."""
    home = Path(home).resolve()
    if (home / "slurm.conf").exists() and _pid(home / "run" / "slurmctld.pid"):
        try:
            Cluster(home).cancel_all()
        except (OSError, subprocess.SubprocessError):
            pass
    for pid_file in (*sorted((home / "run").glob("slurmd-*.pid")),
                     home / "run" / "slurmctld.pid", home / "munge" / "munged.pid"):
        pid = _pid(pid_file)
        if pid is None:
            continue
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            proc.kill()
        pid_file.unlink(missing_ok=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.slurm.cluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("home", nargs="?", type=Path, default=DEFAULT_HOME,
                        help=f"the cluster's folder (default {DEFAULT_HOME})")
    args = parser.parse_args(argv)
    if args.action == "down":
        down(args.home)
        print(f"SLURM cluster in {args.home} stopped")
        return 0
    if args.action == "status":
        cluster = Cluster(args.home.resolve())
        states = cluster.node_states() if cluster.conf.exists() else {}
        print(", ".join(f"{n}: {s}" for n, s in states.items()) or "not running")
        return 0 if states else 1
    try:
        cluster = up(args.home)
    except Unavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"SLURM cluster up: nodes {', '.join(cluster.nodes)} idle, partition {PARTITION}\n"
          f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
