"""`rnnexp [COMMAND] ARGS`: the Hydra app, or one of the tools beside it — and the one error
boundary they all share.

`rnnexp compare|report|matrix|sync|roofline|history|bisect|search ARGS` (or `python -m
rnnexp COMMAND ARGS`) runs that tool; anything else is the Hydra app (`rnnexp model=jit
backend=te`, `rnnexp -m ...`). A Hydra override always holds `=` or starts with `-`, `+` or
`~`, so a bare command word is never one. The boundary: a problem the user can fix
(RnnexpError) is one line and exit 2, Ctrl-C or SIGTERM exit 128 + the signal, any other
failure one line naming it and exit 1 (HYDRA_FULL_ERROR=1 shows the traceback), as
rnnexp.results.exit_codes documents.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

# command → the module whose `main(argv)` it runs: one a command, each a thin adapter over
# its stage's logic (what it reads, checks and prints; the exit status).
COMMANDS = {
    name: f"rnnexp.app.commands.{name}"
    for name in ("compare", "report", "matrix", "sync", "roofline", "history", "bisect",
                 "search")
}


def check_page_path(option: str, path: Optional[Path]) -> None:
    """A page a command writes (`report -o`, `history`/`bisect --report`): an .html file, or
    a one-line error naming the option and the name that would work."""
    from rnnexp.errors import RnnexpError

    if path is not None and path.suffix.lower() not in (".html", ".htm"):
        raise RnnexpError(f"{option} {path}: the page is an HTML file — name it "
                          f"{path.with_suffix('.html')}")


def guarded(main: Callable[[Sequence[str]], Optional[int]], argv: Sequence[str],
            name: str) -> int:
    """Run a command's `main(argv)` inside the shared error boundary; its exit status."""
    from rnnexp.errors import Interrupted, RnnexpError, crash_line, full_error
    from rnnexp.results import exit_codes
    from rnnexp.results.report import print_error

    try:
        return main(argv) or exit_codes.OK
    except RnnexpError as err:
        print_error(str(err))
        return exit_codes.USER_ERROR
    except KeyboardInterrupt:
        return exit_codes.SIGINT
    except Interrupted as err:
        return exit_codes.for_signal(err.signum)
    except Exception as err:
        if full_error():
            raise
        from rnnexp.config.credentials import redact

        print_error(f"{name} failed: {redact(crash_line(err))}")
        return exit_codes.JOB_FAILED


def run_command(name: str, argv: Sequence[str]) -> int:
    main = importlib.import_module(COMMANDS[name]).main
    return guarded(main, list(argv), name)


def main() -> None:
    """The `rnnexp` console script and `python -m rnnexp`."""
    argv = sys.argv[1:]
    if argv and argv[0] in COMMANDS:
        sys.exit(run_command(argv[0], argv[1:]))
    from rnnexp.app.cli import main as hydra_app
    from rnnexp.app.quick_exit import exit_now

    try:
        hydra_app()
    except SystemExit as done:
        exit_now(done.code)
