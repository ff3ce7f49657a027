"""`python -m rnnexp`: the Hydra app. Glue only — the command line gated before Hydra
builds anything (rnnexp.app.config_check.gate), the job run, its result handed to the sinks,
and the process's exit status (rnnexp.results.exit_codes). The checks of a run's and a sweep's
configs happen at Hydra's plugin points: docs/architecture.md."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

# Only what `--help` and an argument error need is imported here: torch, MLflow and SciPy come
# with the modules a run uses, imported by the functions that run it (a one-line error or the
# help page answers in well under a second).
from rnnexp.app import (  # cli_help: the resolver `rnnexp --help` lists the groups with
    cli_help,  # noqa: F401
    config_check,
)
from rnnexp.config import credentials, hydra_private, kernel_plugins, schema
from rnnexp.errors import (
    ONE_LINE_ERRORS,
    Interrupted,
    InterruptRecorded,
    JobCrashed,
    RnnexpError,
    crash_line,
    full_error,
    signal_name,
)
from rnnexp.results import exit_codes
from rnnexp.results.report import err_console, print_error
from rnnexp.run import signals

if TYPE_CHECKING:
    from rnnexp.app import launch
    from rnnexp.measure import job
    from rnnexp.results import sinks
    from rnnexp.results.result import Result

EXIT_USER_ERROR = exit_codes.USER_ERROR


def fail(message: str) -> NoReturn:
    print_error(message)
    sys.exit(EXIT_USER_ERROR)




def discard(output_dir: Path) -> None:
    """A run refused before it recorded anything leaves no folder behind."""
    from rnnexp.results.result import RESULTS_FILE

    if output_dir.is_dir() and not (output_dir / RESULTS_FILE).exists():
        shutil.rmtree(output_dir, ignore_errors=True)


def report_crash(name: str, err: BaseException) -> None:
    if full_error():
        traceback.print_exception(err)
    message = str(err) if isinstance(err, RnnexpError) else crash_line(err)
    err_console.print(f"[red]crashed:[/] {escape(name)}: {escape(message)}", highlight=False,
                      soft_wrap=True)


@dataclass
class Task:
    """What the task function knows of its job, from the config Hydra passes it."""

    cfg: DictConfig
    config: schema.Config
    choices: dict[str, str]
    overrides: list[str]
    output_dir: Path
    num: int
    multirun: bool
    sweep: Optional[sinks.Sweep]  # as its SweepRecord saved it (None: a single run)
    name: str

    @classmethod
    def of(cls, cfg: DictConfig, checked: Optional[schema.Config]) -> Task:
        from rnnexp.results import sinks
        from rnnexp.results.result import label

        hc = HydraConfig.get()
        choices = config_check.app_choices(hc.runtime.choices)
        overrides = list(hc.overrides.task)
        output_dir = Path(hc.runtime.output_dir)
        multirun = hc.mode == RunMode.MULTIRUN
        sweep = sinks.Sweep.load(Path(hc.sweep.dir).resolve()) if multirun else None
        if checked is None and not multirun:  # as RunCheck typed it, before the folder
            checked = config_check.CHECKED_RUN.take()
        try:  # typed here under a launcher that does not hand the sweeper's over
            config = checked or schema.validate(cfg)
        except RnnexpError as err:
            if not multirun:
                discard(output_dir)
            fail(str(err))
        num = hc.job.num if multirun else 0  # a single run has no job number
        return cls(cfg, config, choices, overrides, output_dir, num, multirun, sweep,
                   label(choices, ("model", "backend", "shape"), overrides=overrides))

    def skipped(self) -> bool:
        """A job a resumed sweep measured earlier says so and runs nothing."""
        from rnnexp.results.result import label

        if self.sweep is None or self.num not in self.sweep.skip_jobs:
            return False
        err_console.print(f"skipped: {label(self.choices, overrides=self.overrides)} was "
                          f"measured earlier in {self.sweep.dir} (resume=true)",
                          highlight=False, markup=False)
        return True

    def not_run(self, err: BaseException) -> Result:
        from rnnexp.run import execution

        return execution.not_run(self.config, self.choices, self.overrides, err)


@dataclass
class Prepared:
    """A job ready to measure: its sinks, and for a single run its plan; in a sweep, its
    config with its share of the machine and the device lock to hold."""

    targets: list[sinks.Sink]
    planned: Optional[job.Plan] = None
    device_lock: Any = contextlib.nullcontext()


def prepare(task: Task) -> Prepared:
    """A refusal here (no such device, a sink that cannot open its store) ends a single run
    in one line, exit 2, leaving no folder; the sweep's launcher declined its jobs earlier."""
    from rnnexp.machine import placement
    from rnnexp.measure import job
    from rnnexp.results import sinks

    try:
        planned = None
        if not task.multirun:  # refused before any sink opens its store
            planned = job.plan(task.config, task.choices, task.overrides)
            say_how_long(planned)
        prepared = Prepared(sinks.build(OmegaConf.to_container(task.cfg.sinks, resolve=True)),
                            planned)
        if task.sweep is not None:  # parallel jobs divide the machine (one per device)
            launcher = OmegaConf.to_container(HydraConfig.get().launcher, resolve=True)
            task.config, prepared.device_lock = placement.in_sweep(
                task.config, task.num, launcher, task.sweep.jobs, task.sweep.path,
                task.overrides)
    except RnnexpError as err:
        if not task.multirun:
            discard(task.output_dir)
        fail(str(err))
    return prepared


