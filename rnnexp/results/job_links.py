"""A sweep's job folders by name: Hydra numbers them (`0/`, `1/`, ...), and the sweep's end
links each from `jobs/<name>`, the name its row has in the sweep's table (what varies
between the jobs: `jobs/lstm`, `jobs/jit`).

The numbered folders stay the record — resume, compare, sync and the summary read them —
and the links are relative, so a moved or copied folder keeps them. A copy that followed
the links (scp -r, zip) holds each result twice: rnnexp.results.sinks.load_jobs never reads
under `jobs/`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from rnnexp.results.result import Result
from rnnexp.results.summary import split_common

LINKS = "jobs"


def names(jobs: Sequence[tuple[Path, Result]]) -> list[str]:
    """Each job's name, unique in its sweep, usable as a file name: its label without the
    parts every job shares; jobs whose labels agree (a sweep over the seed, bench.python)
    are told apart by the overrides they differ in, and at last by their folder."""
    short, _ = split_common([r.label for _, r in jobs])
    out = list(short)
    for name in set(short):
        same = [i for i, s in enumerate(short) if s == name]
        if len(same) < 2:
            continue
        differ = _differing([jobs[i][1].overrides for i in same])
        for i, own in zip(same, differ, strict=True):
            extra = ",".join(o for o in jobs[i][1].overrides if o in own)
            out[i] = f"{name},{extra}" if extra else name
    counts: dict[str, int] = {}
    for n in out:
        counts[n] = counts.get(n, 0) + 1
    out = [f"{n}#{Path(folder).name}" if counts[n] > 1 else n
           for n, (folder, _) in zip(out, jobs, strict=True)]
    return [_file_name(n) for n in out]


def _differing(overrides: Sequence[Sequence[str]]) -> list[set[str]]:
    """For each job, its overrides that not every job of the group shares."""
    common = set.intersection(*(set(o) for o in overrides))
    return [set(o) - common for o in overrides]


def _file_name(name: str) -> str:
    """A name a shell and every file system take: no slash, no leading dot, not too long."""
    name = re.sub(r"[/\\\x00-\x1f]", "_", name).lstrip(".") or "job"
    return name[:120]


def link(sweep_dir: Path, jobs: Sequence[tuple[Path, Result]]) -> dict[str, Path]:
    """`<sweep>/jobs/<name>` → `../<n>` for every job folder inside the sweep, links that are
    no longer a job's removed; {name: job folder}. A file system without symbolic links
    gets none (the numbered folders are all there is)."""
    sweep_dir = Path(sweep_dir)
    folder = sweep_dir / LINKS
    wanted: dict[str, Path] = {}
    for name, (job_dir, _) in zip(names(jobs), jobs, strict=True):
        try:
            wanted[name] = Path(job_dir).resolve().relative_to(sweep_dir.resolve())
        except ValueError:  # kept outside the sweep's folder (rnnexp.app.recording)
            continue
    try:
        folder.mkdir(exist_ok=True)
        for old in folder.iterdir():
            if old.is_symlink() and (old.name not in wanted or
                                     Path(os.readlink(old)) != Path("..") / wanted[old.name]):
                old.unlink()
        for name, target in wanted.items():
            path = folder / name
            if not path.is_symlink():
                path.symlink_to(Path("..") / target, target_is_directory=True)
    except OSError:
        return {}
    return {name: sweep_dir / target for name, target in wanted.items()}
