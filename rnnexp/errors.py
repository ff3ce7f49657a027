"""Errors that reach the user as one line, never as a traceback."""

import argparse
import os

# Set beside HYDRA_FULL_ERROR=1 when rnnexp set that itself, for Hydra to raise its errors
# to rnnexp.app.cli.main (rnnexp.app.cli.hydra_raising), not because the user asked.
ONE_LINE_ERRORS = "RNNEXP_ONE_LINE_ERRORS"


def full_error() -> bool:
    """HYDRA_FULL_ERROR=1: the user asked for tracebacks instead of one-line errors."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(ONE_LINE_ERRORS) != "1"


class RnnexpError(Exception):
    """A problem the user can fix: printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """A command's argument errors in one line (argparse prints the whole usage, then the
    error, and exits 2 itself)."""

    def error(self, message: str):  # type: ignore[override]
        raise RnnexpError(f"{message} — see {self.prog} --help")


class ConfigError(RnnexpError):
    """A config value is out of range or inconsistent; raised before any timing."""

    def __init__(self, field: str, problem: str, hint: str = ""):
        self.field = field
        msg = f"{field}: {problem}"
        if hint:
            msg += f" — {hint}"
        super().__init__(msg)


class UnsupportedError(RnnexpError):
    """This model × backend × device combination cannot run here (and why)."""


class JobCrashed(RnnexpError):
    """The job crashed (an exception in it, or its isolated process died): not a reason the
    user can act on, so it is recorded as a crash, not as an unsupported combination."""


class Interrupted(BaseException):
    """SIGTERM (or SIGINT) arrived: the current job ends KILLED and the process exits with
    128 + the signal number. A BaseException, like KeyboardInterrupt, so no `except
    Exception` on the way swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal_name(signum)}")

    def __reduce__(self):  # pickled (a launcher's worker process) with what it was made of
        return type(self), (self.signum,)


class InterruptRecorded(Interrupted):
    """An interrupt that its job already recorded — the job's result as measured, or the job
    killed — and told the sinks of (a sweep's parent run ended): whoever catches it records
    nothing more. `measured`: the job had its result before the signal came."""

    def __init__(self, signum: int, measured: bool = False):
        super().__init__(signum)
        self.measured = measured

    def __reduce__(self):
        return type(self), (self.signum, self.measured)


def signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def crash_line(err: BaseException) -> str:
    """An exception as the one line a crash is reported and recorded with."""
    text = " ".join(str(err).split()) or "(no message)"
    return f"{type(err).__name__}: {text}"[:1000]
