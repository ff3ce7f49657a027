"""`rnnexp roofline`: the GEMM and memory-copy peaks of a device, measured on first use and
cached (rnnexp.run.roofline measures and caches them; this reads the arguments and prints)."""

from __future__ import annotations

from typing import Optional, Sequence

from rnnexp.errors import OneLineParser, RnnexpError


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`rnnexp roofline ARGS`; errors reach rnnexp.app.commands' boundary."""
    import torch

    from rnnexp.machine.device import device_name
    from rnnexp.machine.platform import current
    from rnnexp.run.roofline import Key, cache_path, peaks, threads_text

    parser = OneLineParser(prog="rnnexp roofline",
                           description="GEMM and copy peaks of a device (cached).")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu, cuda or cuda:N (default: the GPU if there is one)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16",
                                                                "bfloat16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch threads on a CPU (default: torch's, here "
                             f"{torch.get_num_threads()})")
    parser.add_argument("--remeasure", action="store_true", help="ignore the cached numbers")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise RnnexpError(f"--threads: must be ≥ 1, got {args.threads}")
    try:
        device = torch.device(args.device)
        if device.type not in ("cpu", "cuda"):
            raise RuntimeError(device.type)
        name = device_name(device, current())
    except (RuntimeError, IndexError):
        raise RnnexpError(f"--device {args.device}: no such device here — use cpu") from None
    found = peaks(device, name, args.dtype, args.threads, remeasure=args.remeasure)
    key = Key.of(device, name, args.dtype, args.threads)
    load = "?" if found.load_1min is None else f"{found.load_1min:.1f}"
    print(f"{name} ({device.type}, {args.dtype}{threads_text(key)}): GEMM {found.gflops:.1f} "
          f"GFLOP/s (n={found.gemm_n}), copy {found.gbps:.1f} GB/s "
          f"({found.copy_bytes // 2**20} MiB); measured {found.measured_at}, 1-min load {load}; "
          f"{cache_path(key)}")
    return 0


