"""How much memory a job needs, estimated from its config before anything is built, against
what is free where it will run — so a shape that cannot fit is refused in one line instead
of allocating until the machine swaps or the allocator gives up.

The estimate is deliberately simple and a little generous; it exists to catch shapes that
are off by orders of magnitude, not to predict the allocator's peak:

- parameters (and their gradients when the backward runs);
- inputs, outputs and states;
- activations saved for the backward: per layer, step and hidden unit the gate blocks plus
  the cell state and its tanh (a cell loop run by autograd or TorchScript keeps every
  pointwise op's inputs: counted twice);
- the reference verification builds on the CPU in float64 (and in the job's dtype);
- a workspace margin of 25% + 64 MiB;
- on a GPU, a CUDA/HIP context per process.

Several processes measure a configuration at once (bench.processes, up to
bench.max_processes with a precision target: the scheduler keeps them all alive), and in an
interleaved sweep other configurations' processes are alive beside them: each holds its own
model, workspace and context. The reference is built by the verifying process only.

A job that passes the estimate and still runs out of memory is caught (`is_out_of_memory`)
and recorded as crashed with its shape.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Optional

import torch

from rnnexp.config.schema import BenchConfig, Config, Form, ShapeConfig
from rnnexp.errors import ConfigError
from rnnexp.errors import crash_line as one_line

MARGIN = 1.25
WORKSPACE_BYTES = 64 << 20
# A process's CUDA context and loaded kernel modules on the GPU (~300-600 MiB with lazy
# module loading, more without): paid by every process that measures on it.
CONTEXT_BYTES = 512 << 20
ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
GATES = {"lstm": 4, "gru": 3}
SHAPE_FIELDS = ("seq_len", "batch_size", "input_size", "hidden_size", "num_layers")


@dataclass(frozen=True)
class Estimate:
    device_bytes: int  # on the job's device
    host_bytes: int  # in CPU memory (the references; everything on a CPU job)

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.device_bytes + other.device_bytes,
                        self.host_bytes + other.host_bytes)


NOTHING = Estimate(0, 0)


def _elements(shape: ShapeConfig, family: str, form: Form, backward: bool,
              varlen: bool) -> int:
    """Elements a model holds at its peak (forward outputs + what the backward needs)."""
    S = max(shape.seq_len, shape.max_len) if varlen else shape.seq_len
    B, I, H, L = shape.batch_size, shape.input_size, shape.hidden_size, shape.num_layers  # noqa: E741
    if family == "eltwise":  # [B, 4H] gates and biases; (hy, cy) out; grads alike
        return 16 * B * H * (3 if backward else 1)
    G = GATES.get(family, 4)
    in_sizes = [I] + [H] * (L - 1)
    params = sum(G * H * (i + H) + 2 * G * H for i in in_sizes)
    io = S * B * I + S * B * H + 4 * L * B * H
    per_step = (G + 3) * B * H * L
    saved = S * per_step * (2 if form != Form.module else 1) if backward else per_step
    return params * (2 if backward else 1) + io * (2 if backward else 1) + saved


def estimate(cfg: Config, varlen: bool = False) -> Estimate:
    backward = cfg.bench.backward
    elems = _elements(cfg.shape, cfg.model.family, cfg.model.form, backward, varlen)
    model = elems * ELEM_BYTES.get(cfg.dtype.value, 4)
    # verify builds the reference on the CPU in float64 (and once in the job's dtype).
    reference = 0
    if cfg.bench.verify:
        ref = _elements(cfg.shape, cfg.model.family, Form.module, backward, varlen)
        reference = ref * (8 + ELEM_BYTES.get(cfg.dtype.value, 4))
    margin = lambda n: int(n * MARGIN) + WORKSPACE_BYTES  # noqa: E731
    return Estimate(device_bytes=margin(model), host_bytes=margin(reference))


def processes_at_once(bench: BenchConfig) -> int:
    """How many processes measure a configuration at once: bench.processes, or up to
    bench.max_processes with a precision target — rnnexp.run.schedule's max_processes, which
    keeps every process it starts alive until the configuration is done."""
    if bench.precision is None:
        return bench.processes
    return max(bench.processes, bench.max_processes or bench.processes)


def concurrent(cfg: Config, device: torch.device, varlen: bool = False, processes: int = 1
               ) -> Estimate:
    """What `processes` processes measuring this configuration at once hold: each its model
    (and on a GPU its context), the reference once (the verifying process builds it)."""
    one = estimate(cfg, varlen)
    per_process = one.device_bytes + (CONTEXT_BYTES if device.type == "cuda" else 0)
    return Estimate(device_bytes=processes * per_process, host_bytes=one.host_bytes)


def free_bytes(device: torch.device) -> Optional[int]:
    """Memory free for a new allocation on `device`: the GPU's free memory, or available RAM
    (bounded by the process's address-space limit, when one is set); None if unknown (a
    platform that is only described, as the support matrix's simulated GPUs)."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return None
        free, _ = torch.cuda.mem_get_info(device)
        # Blocks this process's caching allocator holds but no tensor uses (a sweep's earlier
        # job, the roofline's copy buffers) count as used for the driver, yet are reused here.
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free) + max(0, int(cached))
    return free_host_bytes()


