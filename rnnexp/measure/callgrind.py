"""Retired instructions of a measuring process, counted by Valgrind's Callgrind
(bench.metric=instructions).

A counting worker is the ordinary worker (rnnexp.measure.isolation) started under
`valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no`: importing torch and the
warm-up run uninstrumented (several times faster than instrumented code: at the default
shape an instrumented iteration takes minutes), instrumentation starts after the warm-up
(`Clock.start`; the instructions a process executes are the same either way, only
Valgrind's own cost differs), and only the timed regions collect. `Clock` is the timer's
clock there: its first mark of a region switches collection on, its second switches it off
and dumps the counts (a dump zeroes them), so each forward and each backward is one dump
file whose total is that region's `Ir` — the timer (rnnexp.measure.timing) stays as it is.

The client requests are Valgrind's documented magic instruction sequence (valgrind.h, amd64)
run from a few bytes of executable memory through ctypes: torch exposes only
CALLGRIND_TOGGLE_COLLECT and DUMP_STATS, and starting instrumentation after the imports
needs START_INSTRUMENTATION. Outside Valgrind the sequence is a no-op that returns its
default, so the same code runs natively.

Counts depend on the code the libraries pick for the CPU, so counting and its calibration
(time measured alongside) both run with the ISA pinned (`PINNED_ENV`, recorded with the
result) and one thread: ATen's own kernels at AVX2 (Valgrind's synthetic CPU has no
AVX-512), MKL's GEMMs and oneDNN's kernels (nn.LSTM's) at SSE4. Their AVX2 kernels run
~100–200× slower under Valgrind than their SSE4 ones (fused multiply-adds, translated
instruction by instruction; measured, uninstrumented: 20 float32 GEMMs of 64×1024 by
1024×2048 took 198 s with MKL's AVX2 against 1.1 s with its SSE4.2, five nn.LSTM forward and
backward passes 163 s with oneDNN's AVX2 against 1.8 s with SSE4.1), which put a counting
process at the default shape past an hour; natively the SSE4 kernels take ~2× the AVX2
ones' time. The counts are then of SSE4 GEMMs — a proxy for the model's and the harness's
own code (Python, TorchScript, ATen's dispatch and element-wise kernels), which keep
their AVX2 paths, not for the vendor kernels' speed.

Counts also depend on the state of glibc's heap: with its defaults, a freed chunk goes back
to bins that `malloc` later searches and consolidates, and that work differs from iteration
to iteration and process to process (0.1–1.3% of a small LSTM's forward, almost all of the
counts' variation). A per-thread cache large enough to hold every freed small chunk
(`glibc.malloc.tcache_count`, `mxfast` at its largest) makes each allocation the same few
instructions: processes then repeat each other's counts to ≤ 0.06% for every model of
fastrnns' set (docs/benchmarks.md#instruction-counts).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from rnnexp.errors import ConfigError

# The ISA and threads of counting workers and of their time calibration: ATen's dispatch and
# glibc's string/memory routines pinned to what Valgrind's CPU offers, MKL and oneDNN to
# SSE4 (their AVX2 kernels are ~100× slower under Valgrind: the module's docstring); one
# OpenMP thread; Python's hashing fixed (set and dict order decide some code paths).
HWCAPS = "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD"
PINNED_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "DNNL_MAX_CPU_ISA": "SSE41",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "GLIBC_TUNABLES": HWCAPS,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
}
# Counting workers only: glibc's malloc serving small chunks from its per-thread cache (the
# module's docstring says why). Not for the time calibration: the cached chunks keep freed
# tensors from merging, so a process grows by ~0.8 GiB an iteration at the default shape —
# harmless over a counting worker's few iterations, fatal over a timing worker's hundred
# (the kernel killed them at 11–16 GiB).
ALLOCATOR = "glibc.malloc.tcache_count=65535:glibc.malloc.mxfast=160"
COUNTING_ENV = {**PINNED_ENV, "GLIBC_TUNABLES": f"{HWCAPS}:{ALLOCATOR}"}
# The most warm-up iterations a counting worker runs (uninstrumented, before it counts). A
# count needs the code to have settled, not the machine: TorchScript's profiling executor
# optimises on its second call and runs the optimised graph from the third, and counted
# iterations that still differed would show as their range. More only costs time under
# Valgrind (~10× native while uninstrumented).
WARMUP = 3
# Where a counting worker's dumps go (set by the job's process for each counting worker).
OUT_ENV = "RNNEXP_CALLGRIND_OUT"
INSTALL = "make valgrind (apt-get install valgrind, as root)"

# amd64: rax = &args, rdx = default; the rotate preamble and `xchg rbx,rbx` ask Valgrind;
# rdx comes back as its answer (valgrind.h's VALGRIND_DO_CLIENT_REQUEST_EXPR).
_CODE = bytes.fromhex("4889f8" "4889f2" "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"
                      "4887db" "4889d0" "c3")
RUNNING_ON_VALGRIND = 0x1001
_TOOL = (ord("C") << 24) | (ord("T") << 16)  # VG_USERREQ_TOOL_BASE('C','T')
DUMP_STATS, TOGGLE_COLLECT, START_INSTRUMENTATION = _TOOL, _TOOL + 2, _TOOL + 4

_request_fn = None


def supported() -> bool:
    return platform.machine() in ("x86_64", "AMD64") and os.name == "posix"


def _request(code: int, default: int = 0) -> int:
    """One Valgrind client request; `default` when not under Valgrind."""
    global _request_fn
    if _request_fn is None:
        buf = mmap.mmap(-1, mmap.PAGESIZE,
                        prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        buf.write(_CODE)
        fn_type = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong)
        _request_fn = (fn_type(ctypes.addressof(ctypes.c_char.from_buffer(buf))), buf)
    args = (ctypes.c_ulong * 6)(code, 0, 0, 0, 0, 0)
    return int(_request_fn[0](ctypes.addressof(args), default))


def running() -> bool:
    """This process runs under Valgrind."""
    return supported() and _request(RUNNING_ON_VALGRIND) > 0


def valgrind() -> Optional[str]:
    return shutil.which("valgrind")


def check() -> None:
    """Refuse bench.metric=instructions, before anything is built, where it cannot count."""
    if not supported():
        raise ConfigError("bench.metric", f"instruction counts need Valgrind on x86-64 Linux, "
                          f"not {platform.machine()}", "bench.metric=time")
    if valgrind() is None:
        raise ConfigError("bench.metric", "instructions needs Valgrind, which is not installed",
                          f"install it: {INSTALL}; or bench.metric=time")


def command(out_prefix: Path) -> list[str]:
    """The launcher a counting worker's interpreter runs under."""
    return [valgrind() or "valgrind", "--tool=callgrind", "--instr-atstart=no",
            "--collect-atstart=no", "--dump-line=no", "--dump-instr=no",
            "--collect-systime=no", f"--log-file={out_prefix.parent / 'valgrind.log'}",
            f"--callgrind-out-file={out_prefix}"]


