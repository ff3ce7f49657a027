"""Errors that reach the user as one line, never as a traceback."""


class RnnexpError(Exception):
    """A problem the user can fix: printed as one line, exit status 2."""


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
    """The job's own process died (e.g. the isolated TorchScript process): not a reason the
    user can act on, so it is recorded as a crash, not as an unsupported combination."""