def free_host_bytes() -> int:
    import psutil

    free = int(psutil.virtual_memory().available)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            free = min(free, max(0, soft - psutil.Process().memory_info().vms))
    except (ImportError, OSError, ValueError):
        pass
    return free


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.3g} PB"


def shape_text(shape: ShapeConfig) -> str:
    return ", ".join(f"shape.{f}={getattr(shape, f)}" for f in SHAPE_FIELDS)


def needs(est: Estimate, device: torch.device) -> dict[str, int]:
    """Bytes an estimate takes where: "host" (RAM; all of it on a CPU) and "device"."""
    on_cpu = device.type == "cpu"
    out = {"host": est.host_bytes + (est.device_bytes if on_cpu else 0)}
    if not on_cpu:
        out["device"] = est.device_bytes
    return out


def check(cfg: Config, device: torch.device, varlen: bool = False,
          free: Optional[dict[str, int]] = None, *, processes: int = 1,
          alongside: Estimate = NOTHING) -> Estimate:
    """ConfigError naming the shape when the job cannot fit; returns the estimate checked.

    `processes`: how many processes of this configuration are alive at once (the scheduler's
    `max_processes(cfg.bench)`); `alongside`: what other configurations' processes alive at
    the same time hold (an interleaved sweep's window: the sum of their `concurrent(...)`).
    `free` overrides what is free ({"device": bytes, "host": bytes}) for tests of the
    decision."""
    est = concurrent(cfg, device, varlen, processes) + alongside
    for where, need in needs(est, device).items():
        have = (free or {}).get(where)
        if have is None:
            have = free_host_bytes() if where == "host" else free_bytes(device)
        if have is not None and need > have:
            place = "RAM" if where == "host" else f"memory on {device}"
            many = f"; {processes} processes at once" if processes > 1 else ""
            others = "; with the other configurations alive beside it" if alongside.device_bytes \
                or alongside.host_bytes else ""
            raise ConfigError("shape", f"needs about {human(need)} ({shape_text(cfg.shape)}, "
                              f"{cfg.dtype.value}{', with backward' if cfg.bench.backward else ''}"
                              f"{many}{others}), {human(have)} of {place} free",
                              "reduce shape.seq_len, shape.batch_size or shape.hidden_size"
                              + (" or bench.processes/bench.max_processes" if many else ""))
    return est


def is_out_of_memory(err: BaseException) -> bool:
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text
                                              or "can't allocate memory" in text)


def release() -> None:
    """Give memory back after an out-of-memory so the next job of a sweep starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def crash_line(shape: ShapeConfig, err: BaseException) -> str:
    """One line for a crash while measuring; an out-of-memory names the shape (and the memory
    is given back)."""
    if is_out_of_memory(err):
        release()
        return f"out of memory at {shape_text(shape)}: {one_line(err)}"
    return one_line(err)