DUMPS_PREFIX = "rnnexp-callgrind-"


def out_prefix() -> Path:
    """A fresh folder's dump prefix for one counting worker, named after this process (the
    one that removes it when the worker ends). Folders left by processes that are gone — a
    SIGKILLed sweep cannot remove its workers' — are removed first."""
    remove_orphans(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=f"{DUMPS_PREFIX}{os.getpid()}-")) / "callgrind.out"


def remove_orphans(folder: Path) -> list[Path]:
    """The dump folders under `folder` whose owner process no longer runs, removed."""
    removed = []
    for path in folder.glob(f"{DUMPS_PREFIX}*-*"):
        owner = path.name[len(DUMPS_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not _running(int(owner)) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: running
        return True
    return True


def total(path: Path) -> int:
    """A dump's total `Ir` (its summary line, or totals for older Valgrinds)."""
    with open(path, "rb") as f:
        for line in f:
            if line.startswith((b"summary:", b"totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path} holds no summary line")


class Clock:
    """The timer's clock in a counting worker: a region between two marks collects, and
    `elapsed_ms` is its instruction count (not milliseconds: the unit of this clock), less
    what the marks themselves cost (the least of a few empty regions). Until `start` (after
    the warm-up) nothing is instrumented, marks do nothing and regions count 0."""

    name = "callgrind"

    def __init__(self, prefix: Optional[str] = None):
        self.prefix = Path(prefix or os.environ[OUT_ENV])
        self._dumps = 0
        self._open = False
        self.started = False
        self.overhead = 0

    def start(self) -> None:
        """Instrument from here on (a no-op natively), and measure the marks' own cost."""
        _request(START_INSTRUMENTATION)
        self.started = True
        self.overhead = min(self._empty() for _ in range(3))

    def _empty(self) -> int:
        start = self.mark()
        return self.elapsed_ms(start, self.mark())

    def mark(self) -> int:
        if not self.started:
            return 0
        _request(TOGGLE_COLLECT)
        if self._open:
            _request(DUMP_STATS)
            self._dumps += 1
        self._open = not self._open
        return self._dumps

    def sync(self) -> None:
        pass

    def elapsed_ms(self, start: int, end: int) -> int:
        if not self.started:
            return 0
        path = self.prefix.with_name(f"{self.prefix.name}.{end}")
        count = total(path)
        path.unlink()
        return max(0, count - self.overhead)
