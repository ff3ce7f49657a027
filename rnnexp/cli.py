"""`python -m rnnexp`: the Hydra app. Glue only — the config checked once, the job run, its
result handed to the sinks, and the process's exit status (rnnexp.exit_codes)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import threading
import traceback
from pathlib import Path
from typing import Optional

import hydra
from hydra._internal import utils as hydra_utils
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from rnnexp import (
    callback,
    cli_help,  # noqa: F401 — the resolver `rnnexp --help` lists the groups with
    compositions,
    config_check,
    credentials,
    estimate,
    execution,
    exit_codes,
    isolation,
    job,
    kernel_plugins,
    launch,
    placement,
    recording,
    schedule,
    schema,
    signals,
    sinks,
    timing,
)
from rnnexp.errors import (
    Interrupted,
    JobCrashed,
    RnnexpError,
    crash_line,
    full_error,
    signal_name,
)
from rnnexp.report import RichProgress, err_console, print_error
from rnnexp.results import CRASHED, INTERRUPTED, RESULTS_FILE, Result, label

EXIT_USER_ERROR = exit_codes.USER_ERROR

# Plans made before Hydra starts a single run (so a refusal leaves no run folder), by the
# job's overrides.
_PLANS: dict[tuple[str, ...], job.Plan] = {}


def fail(message: str) -> None:
    print_error(message)
    sys.exit(EXIT_USER_ERROR)


def exit_now(code: object) -> None:
    """End the program as the interpreter would — threads shut down (`threading._shutdown`:
    pools like concurrent.futures' are told to stop, then non-daemon threads joined), exit
    handlers run, output flushed — minus its teardown: freeing every module of torch, MLflow
    and pandas one by one took ~1.3 s after the last line of every run on a 2-core machine."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def discard(output_dir: Path) -> None:
    """A run refused before it recorded anything leaves no folder behind."""
    if output_dir.is_dir() and not (output_dir / RESULTS_FILE).exists():
        shutil.rmtree(output_dir, ignore_errors=True)


def report_crash(name: str, err: BaseException) -> None:
    if full_error():
        traceback.print_exception(err)
    message = str(err) if isinstance(err, RnnexpError) else crash_line(err)
    err_console.print(f"[red]crashed:[/] {escape(name)}: {escape(message)}", highlight=False,
                      soft_wrap=True)


def run_job(cfg: DictConfig, outcome: Optional[launch.Outcome] = None) -> str:
    """The task function. `outcome`: the job's Result (or the error that stopped it) when
    rnnexp's launcher measured it already, with the sweep's other jobs (rnnexp.launch)."""
    # What the sweep set up lives as long as it: the automatic full collections between jobs
    # skip it (one cost 0.3 s in a 16-job sweep).
    timing.freeze_once()
    signals.install()  # also in a launcher's own job process (submitit, joblib's workers)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    choices = config_check.app_choices(hc.runtime.choices)
    overrides = list(hc.overrides.task)
    output_dir = Path(hc.runtime.output_dir)
    sweep = sinks.Sweep.load(Path(hc.sweep.dir).resolve()) if multirun else None
    name = label(choices, ("model", "backend", "shape"), overrides=overrides)
    if sweep is not None and hc.job.num in sweep.skip_jobs:
        err_console.print(f"skipped: {label(choices, overrides=overrides)} was measured "
                          f"earlier in {sweep.dir} (resume=true)", highlight=False,
                          markup=False)
        return "skipped"
    device_lock = contextlib.nullcontext()
    try:
        config = config_check.typed(cfg, overrides)
        targets = sinks.build(OmegaConf.to_container(cfg.sinks, resolve=True))
        if sweep is not None:  # parallel jobs divide the machine (one timing job per device)
            config, device_lock = placement.in_sweep(
                config, hc.job.num, OmegaConf.to_container(hc.launcher, resolve=True),
                sweep.jobs, sweep.path, overrides)
    except RnnexpError as err:
        if not multirun:
            discard(output_dir)
        fail(str(err))
    signals.stop_job_on_scheduler()  # they stop the measurement, not the recording
    result = recorded = None
    try:
        try:
            try:
                if outcome is not None:
                    result = launch.outcome_of(outcome)
                else:
                    with device_lock, RichProgress(name) as progress:
                        result = execution.run(
                            config, choices, overrides, progress, output_dir,
                            planned=_PLANS.pop(config_check._key(overrides), None))
            finally:
                signals.settle()
        except signals.Killed as err:
            # Stopped by the scheduler: recorded KILLED with the reason; the sweep goes on.
            err_console.print(f"[red]{escape(str(err))}[/]", highlight=False)
            result = execution.not_run(config, choices, overrides, err)
        except RnnexpError as err:
            if isinstance(err, JobCrashed):
                report_crash(name, err)
            elif not multirun:
                discard(output_dir)
                fail(str(err))
            else:
                # In a sweep, a combination that cannot run is reported and the sweep goes on.
                err_console.print(f"[yellow]declined:[/] {escape(str(err))}", highlight=False,
                                  soft_wrap=True)
            result = execution.not_run(config, choices, overrides, err)
        except Exception as err:  # a crash outside the job proper (planning, a backend)
            report_crash(name, err)
            result = execution.not_run(config, choices, overrides, err)
        recorded = result  # a signal waits until it is recorded (recording.publish)
        recording.publish(targets, result, output_dir, sweep)
    except (KeyboardInterrupt, Interrupted) as err:
        # Recorded KILLED (the sweep's parent too); the console shows the one line below. A
        # result measured before the signal is recorded as it is, never as killed.
        killed = execution.not_run(config, choices, overrides, err)
        measured = recorded or result or launch.measured(outcome)
        if recorded is None:
            recording.publish(targets, measured or killed, output_dir, sweep)
        err.measured = measured is not None  # type: ignore[union-attr]
        if sweep is not None:
            for sink in targets:
                sink.on_abort(sweep, killed)
        err.recorded = True  # type: ignore[union-attr]
        raise
    if not multirun:
        exit_codes.set_pending(exit_codes.for_statuses([result.status]))
    return result.status


# Decorated by assignment so the plain function stays importable as rnnexp.cli.run_job:
# hydra/launcher=joblib pickles the task function, by reference only if it can find it.
hydra_main = hydra.main(version_base="1.3", config_path=str(config_check.CONF_DIR),
                        config_name=config_check.CONFIG_NAME)(run_job)


def _hydra_errors_in_one_line() -> None:
    """Hydra reports its own errors (a folder it cannot create, a config it cannot load) as
    a trimmed traceback in `run_and_report`, the one place every Hydra entry point passes
    through; replace that with the one-line error. HYDRA_FULL_ERROR=1 keeps Hydra's own."""
    original = hydra_utils.run_and_report
    if getattr(original, "rnnexp", False):  # replaced already (main called again in-process)
        return

    def run_and_report(func):
        if full_error():
            return original(_ending_the_sweep_on_error(func))
        try:
            return _ending_the_sweep_on_error(func)()
        except Exception as err:
            print_error(config_check.one_line(err))
            sys.exit(EXIT_USER_ERROR)

    run_and_report.rnnexp = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report


def _ending_the_sweep_on_error(func):
    """A sweep whose launch fails (no SLURM here, a launcher's error) ends its parent run
    FAILED with the reason, instead of leaving it RUNNING at the top of the MLflow list."""
    def run():
        try:
            return func()
        except Exception as err:
            callback.abort_active(Result(choices={}, overrides=[], config={}, status=CRASHED,
                                         reason=f"the sweep stopped: {crash_line(err)}"))
            raise
    return run


def _no_second_batch_check() -> None:
    """Hydra's BasicSweeper composes every job of a sweep before launching any, only to see
    that it composes (its launcher then composes each again); `config_check.check` has
    composed and validated every job already, so that pass goes (~0.065 s a job)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    BasicSweeper.validate_batch_is_legal = lambda self, batch: None


def plan_ahead(overrides: list[str]) -> None:
    """A single run is planned (device, backend, memory) before Hydra makes its folder."""
    user = config_check.user_overrides(overrides)
    config, choices = config_check.validated(user), config_check.choices(user)
    if config is not None and choices is not None:
        planned = _PLANS[config_check._key(user)] = job.plan(config, choices, user)
        say_how_long(planned)


def say_how_long(planned: job.Plan) -> None:
    """A run of more than a few seconds says so before it starts (rnnexp.estimate)."""
    try:
        found = estimate.of_plan(planned)
    except Exception:  # no peaks to estimate with (a GPU without room): say nothing
        return
    if found is not None and found.seconds >= estimate.WORTH_SAYING_S:
        err_console.print(found.line(), highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    schema.register(with_deepbench=any("deepbench" in arg for arg in sys.argv[1:]))
    kernel_plugins.register()  # model=<name> of every installed kernel plugin
    # Credentials leave the tracking URI before Hydra records the command line anywhere.
    sys.argv[1:] = credentials.take_from_process(sys.argv[1:])
    signals.install()
    args, _ = get_args_parser().parse_known_args()
    if args.experimental_rerun is not None:  # it unpickles the file: code from anywhere
        fail("--experimental-rerun: refused — it loads a pickle, which can run any code; "
             "run the command line again instead")
    informational = args.help or args.hydra_help or args.info or args.cfg or \
        args.shell_completion
    try:
        if not informational:
            try:
                checked, configs = config_check.check_hiding_credentials(
                    args.overrides, multirun=args.multirun, config_path=args.config_path,
                    config_dir=args.config_dir, config_name=args.config_name)
                sys.argv += checked[len(args.overrides):]  # credentials from config files
                args.overrides = checked
                if any(schedule.uses_workers(c) for c in configs):
                    isolation.prestart()  # imports in parallel with the rest of start-up
                if not args.multirun and len(configs) == 1:
                    plan_ahead(args.overrides)
                _no_second_batch_check()  # every job was composed and validated above
                compositions.install()  # the launcher reuses the compositions made above
            except RnnexpError as err:
                fail(str(err))
        _hydra_errors_in_one_line()
        hydra_main()
    except (KeyboardInterrupt, Interrupted) as err:
        signum = signals.signum_of(err)
        if not getattr(err, "recorded", False):  # outside any job: end the sweep's parent
            callback.abort_active(Result(choices={}, overrides=[], config={},
                                         status=INTERRUPTED,
                                         reason=f"interrupted ({signal_name(signum)})"))
        print_error(f"interrupted by {signal_name(signum)} — " + (
            "the run had ended and is recorded as it ended" if getattr(err, "measured", False)
            else "the current run is recorded as killed"))
        sys.exit(exit_codes.for_signal(signum))
    sys.exit(exit_codes.pending())