def measure(task: Task, prepared: Prepared, outcome: Optional[launch.Outcome]) -> Result:
    """The job's Result: measured here, or as rnnexp's launcher measured it with the
    sweep's other jobs (`outcome`)."""
    from rnnexp.app import launch
    from rnnexp.results.report import RichProgress
    from rnnexp.run import execution

    try:
        if outcome is not None:
            return launch.outcome_of(outcome)  # type: ignore[return-value]
        with prepared.device_lock, RichProgress(task.name) as progress:
            return execution.run(task.config, task.choices, task.overrides, progress,
                                 task.output_dir, planned=prepared.planned)
    finally:
        signals.settle()


def measured_or_declined(task: Task, prepared: Prepared,
                         outcome: Optional[launch.Outcome]) -> Result:
    """`measure`, with a job that could not be measured recorded as such: stopped by the
    scheduler (KILLED, the sweep goes on), declined, or crashed."""
    try:
        return measure(task, prepared, outcome)
    except signals.Killed as err:
        err_console.print(f"[red]{escape(str(err))}[/]", highlight=False)
        return task.not_run(err)
    except RnnexpError as err:
        if isinstance(err, JobCrashed):
            report_crash(task.name, err)
        elif not task.multirun:
            discard(task.output_dir)
            fail(str(err))
        else:
            # In a sweep, a combination that cannot run is reported and the sweep goes on.
            err_console.print(f"[yellow]declined:[/] {escape(str(err))}", highlight=False,
                              soft_wrap=True)
        return task.not_run(err)
    except Exception as err:  # a crash outside the job proper (planning, a backend)
        report_crash(task.name, err)
        return task.not_run(err)


def record_interrupted(task: Task, prepared: Prepared, err: BaseException,
                       measured: Optional[Result], recorded: bool) -> None:
    """Recorded KILLED (the sweep's parent too); the console shows the one line of main. A
    result measured before the signal is recorded as it is, never as killed, and one already
    recorded is left as it is (rnnexp.app.recording)."""
    from rnnexp.app import recording

    killed = task.not_run(err)
    if not recorded:
        recording.publish(prepared.targets, measured or killed, task.output_dir, task.sweep)
    if task.sweep is not None:
        for sink in prepared.targets:
            sink.on_abort(task.sweep, killed)


def run_job(cfg: DictConfig, outcome: Optional[launch.Outcome] = None,
            checked: Optional[schema.Config] = None) -> str:
    """The task function: the job whose config Hydra passes, measured and recorded.
    `checked`: its typed config, as the run's check made it (rnnexp's launcher hands it
    over); `outcome`: the job's Result (or the error that stopped it) when rnnexp's launcher
    measured it already, with the sweep's other jobs (rnnexp.app.launch)."""
    from rnnexp.app import launch, recording, stopping
    from rnnexp.measure import timing

    # What the sweep set up lives as long as it: the automatic full collections between jobs
    # skip it (one cost 0.3 s in a 16-job sweep).
    timing.freeze_once()
    signals.install()  # also in a launcher's own job process (submitit, joblib's workers)
    stopping.end_with_launcher()  # such a process ends with the sweep's launching process
    task = Task.of(cfg, checked)
    if task.skipped():
        return "skipped"
    prepared = prepare(task)
    signals.stop_job_on_scheduler()  # they stop the measurement, not the recording
    result, publishing = None, False
    try:
        result = measured_or_declined(task, prepared, outcome)
        publishing = True  # a signal now waits until it is recorded (recording.publish)
        recording.publish(prepared.targets, result, task.output_dir, task.sweep)
    except (KeyboardInterrupt, Interrupted) as err:
        measured = result or launch.measured(outcome)
        record_interrupted(task, prepared, err, measured, recorded=publishing)
        if isinstance(err, signals.Killed):  # the scheduler's: its batch task stops on it
            raise
        raise InterruptRecorded(signals.signum_of(err), measured is not None) from err
    if not task.multirun:
        exit_codes.set_pending(exit_codes.for_statuses([result.status]))
    return result.status


