"""Baidu DeepBench's RNN problems for LSTM and GRU, as the `deepbench` config group.

The shapes are those DeepBench publishes (code/kernels/rnn_problems.h in
baidu-research/DeepBench: hidden units, batch size, time steps, cell type) for its training
set (forward + backward) and its server and device inference sets (forward only); its
`vanilla` RNN problems are left out (no vanilla model here). DeepBench feeds each cell an
input as wide as its hidden state, one layer. Each problem is one group option, registered
in Hydra's ConfigStore (not 120 generated files): `+deepbench=train_lstm_h512_b16_t25`, or
all of them through the preset `+experiment=deepbench`. `deepbench.scale` (default 1)
multiplies hidden size, batch and steps (each at least 1) to run the same mix on a small CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

# (hidden, batch, time steps, cell), as rnn_problems.h lists them (vanilla rows left out).
TRAINING = [
    *[(h, b, 25, "lstm") for h in (512, 1024, 2048, 4096) for b in (16, 32, 64, 128)],
    (1536, 8, 50, "lstm"), (1536, 16, 50, "lstm"), (1536, 32, 50, "lstm"),
    (256, 16, 150, "lstm"), (256, 32, 150, "lstm"), (256, 64, 150, "lstm"),
    (2816, 32, 750, "gru"), (2816, 32, 375, "gru"), (2816, 32, 187, "gru"),
    *[(h, 32, t, "gru") for h in (2048, 1536, 2560) for t in (1500, 750, 375, 187)],
    (512, 32, 1, "gru"), (1024, 32, 1500, "gru"), (1024, 64, 1500, "gru"),
]
INFERENCE_SERVER = [
    *[(h, b, 25, "lstm") for h in (512, 1024, 2048) for b in (1, 2, 4)],
    *[(1536, b, 50, "lstm") for b in (1, 2, 4)],
    *[(256, b, 150, "lstm") for b in (1, 2, 4)],
    *[(h, b, t, "gru") for h in (2816, 2048, 1536, 2560) for b in (1, 2, 4)
      for t in (1500, 750, 375, 187)],
    *[(512, b, 1, "gru") for b in (1, 2, 4)],
    *[(1024, b, 1500, "gru") for b in (1, 2, 4)],
]
INFERENCE_DEVICE = [(256, 1, 150, "lstm")]

# Set name → (problems, timed with backward).
SETS = {"train": (TRAINING, True), "server": (INFERENCE_SERVER, False),
        "device": (INFERENCE_DEVICE, False)}


@dataclass
class DeepBenchConfig:
    """The DeepBench problem a job runs (set by a `deepbench` group option)."""

    set: str = ""  # DeepBench's set: train, server or device (inference)
    cell: str = ""  # lstm or gru
    hidden: int = 0  # the problem's hidden units (shape.hidden_size is this × scale)
    batch: int = 0  # the problem's batch size (shape.batch_size is this × scale)
    steps: int = 0  # the problem's time steps (shape.seq_len is this × scale)
    # Multiplies hidden size, batch and steps (each at least 1): 0.1 runs the mix on a CPU.
    scale: float = 1.0


def scaled(n: int, scale: float) -> int:
    return max(1, round(int(n) * float(scale)))


OmegaConf.register_new_resolver("rnnexp_scaled", scaled, replace=True)


def option_name(set_name: str, hidden: int, batch: int, steps: int, cell: str) -> str:
    return f"{set_name}_{cell}_h{hidden}_b{batch}_t{steps}"


def options() -> dict[str, dict]:
    """Every problem as a global config node: the model, the shape and the timing phases."""
    nodes = {}
    for set_name, (problems, backward) in SETS.items():
        for hidden, batch, steps, cell in problems:
            nodes[option_name(set_name, hidden, batch, steps, cell)] = {
                "defaults": [{"override /model": cell}, "_self_"],
                "deepbench": {"set": set_name, "cell": cell, "hidden": hidden,
                              "batch": batch, "steps": steps},
                "shape": {"hidden_size": "${rnnexp_scaled:${deepbench.hidden},"
                                         "${deepbench.scale}}",
                          "input_size": "${shape.hidden_size}",
                          "batch_size": "${rnnexp_scaled:${deepbench.batch},${deepbench.scale}}",
                          "seq_len": "${rnnexp_scaled:${deepbench.steps},${deepbench.scale}}",
                          "num_layers": 1},
                "bench": {"backward": backward},
            }
    return nodes


def register() -> None:
    cs = ConfigStore.instance()
    for name, node in options().items():
        cs.store(group="deepbench", name=name, node=node, package="_global_")
