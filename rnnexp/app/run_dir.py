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
from typing import Sequence

from omegaconf import DictConfig, open_dict, read_write

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
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = OverridesParser.create().parse_overrides([str(o) for o in cfg.hydra.overrides.hydra])
    return any(o.key_or_group == key for o in given)


def claim_run(cfg: DictConfig) -> None:
    """Before Hydra makes the run's folder: the default one, claimed for this run only."""
    if named_by_user(cfg, "hydra.run.dir"):
        return
    cfg.hydra.run.dir = str(claim(Path(str(cfg.hydra.run.dir)), RUN_MARKER))


def claim_sweep(cfg: DictConfig, jobs: Sequence[DictConfig] = ()) -> None:
    """Before the sweeper launches: the default sweep folder, claimed for this sweep only. A
    job composed from the sweep's config has its Hydra overrides first: the folder goes there
    too, and into the `jobs` composed before the claim, as if they were composed after it."""
    if named_by_user(cfg, "hydra.sweep.dir"):
        return
    before = len(cfg.hydra.overrides.hydra)
    folder = claim(Path(str(cfg.hydra.sweep.dir)), SWEEP_MARKER)
    cfg.hydra.sweep.dir = str(folder)
    quoted = str(folder).replace("\\", "\\\\").replace("'", "\\'")
    cfg.hydra.overrides.hydra.append(f"hydra.sweep.dir='{quoted}'")
    for job in jobs:
        with read_write(job.hydra), open_dict(job.hydra):
            job.hydra.sweep.dir = str(folder)
            job.hydra.overrides.hydra = [*cfg.hydra.overrides.hydra,
                                         *job.hydra.overrides.hydra[before:]]