# Decorated by assignment so the plain function stays importable as rnnexp.app.cli.run_job:
# hydra/launcher=joblib pickles the task function, by reference only if it can find it.
hydra_main = hydra.main(version_base="1.3", config_path=str(config_check.CONF_DIR),
                        config_name=config_check.CONFIG_NAME)(run_job)


@contextlib.contextmanager
def hydra_raising() -> Iterator[None]:
    """Hydra prints its own errors (a folder it cannot create, a config it cannot load) as a
    trimmed traceback unless HYDRA_FULL_ERROR=1, its documented switch, when it raises them:
    set while Hydra runs, so that `main` prints them in one line. ONE_LINE_ERRORS marks it
    as rnnexp's, so that `full_error()` — here and in the processes a launcher starts —
    still reads the user's own choice."""
    if full_error():
        yield
        return
    saved = {k: os.environ.get(k) for k in ("HYDRA_FULL_ERROR", ONE_LINE_ERRORS)}
    os.environ.update({"HYDRA_FULL_ERROR": "1", ONE_LINE_ERRORS: "1"})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def say_how_long(planned: job.Plan) -> None:
    """A run of more than a few seconds says so before it starts (rnnexp.run.estimate)."""
    from rnnexp.run import estimate

    try:
        found = estimate.of_plan(planned)
    except Exception:  # no peaks to estimate with (a GPU without room): say nothing
        return
    if found is not None and found.seconds >= estimate.WORTH_SAYING_S:
        err_console.print(found.line(), highlight=False, markup=False, soft_wrap=True)


def informational(args: argparse.Namespace) -> bool:
    """--help, --hydra-help, --info, --cfg, --shell-completion: Hydra shows, nothing runs."""
    return bool(args.help or args.hydra_help or args.info or args.cfg or
                args.shell_completion)


def gate(args: argparse.Namespace) -> config_check.Gated:
    """The command line checked before Hydra builds anything (rnnexp.app.config_check.gate):
    the overrides Hydra must add (credentials a config file holds, hidden), and a single
    run's composition."""
    try:
        return config_check.gate(
            args.overrides, multirun=args.multirun, config_path=args.config_path,
            config_dir=args.config_dir, config_name=args.config_name)
    except RnnexpError as err:
        fail(str(err))


def main() -> None:
    # Credentials leave the tracking URI before Hydra records the command line anywhere.
    argv = credentials.take_from_process(sys.argv[1:])
    args, _ = hydra_private.args_parser().parse_known_args(argv)
    schema.register(with_deepbench=config_check.names_deepbench(args.overrides))
    kernel_plugins.register()  # model=<name> of every installed kernel plugin
    signals.install()
    if args.experimental_rerun is not None:  # it unpickles the file: code from anywhere
        fail("--experimental-rerun: refused — it loads a pickle, which can run any code; "
             "run the command line again instead")
    try:
        gated = None if informational(args) else gate(args)
        if gated is not None:
            argv += gated.hidden
        # hydra.main reads its command line from sys.argv, and from nowhere else: the one
        # write of it, with the credentials hidden and the gate's overrides added.
        sys.argv[1:] = argv
        with hydra_raising():
            if gated is not None and gated.composed is not None:  # composed once, by the gate
                config_check.run(gated, run_job, args.config_path, args.config_dir,
                                 args.config_name)
            else:  # a sweep, --help, --cfg ...: Hydra composes
                hydra_main()
    except (KeyboardInterrupt, Interrupted) as err:
        signum = signals.signum_of(err)
        print_error(f"interrupted by {signal_name(signum)} — " + (
            "the run had ended and is recorded as it ended"
            if isinstance(err, InterruptRecorded) and err.measured
            else "the current run is recorded as killed"))
        sys.exit(exit_codes.for_signal(signum))
    except RnnexpError as err:  # a run's or a sweep's check (callback, sweeper)
        fail(str(err))
    except OSError as err:  # once running: a folder or file that cannot be written
        if full_error():
            raise
        print_error(f"cannot write {err.filename or 'an output'} ({err.strerror or err}) — "
                    "stopped; what was recorded before is kept")
        sys.exit(exit_codes.OUTPUT_FAILED)
    except Exception as err:  # Hydra's own (a config it cannot load, ...)
        if full_error():
            raise
        fail(config_check.one_line(err))
    sys.exit(exit_codes.pending())
