"""Writing a result's files so that no reader ever finds half of one: the text goes to a
temporary file beside the target, flushed to disk, then renamed over it (a rename within a
folder is atomic). A disk that fills, or a signal, mid-write leaves the earlier file — or
none — never a truncated one; the temporary file is removed."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

_UMASK = os.umask(0o022)  # read once, at import: setting it is the only way to read it
os.umask(_UMASK)


@contextlib.contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary path to write `path`'s new content to; renamed over `path` when the block
    ends without an error, removed when it raises."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        err.filename = str(path)  # the file meant, not its temporary name
        raise
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:  # on disk before it takes the name
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it (mkstemp: 0600)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename == tmp:
            err.filename = str(path)
        raise


def write_text(path: Path, text: str) -> Path:
    """`path` holds `text`, whole, or is as it was."""
    with replaced(path) as tmp:
        tmp.write_text(text)
    return Path(path)
