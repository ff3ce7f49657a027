"""Hydra callback for sweeps (`-m`): tells the configured sinks that a sweep starts and ends.

Registered in conf/config.yaml under hydra.callbacks. The multirun events run in the
launching process; jobs (in that process with the basic launcher, in workers with joblib)
read the `Sweep` — with what each sink keeps for them — from the sweep folder, which works
for every launcher that shares the filesystem and leaves no state behind in the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rnnexp import sinks as sinks_mod


def sinks_of(config: DictConfig) -> list[sinks_mod.Sink]:
    return sinks_mod.build(OmegaConf.to_container(config.sinks, resolve=True))


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = sinks_mod.Sweep.start(Path(str(config.hydra.sweep.dir)),
                                      list(config.hydra.overrides.task))
        for sink in sinks_of(config):
            sink.on_sweep_start(sweep)
        sweep.save()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(str(config.hydra.sweep.dir)).resolve()
        sweep = sinks_mod.Sweep.load(folder) or sinks_mod.Sweep.start(folder, [])
        jobs = sinks_mod.load_jobs(folder)
        for sink in sinks_of(config):
            sink.on_sweep_end(sweep, jobs)
