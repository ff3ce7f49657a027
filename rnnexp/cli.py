"""`python -m rnnexp`: the Hydra app. Glue only — config checks, the job, the sinks."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.markup import escape

from rnnexp import config_check, fastrnns_json, isolation, job, schema, tracking
from rnnexp.errors import JobCrashed, RnnexpError
from rnnexp.report import RichProgress, console, err_console, print_error, results_table
from rnnexp.results import CRASHED, INTERRUPTED, UNSUPPORTED, Result
from rnnexp.tracking import naming

EXIT_USER_ERROR = 2


def fail(message: str) -> None:
    print_error(message)
    sys.exit(EXIT_USER_ERROR)


def _declined(cfg: DictConfig, choices: dict, overrides: list, reason: str) -> Result:
    return Result(choices=choices, overrides=overrides, config=job.plain_config(cfg),
                  status=UNSUPPORTED, reason=reason)


def run_job(cfg: DictConfig) -> str:
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra/")}
    overrides = list(hc.overrides.task)
    output_dir = Path(hc.runtime.output_dir)
    try:
        planned = job.plan(schema.validate(cfg), choices, overrides)
        label = "·".join(choices.get(k, "?") for k in ("model", "backend", "shape"))
        with RichProgress(label) as progress:
            result = isolation.execute(planned, progress=progress)  # fresh process for TorchScript
    except RnnexpError as err:
        if not multirun:
            fail(str(err))
        # In a sweep, a combination that cannot run is reported and the sweep goes on.
        crashed = isinstance(err, JobCrashed)
        err_console.print(f"[{'red' if crashed else 'yellow'}]"
                          f"{'crashed' if crashed else 'declined'}:[/] {escape(str(err))}",
                          highlight=False, soft_wrap=True)
        result = _declined(cfg, choices, overrides, str(err))
        if crashed:
            result.status = CRASHED
    except (Exception, KeyboardInterrupt) as err:
        # A crash or Ctrl-C is still recorded (a FAILED or KILLED run), then propagates.
        result = _declined(cfg, choices, overrides, f"{type(err).__name__}: {err}")
        result.status = INTERRUPTED if isinstance(err, KeyboardInterrupt) else CRASHED
        _finish(result, cfg, output_dir, Path(hc.sweep.dir) if multirun else None)
        if multirun:
            tracking.abort_sweep(result, tracking.config_of(cfg), Path(hc.sweep.dir))
        raise
    _finish(result, cfg, output_dir, Path(hc.sweep.dir) if multirun else None)
    return result.status


# Decorated by assignment so the plain function stays importable as rnnexp.cli.run_job:
# hydra/launcher=joblib pickles the task function, by reference only if it can find it.
hydra_main = hydra.main(version_base="1.3", config_path=str(config_check.CONF_DIR),
                        config_name=config_check.CONFIG_NAME)(run_job)


def _finish(result: Result, cfg: DictConfig, output_dir: Path, sweep_dir: Path | None) -> None:
    """The sinks: results.json, the table, fastrnns JSON, MLflow (a sweep's summary and
    fastrnns JSON come from its callback)."""
    naming.stamp(result)
    result.save(output_dir)
    console.print(results_table([result]))
    console.print(f"results: {output_dir / 'results.json'}", highlight=False)
    track = tracking.config_of(cfg)
    if track.fastrnns_json and sweep_dir is None:
        print(fastrnns_json.render([result], track.fastrnns_json), flush=True)
    tracking.record_job(result, output_dir, track, sweep_dir)


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
