"""The environments a bisection walks: interpreters given as they are, or commits of a git
repository (the project's own or a kernel plugin's) each installed into a throwaway
environment the first time it is probed.

A commit's environment is a venv made from the base interpreter (the good end's, by default
this one) without packages of its own: a `.pth` file puts the commit's checkout first on its
path and then every package of the base environment (`site.addsitedir`), so the commit's code
runs on the base's torch and libraries. A repository whose package must be built (a C++
extension) names its install command (`--install "{python} -m pip install --no-deps
--no-build-isolation -e {src}"`), run in the checkout; a commit whose install fails is a
failed probe, never a slow one.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from rnnexp.errors import RnnexpError

# Read in this order by `site`: the checkout first, then the base environment's packages.
CHECKOUT_PTH = "_rnnexp_bisect_checkout.pth"
BASE_PTH = "zz_rnnexp_bisect_base.pth"


@dataclass
class Environment:
    """One environment of the ordered list: its name and, once made, its interpreter."""

    name: str
    python: Optional[str] = None
    commit: str = ""
    failed: str = ""  # why it could not be made


def _run(cmd: Sequence[str], cwd: Optional[Path] = None, timeout: float = 1800) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise RuntimeError(last[-1] if last else f"exit status {done.returncode}")
    return done.stdout.strip()


def interpreters(paths: Sequence[str]) -> list[Environment]:
    """`--pythons`: each must be an executable file (checked before anything runs)."""
    if len(paths) < 2:
        raise RnnexpError("--pythons: give at least two interpreters, the good one first and "
                          "the bad one last")
    for p in paths:
        if not (Path(p).is_file() and os.access(p, os.X_OK)):
            raise RnnexpError(f"--pythons: {p} is not an executable file — give interpreters "
                              "such as /path/to/venv/bin/python")
    return [Environment(name=p, python=str(Path(p).absolute())) for p in paths]


def commits(repo: Path, span: str) -> list[Environment]:
    """`--commits GOOD..BAD` of `repo`: GOOD and every first-parent commit after it up to BAD."""
    good, sep, bad = span.partition("..")
    if not sep or not good or not bad:
        raise RnnexpError(f"--commits {span}: expected GOOD..BAD, e.g. v1.2..main")
    try:
        shas = [_run(["git", "-C", str(repo), "rev-parse", "--verify", f"{good}^{{commit}}"])]
        shas += _run(["git", "-C", str(repo), "rev-list", "--reverse", "--first-parent",
                      f"{good}..{bad}"]).split()
    except (RuntimeError, OSError) as err:
        raise RnnexpError(f"--commits {span} in {repo}: {err}") from None
    if len(shas) < 2:
        raise RnnexpError(f"--commits {span}: no commit after {good} on the way to {bad}")
    subjects = _run(["git", "-C", str(repo), "log", "--no-walk=unsorted", "--format=%s",
                     *shas]).splitlines()
    return [Environment(name=f"{sha[:10]} {subject[:50]}", commit=sha)
            for sha, subject in zip(shas, subjects, strict=True)]


def purelib(python: str) -> str:
    return _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])


def overlay(venv: Path, base_python: str, first: Optional[Path] = None) -> Path:
    """A venv without packages of its own that runs on `base_python`'s: `first` (a checkout)
    ahead of them on its path. Its interpreter."""
    python = venv / "bin" / "python"
    if not python.exists():
        _run([base_python, "-m", "venv", "--without-pip", str(venv)])
    site = Path(purelib(str(python)))
    if first is not None:
        (site / CHECKOUT_PTH).write_text(f"{first}\n")
    (site / BASE_PTH).write_text(f"import site; site.addsitedir({purelib(base_python)!r})\n")
    return python


def make(env: Environment, repo: Path, base_python: str, workdir: Path,
         install: Optional[str]) -> Environment:
    """The commit's throwaway environment (made once; a failure is recorded on it)."""
    if env.python or env.failed:
        return env
    home = workdir / "envs" / env.commit[:12]
    src, venv = home / "src", home / "venv"
    try:
        if not src.exists():
            _run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(src)])
            _run(["git", "-C", str(src), "checkout", "--quiet", "--detach", env.commit])
        python = overlay(venv, base_python, first=src)
        if install:
            _run(shlex.split(install.format(python=python, src=src)), cwd=src)
        env.python = str(python)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        env.failed = f"build: {err}"
    return env
