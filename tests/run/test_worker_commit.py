"""A measurement taken under another interpreter (`bench.python`) records that interpreter's
code: its torch version and the git commit of its rnnexp checkout, not the launcher's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rnnexp.app import environments
from rnnexp.machine import platform
from tests.conftest import ROOT, TINY


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C",
                           str(folder), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.slow
def test_a_worker_under_another_interpreter_records_its_own_commit(run_here, tmp_path):
    # Another checkout of the same code, under a commit of its own, in its own environment.
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "rnnexp", checkout / "rnnexp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "another checkout")
    theirs = git(checkout, "rev-parse", "HEAD")
    python = environments.overlay(tmp_path / "venv", sys.executable, first=checkout)

    proc = run_here("model=lstm", "backend=aten", *TINY, "sinks=[json]",
                    f"bench.python={sys.executable},{python}", multirun=True)
    assert proc.returncode == 0, proc.stderr
    commits = {}
    for path in (tmp_path / "sweep").glob("*/results.json"):
        data = json.loads(path.read_text())
        commits[data["config"]["bench"]["python"]] = data["git_commit"]
    assert commits[str(python)] == theirs
    assert commits[sys.executable] == platform.git_commit() != theirs
