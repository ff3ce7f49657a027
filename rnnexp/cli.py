"""`python -m rnnexp`: the Hydra app. Glue only — the config checked once, the job run, its
result handed to the sinks."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from rnnexp import config_check, placement, preemption, runner, schema, sinks
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.report import RichProgress, err_console, print_error
from rnnexp.results import Result, label

EXIT_USER_ERROR = 2


def fail(message: str) -> None:
    print_error(message)
    sys.exit(EXIT_USER_ERROR)


def publish(targets: list[sinks.Sink], result: Result, output_dir: Path,
            sweep: sinks.Sweep | None) -> None:
    for sink in targets:
        sink.on_job(result, output_dir, sweep)


def run_job(cfg: DictConfig) -> str:
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra/")}
    overrides = list(hc.overrides.task)
    output_dir = Path(hc.runtime.output_dir)
    sweep = sinks.Sweep.load(Path(hc.sweep.dir).resolve()) if multirun else None
    if sweep is not None and hc.job.num in sweep.skip_jobs:
        err_console.print(f"skipped: {label(choices)} was measured earlier in {sweep.dir} "
                          "(resume=true)", highlight=False, markup=False)
        return "skipped"
    device_lock = contextlib.nullcontext()
    try:
        config = config_check.validated(overrides) or schema.validate(cfg)
        targets = sinks.build(OmegaConf.to_container(cfg.sinks, resolve=True))
        if sweep is not None:  # parallel jobs divide the machine (one timing job per device)
            config, device_lock = placement.in_sweep(
                config, hc.job.num, OmegaConf.to_container(hc.launcher, resolve=True),
                sweep.jobs, sweep.path, overrides)
    except RnnexpError as err:
        fail(str(err))
    preemption.install()  # the scheduler's signals stop the measurement, not the recording
    try:
        try:
            with device_lock, RichProgress(label(choices, ("model", "backend", "shape"))) \
                    as progress:
                result = runner.run(config, choices, overrides, progress, output_dir)
        finally:
            preemption.settle()
    except preemption.Killed as err:
        # Stopped by the scheduler: recorded KILLED with the reason; the sweep goes on.
        err_console.print(f"[red]{escape(str(err))}[/]", highlight=False)
        result = runner.not_run(config, choices, overrides, err)
        publish(targets, result, output_dir, sweep)
        return result.status
    except RnnexpError as err:
        if not multirun:
            fail(str(err))
        # In a sweep, a combination that cannot run is reported and the sweep goes on.
        crashed = isinstance(err, JobCrashed)
        err_console.print(f"[{'red' if crashed else 'yellow'}]"
                          f"{'crashed' if crashed else 'declined'}:[/] {escape(str(err))}",
                          highlight=False, soft_wrap=True)
        result = runner.not_run(config, choices, overrides, err)
    except (Exception, KeyboardInterrupt) as err:
        # A crash or Ctrl-C is still recorded (a FAILED or KILLED run), then propagates.
        result = runner.not_run(config, choices, overrides, err)
        publish(targets, result, output_dir, sweep)
        if sweep is not None:
            for sink in targets:
                sink.on_abort(sweep, result)
        raise
    publish(targets, result, output_dir, sweep)
    return result.status


# Decorated by assignment so the plain function stays importable as rnnexp.cli.run_job:
# hydra/launcher=joblib pickles the task function, by reference only if it can find it.
hydra_main = hydra.main(version_base="1.3", config_path=str(config_check.CONF_DIR),
                        config_name=config_check.CONFIG_NAME)(run_job)


def main() -> None:
    schema.register()
    args, _ = get_args_parser().parse_known_args()
    informational = args.help or args.hydra_help or args.info or args.cfg or \
        args.shell_completion
    if not informational:
        try:
            config_check.check(args.overrides, multirun=args.multirun)
        except RnnexpError as err:
            fail(str(err))
    hydra_main()
