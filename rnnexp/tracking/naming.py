"""Names and identities of runs: what a run is called and how a result is recognised again."""

from __future__ import annotations

import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from rnnexp.results import Result

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Tags of our own (MLflow's are mlflow.*).
TAG_RESULT_ID = "rnnexp.result_id"
TAG_SWEEP_ID = "rnnexp.sweep_id"
TAG_KIND = "rnnexp.kind"  # "job" or "sweep"
TAG_GROUPS = "rnnexp.groups"  # the config groups, comma-separated: the comparable choices


def run_name(result: Result) -> str:
    """model·backend·shape·device, e.g. jit_premul·te·small·cpu (the device choice when a
    declined job never resolved one)."""
    if result.device:
        return result.label
    keys = ("model", "backend", "shape", "device")
    return "·".join(result.choices.get(k, "?") for k in keys)


def sweep_name(overrides: Sequence[str], started: str) -> str:
    swept = [o for o in overrides if "," in o or "(" in o] or list(overrides)
    return f"sweep {started} " + " ".join(swept) if swept else f"sweep {started}"


def result_id(results_file: Path) -> str:
    """The content hash of a saved results.json: the same result is never uploaded twice."""
    return hashlib.sha256(Path(results_file).read_bytes()).hexdigest()[:20]


@lru_cache(maxsize=1)
def git_commit() -> str:
    """HEAD of the project's checkout (+"-dirty" with local changes), or "" outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, text=True,
                             capture_output=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=PROJECT_ROOT, text=True, capture_output=True, timeout=5
                               ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{sha}-dirty" if dirty else sha


def stamp(result: Result) -> None:
    """Record the code version in the result itself, so a later sync tags the right commit."""
    extra = result.platform.setdefault("extra", {})
    extra.setdefault("git_commit", git_commit())
