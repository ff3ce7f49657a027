"""Handing a job's result to the sinks without losing it: a signal waits until it is recorded
(rnnexp.run.signals.deferred), and a folder that cannot be written (full disk, gone, read-only)
costs the sink that failed, never the measurement — the result is kept in a fallback folder,
said in one line, the other sinks record it from there, and the process exits with
exit_codes.OUTPUT_FAILED."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional, Sequence

from rich.markup import escape

from rnnexp.results import exit_codes
from rnnexp.results.report import err_console
from rnnexp.results.result import RESULTS_FILE, Result
from rnnexp.results.sinks import Sink, Sweep
from rnnexp.run import signals

# Where a result goes when its own folder cannot take it: the user's temporary folder, then
# their home (a full /tmp).
FALLBACK_PREFIX = "rnnexp-unsaved-"


def fallback_roots() -> list[Path]:
    return [Path(tempfile.gettempdir()), Path.home() / ".cache" / "rnnexp"]


def keep_elsewhere(result: Result) -> Optional[Path]:
    """The result saved in a new fallback folder; None if no folder would take it."""
    for root in fallback_roots():
        try:
            root.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=FALLBACK_PREFIX, dir=root))
            result.save(folder)
            return folder
        except OSError:
            continue
    return None


def _reason(err: OSError) -> str:
    return f"{err.strerror or err}"


def publish(targets: Sequence[Sink], result: Result, output_dir: Path,
            sweep: Optional[Sweep]) -> Path:
    """Every sink gets the result; returns the folder it was recorded in (`output_dir`, or
    the fallback folder when that could not be written)."""
    folder = Path(output_dir)
    with signals.deferred():
        for sink in targets:
            try:
                sink.on_job(result, folder, sweep)
            except OSError as err:
                if folder != Path(output_dir):  # the fallback failed too: the next sink
                    continue
                kept = keep_elsewhere(result)
                exit_codes.note_unwritten()
                where = f"kept in {kept / RESULTS_FILE}" if kept else \
                    "and no fallback folder would take it (see the table above)"
                target = getattr(err, "filename", None) or folder
                err_console.print(
                    f"[red]error:[/] cannot write {escape(str(target))} "
                    f"({escape(_reason(err))}) — the result is {escape(where)}",
                    highlight=False, soft_wrap=True)
                if kept is None:
                    continue
                folder = kept
                try:  # the sink that failed, again from the fallback folder
                    sink.on_job(result, folder, sweep)
                except OSError:
                    pass
    return folder


def started_without_result(sweep_dir: Path) -> list[Path]:
    """Job folders of a sweep (made by Hydra: a .hydra/ in them, or named by the job's number
    before that) holding no result."""
    if not Path(sweep_dir).is_dir():
        return []
    return sorted(p for p in Path(sweep_dir).iterdir()
                  if p.is_dir() and (p.name.isdigit() or (p / ".hydra").is_dir())
                  and not (p / RESULTS_FILE).exists())
