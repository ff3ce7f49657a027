"""glibc malloc's thresholds pinned in a measuring process (bench.malloc=pinned).

glibc adapts two thresholds as a process runs: a freed block that was mmap'ed raises the
size above which blocks are mmap'ed, and with it the size of free heap top that is handed
back to the kernel (trimmed). What a process allocated before — another configuration it
hosts, the first process's verification in float64 — therefore decides whether a
configuration's buffers come back from the heap or as fresh pages that fault in on every
iteration. Measured on this project's 2-core machine: TorchScript's `jit` loop at seq 100
and 105 sharing five worker processes, seq 100's backward took 41–44 ms in the four
processes that did not verify and 27 ms in the one that did, against 26–27 ms in all five
with the thresholds pinned (docs/benchmarks.md#allocator-state). Pinned, they no longer
move: every block below 32 MiB comes from the heap and up to 256 MiB of free heap stays
mapped, so a configuration's allocations cost the same whatever ran before it.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Optional

from rnnexp.config.schema import MallocPolicy

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# 32 MiB: DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, the most some glibc versions accept.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


class MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (glibc ≥ 2.33)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc() -> Optional[ctypes.CDLL]:
    if platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(None)


@functools.cache
def pin() -> str:
    """Pin this process's thresholds (once; later calls say the same): what it is now, for
    the result — "" where the C library is not glibc or refused them."""
    libc = _libc()
    if libc is None:
        return ""
    if not (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return ""
    return (f"{MallocPolicy.pinned.value}: glibc mmap_threshold {MMAP_THRESHOLD >> 20} MiB, "
            f"trim_threshold {TRIM_THRESHOLD >> 20} MiB")


def apply(policy: MallocPolicy) -> str:
    """bench.malloc in this process: its description for the result. glibc cannot go back
    to adapting its thresholds once they were set, so a process that pinned them says so."""
    system = MallocPolicy.system.value
    if policy is MallocPolicy.pinned:
        return pin() or f"{system} (no glibc to pin)"
    if pin.cache_info().currsize:
        return f"{pin()} (pinned earlier in this process)"
    return system


def mmapped_bytes() -> Optional[int]:
    """Bytes this process holds in mmap'ed blocks (mallinfo2's hblkhd); None without
    glibc ≥ 2.33."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = MallInfo2
    return int(libc.mallinfo2().hblkhd)
