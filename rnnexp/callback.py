"""Hydra callback for sweeps (`-m`): tells the configured sinks that a sweep starts and ends.

Registered in conf/config.yaml under hydra.callbacks. The multirun events run in the
launching process, which exits with the status the sweep's end decides; jobs (in that
process with the basic launcher, in workers with joblib) read the `Sweep` — with what each
sink keeps for them — from the sweep folder, which works for every launcher that shares the
filesystem and leaves no state behind in the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rnnexp import exit_codes
from rnnexp import sinks as sinks_mod
from rnnexp.report import print_error
from rnnexp.results import FAILED_STATUSES, Result

# The sweep this process is running, from its start to its end: a signal that arrives
# outside any job (between jobs, in Hydra's own code) still ends its parent run.
_active: list[tuple[list[sinks_mod.Sink], sinks_mod.Sweep]] = []


def abort_active(result: Result) -> None:
    """Tell the sinks that the running sweep (if any) was cut short, with `result`'s status."""
    while _active:
        targets, sweep = _active.pop()
        for sink in targets:
            sink.on_abort(sweep, result)


def sinks_of(config: DictConfig) -> list[sinks_mod.Sink]:
    return sinks_mod.build(OmegaConf.to_container(config.sinks, resolve=True))


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = sinks_mod.Sweep.start(Path(str(config.hydra.sweep.dir)),
                                      list(config.hydra.overrides.task))
        targets = sinks_of(config)
        for sink in targets:
            sink.on_sweep_start(sweep)
        sweep.save()
        _active[:] = [(targets, sweep)]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _active.clear()
        folder = Path(str(config.hydra.sweep.dir)).resolve()
        sweep = sinks_mod.Sweep.load(folder) or sinks_mod.Sweep.start(folder, [])
        jobs = sinks_mod.load_jobs(folder)
        for sink in sinks_of(config):
            sink.on_sweep_end(sweep, jobs)
        # The sweep's exit status, from every job's saved result (jobs may have run in
        # other processes); rnnexp.cli.main exits with it once Hydra returns.
        failed = [r for _, r in jobs if r.status in FAILED_STATUSES]
        exit_codes.set_pending(exit_codes.for_statuses(r.status for _, r in jobs))
        if failed:
            print_error(f"{len(failed)} of {len(jobs)} jobs failed: " + ", ".join(
                f"{r.label} ({r.status})" for r in failed))
