"""`make bench` part `startup`: how long what answers before any measuring takes — the help
page, a command line's error, `compare`'s argument error — against the floor every one of them
pays (Python with Hydra, OmegaConf and rich imported) and against importing torch, each a
fresh process, the commands in turn round after round (a shared machine's speed moves;
taking them in turn keeps the ratios meaningful). The goal: each answer within ~1 s, i.e. a
small multiple of the floor and well under torch's import alone.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=None if sys.stdout.isatty() else 150)

FLOOR = ("floor: import hydra, omegaconf, rich", ["-c", "import hydra, omegaconf, rich.table"])
TORCH = ("import torch", ["-c", "import torch"])
COMMANDS = [
    ("rnnexp --help", ["-m", "rnnexp", "--help"]),
    ("rnnexp bench.iters=ten", ["-m", "rnnexp", "bench.iters=ten"]),
    ("rnnexp device=gpu", ["-m", "rnnexp", "device=gpu"]),
    ("rnnexp compare --bogus", ["-m", "rnnexp", "compare", "--bogus"]),
]


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, timeout=300)
    return time.perf_counter() - start


def startup(rounds: int = 7) -> None:
    cases = [FLOOR, *COMMANDS, TORCH]
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _, args in cases:  # warm the file cache once
        wall(args)
    for _ in range(rounds):
        for name, args in cases:
            times[name].append(wall(args))
    floor = statistics.median(times[FLOOR[0]])
    table = Table(title=f"start-up: median wall time of {rounds} fresh processes, in turn")
    for col in ("command", "median s", "max s", "× floor"):
        table.add_column(col, justify="left" if col == "command" else "right")
    for name, _ in cases:
        med = statistics.median(times[name])
        table.add_row(name, f"{med:.2f}", f"{max(times[name]):.2f}", f"{med / floor:.2f}")
    console.print(table)
