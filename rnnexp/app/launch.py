"""What rnnexp's Hydra launcher (hydra_plugins/rnnexp_launcher) does with a sweep's jobs: plan
them all, then measure those that can run window by window in interleaved rounds
(rnnexp.run.interleave); each window's jobs are recorded (their task function run by Hydra, with
the Result — or the error that stopped it — handed over: rnnexp.app.cli.run_job) before the next
window starts, so an interrupted sweep loses nothing measured.

Jobs a resumed sweep skips, and jobs whose plan is refused, are not measured here: their
task function says so as it does under any launcher.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from rnnexp.app import config_check
from rnnexp.config import schema
from rnnexp.errors import Interrupted, RnnexpError
from rnnexp.measure import job
from rnnexp.results import sinks
from rnnexp.results.report import RichProgress, err_console
from rnnexp.results.result import RESULTS_FILE, Result
from rnnexp.run import execution, interleave, signals

Outcome = Result | BaseException


@dataclass
class WindowOutcomes:
    """A window's jobs as measured: job number → its Result or the error that stopped it.
    `interrupt`: the signal that cut the window short (the jobs still measuring then have
    no outcome), raised by the launcher once it has recorded the others."""

    outcomes: dict[int, Outcome]
    interrupt: Optional[BaseException] = None


@dataclass
class _Job:
    num: int
    plan: job.Plan
    history: execution.History


def job_parts(cfg: DictConfig, typed: schema.Config) -> tuple[schema.Config, dict[str, str],
                                                            list[str]]:
    """A composed job's typed config, group choices and overrides."""
    return typed, config_check.app_choices(cfg.hydra.runtime.choices), \
        list(cfg.hydra.overrides.task)


def _output_dir(cfg: DictConfig) -> Path:
    return Path(str(cfg.hydra.sweep.dir)) / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))


@dataclass
class SweepRun:
    """A sweep's jobs planned, and measured window by window; lives as long as the launch."""

    configs: Sequence[DictConfig]
    refused: dict[int, Outcome] = field(default_factory=dict)  # declined before timing
    windows: list[list[_Job]] = field(default_factory=list)
    sweep_id: str = "sweep"

    @classmethod
    def plan(cls, configs: Sequence[DictConfig], typed: dict[int, schema.Config]) -> SweepRun:
        """`typed`: each job's typed config, by job number."""
        run = cls(configs)
        if not configs:
            return run
        sweep = sinks.Sweep.load(Path(str(configs[0].hydra.sweep.dir)).resolve())
        skip = set(sweep.skip_jobs) if sweep else set()
        run.sweep_id = sweep.sweep_id if sweep else run.sweep_id
        planned = []
        for cfg in configs:
            num = int(cfg.hydra.job.num)
            if num in skip:
                continue
            try:
                config, choices, overrides = job_parts(cfg, typed[num])
                p = job.plan(config, choices, overrides)
            except RnnexpError as err:
                run.refused[num] = err
                continue
            p.output_dir = _output_dir(cfg)
            planned.append(_Job(num, p, execution.History.of(p)))
        while planned:
            n = interleave.fits([j.plan for j in planned])
            run.windows.append(planned[:n])
            planned = planned[n:]
        return run

    def measure(self, w: int) -> WindowOutcomes:
        """Window `w`'s jobs measured together."""
        members, of = self.windows[w], len(self.windows)
        nums = [j.num for j in members]
        started = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        err_console.print(f"interleaved: jobs {', '.join(map(str, nums))} measured together"
                          + (f" (window {w + 1} of {of})" if of > 1 else ""),
                          highlight=False, markup=False)
        seed = int(time.time_ns() % (1 << 31))
        signals.stop_job_on_scheduler()  # a scheduler's signal ends the window's measuring
        try:
            with RichProgress(f"window {w + 1}/{of}") as progress:
                ended = interleave.measure_window(
                    [j.plan for j in members], [j.history.drift for j in members],
                    f"{self.sweep_id}/{w}", nums, seed, progress)
        except (KeyboardInterrupt, Interrupted) as err:  # around the window's own: none kept
            ended = interleave.Ended([None] * len(members), interrupt=err)
        finally:
            signals.settle()
        done = self._results(members, {n: m for n, m in zip(nums, ended.outcomes, strict=True)
                                       if m is not None}, started, t0)
        if isinstance(ended.interrupt, signals.Killed):
            # The jobs still measuring end killed; the sweep goes on.
            return WindowOutcomes({j.num: done.get(j.num, ended.interrupt) for j in members})
        return WindowOutcomes(done, ended.interrupt)

    @staticmethod
    def _results(members: list[_Job], measured: dict[int, object], started: datetime,
                 t0: float) -> dict[int, Outcome]:
        """Each job's Result from its Measured (an error stays the job's outcome)."""
        out: dict[int, Outcome] = {}
        for j in members:
            m = measured.get(j.num)
            if m is None:
                continue
            if isinstance(m, BaseException):
                out[j.num] = m
                continue
            result = execution.conclude(j.plan, m, j.history, started,
                                        time.perf_counter() - t0)
            out[j.num] = execution.with_roofline(j.plan.cfg, result)
        return out


def outcome_of(outcome: Optional[Outcome]) -> Optional[Result]:
    """The job's Result, or its error raised (as if it had been measured in the job)."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def measured(outcome: Optional[Outcome]) -> Optional[Result]:
    """The job's Result if it was measured already (None: an error, or not measured yet)."""
    return outcome if isinstance(outcome, Result) else None


def keep_measured(outcomes: Sequence[Optional[Outcome]]) -> None:
    """Results measured but not recorded in their folder (it could not be made): each kept
    in a fallback folder (rnnexp.app.recording), said in one line."""
    from rnnexp.app import recording
    from rnnexp.results import exit_codes

    for result in filter(None, map(measured, outcomes)):
        kept = recording.keep_elsewhere(result)
        exit_codes.note_unwritten()
        where = f"kept in {kept / RESULTS_FILE}" if kept else "lost: no folder would take it"
        err_console.print(f"[red]error:[/] {result.label}: its folder could not be made — the "
                          f"result is {where}", highlight=False, soft_wrap=True)
