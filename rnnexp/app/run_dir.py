"""Each run and each sweep its own folder. The default folders are named by the second they
start (outputs/runs/<date>/<time>), so two started together would share one and keep only
one result: a run claims its folder by creating a marker in it exclusively, and takes the
next free `<time>-2`, `<time>-3`, … when another run got there first. A folder named on the
command line (hydra.run.dir=…, hydra.sweep.dir=…) is used as named: resuming a sweep needs
its own folder again."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from omegaconf import DictConfig

# What marks a folder as taken: Hydra's .hydra/ in a run's, the sweep's sweep.json.
RUN_MARKER = ".hydra"
SWEEP_MARKER = "sweep.json"


def _take(folder: Path, marker: str) -> bool:
    """Create `marker` in `folder` (made if needed); False if it was there already."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if marker == RUN_MARKER:
            os.mkdir(folder / marker)
        else:
            os.close(os.open(folder / marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def claim(folder: Path, marker: str) -> Path:
    """`folder`, or the first of `folder-2`, `folder-3`, … that no other run has taken."""
    for n in itertools.count(1):
        candidate = folder if n == 1 else folder.with_name(f"{folder.name}-{n}")
        if _take(candidate, marker):
            return candidate
    raise AssertionError("unreachable")


def named_by_user(cfg: DictConfig, key: str) -> bool:
    return any(str(o).split("=", 1)[0].lstrip("+~") == key for o in cfg.hydra.overrides.hydra)


def claim_run(cfg: DictConfig) -> None:
    """Before Hydra makes the run's folder: the default one, claimed for this run only."""
    if named_by_user(cfg, "hydra.run.dir"):
        return
    cfg.hydra.run.dir = str(claim(Path(str(cfg.hydra.run.dir)), RUN_MARKER))


def claim_sweep(cfg: DictConfig) -> None:
    """Before the sweeper starts: the default sweep folder, claimed for this sweep only; each
    job's config is composed again from the hydra overrides, so the folder goes there too."""
    if named_by_user(cfg, "hydra.sweep.dir"):
        return
    folder = claim(Path(str(cfg.hydra.sweep.dir)), SWEEP_MARKER)
    cfg.hydra.sweep.dir = str(folder)
    quoted = str(folder).replace("\\", "\\\\").replace("'", "\\'")
    cfg.hydra.overrides.hydra.append(f"hydra.sweep.dir='{quoted}'")
