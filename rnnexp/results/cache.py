"""rnnexp's cache folder, shared by what it keeps between runs: a device's roofline peaks
(rnnexp.run.roofline), each measurement's history of medians (rnnexp.run.drift), the report's
compiled templates and Plotly bundle (rnnexp.analysis.report.render). Deleting it loses
nothing recorded: each is measured or built again.

It is `$RNNEXP_CACHE_DIR`, else `$XDG_CACHE_HOME/rnnexp`, else `~/.cache/rnnexp`; each user of
it keeps a folder of its own there."""

from __future__ import annotations

import os
from pathlib import Path

from rnnexp.results import files

CACHE_ENV = "RNNEXP_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rnnexp"


def write_atomically(path: Path, text: str) -> None:
    """Write a cache file so that readers never see half of it (a temporary file, renamed)."""
    files.write_text(path, text)
