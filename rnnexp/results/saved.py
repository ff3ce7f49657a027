"""Results saved on disk, found from a path someone typed: a results file, a run folder (it
holds results.json) or a sweep folder (results.json in its job folders). Every file is read
through `Result.load_checked`; a path that names none of these — missing, something that is
no file or folder, a file that is no result, a folder without one — is one line that says
which it is. Reading never writes anything."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from rnnexp.errors import RnnexpError
from rnnexp.results.result import RESULTS_FILE, BrokenResults, Result
from rnnexp.results.sinks import load_jobs

WHAT = "a results.json, a run folder or a sweep folder (outputs/runs/…, outputs/sweeps/…)"


@dataclass
class Saved:
    path: Path  # as found (absolute)
    folder: Path  # the run or sweep folder (a file's own folder)
    jobs: list[tuple[Path, Result]]  # (job folder, result), in job order
    file: bool = False  # `path` is a results file, not a folder

    @property
    def single(self) -> bool:
        """One run's result (a file, or a run folder), not a sweep's."""
        return self.file or (self.folder / RESULTS_FILE).is_file()


def kind_of(path: Path) -> str:
    """What a path that is neither a file nor a folder is, in a word."""
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def broken(found: list[BrokenResults]) -> BrokenResults:
    """The first broken file, saying how many more there are."""
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return BrokenResults(first.path, first.problem + more)


def read(path: Path) -> Saved:
    """The results `path` names, each checked; RnnexpError (one line) when it names none,
    BrokenResults naming the first file that is no result."""
    path = Path(path).expanduser().absolute()
    if not path.exists():
        raise RnnexpError(f"{path}: no such file or folder — give {WHAT}")
    if path.is_file():
        return Saved(path, path.parent, [(path.parent, Result.load_checked(path))], file=True)
    if not path.is_dir():
        raise RnnexpError(f"{path}: is a {kind_of(path)}, not a results file or folder — "
                          f"give {WHAT}")
    found: list[BrokenResults] = []
    jobs = load_jobs(path, found)
    if found:  # never counted as a result, never silently left out
        raise broken(found)
    if not jobs:
        raise RnnexpError(f"{path}: no {RESULTS_FILE} under this folder — give {WHAT}")
    return Saved(path, path, jobs)
