"""The search's one way to measure: some cells and the baseline in one interleaved window,
each cell's speedup against the baseline with its interval.

`measure` runs the real sweep — `python -m rnnexp -m` in a fresh process — over an explicit
list of jobs. Hydra's sweep syntax expands products, so each job is an option of a `trial`
config group written for the window (`<folder>/conf/trial/<name>.yaml`, passed with
`--config-dir`, chosen with `+trial=base,c0,c1,...`): each option sets its cell's groups
(`defaults: [override /backend: inductor]`) and fields. The window's jobs are recorded as
any sweep's are (`<folder>/sweep/<job>/results.json`, sinks=[json]: the search logs them to
MLflow itself); the sweep's own launcher measures them together in interleaved rounds
(bench.window is raised to hold them all). Each result is then paired by round with the
baseline's (rnnexp.analysis.significance.paired), the way `rnnexp compare` judges jobs of
one window.

Nothing else in the search measures: replaying a recorded grid (rnnexp.app.search.replay)
swaps this function for one that reads the recording.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from rnnexp.analysis import significance
from rnnexp.analysis.significance import Difference
from rnnexp.app import config_check
from rnnexp.errors import Interrupted, RnnexpError
from rnnexp.results import exit_codes
from rnnexp.results.result import RESULTS_FILE, PhaseStats, Result

BASE = "base"  # the baseline's option of the trial group
LOG = "measure.log"  # the sweep's own output, kept beside its folder


@dataclass
class Measured:
    """One cell of a window: its result and its speedup against the window's baseline."""

    overrides: list[str]
    result: Optional[Result]  # None: the sweep recorded nothing for it
    difference: Optional[Difference] = None  # None: not timed, or not paired with the base
    folder: Optional[Path] = None  # the job's folder (results.json, .hydra/)


@dataclass
class Window:
    baseline: Measured
    cells: list[Measured]
    folder: Path


# measure(cells, baseline, fixed, folder): the signature a replay stands in for.
Measure = Callable[[Sequence[Sequence[str]], Sequence[str], Sequence[str], Path], Window]


def phase(result: Result) -> PhaseStats:
    """What the search times: forward+backward per iteration, else the forward alone."""
    total = result.phase("total")
    return total if total.timed else result.phase("forward")


def paired(base: Result, cell: Result) -> Optional[Difference]:
    """The cell against the baseline, paired by round, when both were timed in one window."""
    if not (base.interleaving and cell.interleaving and
            base.interleaving.window == cell.interleaving.window):
        return None
    b, c = phase(base), phase(cell)
    if not (b.timed and c.timed and b.rounds_ms and c.rounds_ms):
        return None
    # Where the two shared worker processes (a block), they pair by process too.
    return significance.paired(
        significance.Side(b.rounds_ms, workers=base.interleaving.workers),
        significance.Side(c.rounds_ms, workers=cell.interleaving.workers))


def trial_option(overrides: Sequence[str]) -> str:
    """A `trial` group option that sets these overrides: groups through the defaults list,
    fields as values (typed as Hydra's grammar reads them)."""
    parser = OverridesParser.create()
    groups, values = [], OmegaConf.create()
    for o in parser.parse_overrides(list(overrides)):
        key = o.get_key_element()
        if config_check.group_options(key):
            groups.append(f"override /{key}: {o.get_value_element_as_str()}")
        else:
            OmegaConf.update(values, key, o.value(), force_add=True)
    text = "# @package _global_\n"
    if groups:
        text += "defaults:\n" + "".join(f"  - {g}\n" for g in groups)
    body = OmegaConf.to_yaml(values)
    return text + (body if values else "")


def command(names: Sequence[str], fixed: Sequence[str], folder: Path) -> list[str]:
    return [sys.executable, "-m", "rnnexp", "-m", "--config-dir", str(folder / "conf"),
            f"+trial={','.join(names)}", *fixed, f"hydra.sweep.dir={folder / 'sweep'}",
            "sinks=[json]", f"bench.window={len(names)}"]


def run_sweep(argv: Sequence[str], folder: Path) -> None:
    """The sweep in a fresh process, its output in LOG; a refusal of the whole sweep is one
    line, a signal stops the search as it stopped the sweep."""
    with open(folder / LOG, "w") as log:
        done = subprocess.run(list(argv), stdout=log, stderr=subprocess.STDOUT)
    if done.returncode in (exit_codes.OK, exit_codes.JOB_FAILED):
        return  # a failed job is a result (its status says why)
    if done.returncode in (exit_codes.SIGINT, -2):
        raise KeyboardInterrupt
    if done.returncode > 128:
        raise Interrupted(done.returncode - 128)
    lines = [ln for ln in (folder / LOG).read_text(errors="replace").splitlines() if ln.strip()]
    raise RnnexpError(f"the window's sweep exited {done.returncode}: "
                      f"{lines[-1].strip() if lines else 'no output'} (log: {folder / LOG})")


def results(folder: Path) -> dict[str, tuple[Result, Path]]:
    """The sweep's results by trial option."""
    out = {}
    for path in sorted((folder / "sweep").glob(f"*/{RESULTS_FILE}")):
        result = Result.load_checked(path)
        out[result.choices.get("trial", "")] = (result, path.parent)
    return out


def measure(cells: Sequence[Sequence[str]], baseline: Sequence[str], fixed: Sequence[str],
            folder: Path) -> Window:
    """`cells` (each its own overrides) and `baseline` measured in one interleaved window of
    a real sweep (`fixed`: the overrides every job shares), recorded under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conf" / "trial").mkdir(parents=True, exist_ok=True)
    names = [BASE, *(f"c{i}" for i in range(len(cells)))]
    for name, overrides in zip(names, [baseline, *cells], strict=True):
        (folder / "conf" / "trial" / f"{name}.yaml").write_text(trial_option(overrides))
    run_sweep(command(names, fixed, folder), folder)
    found = results(folder)

    def of(name: str, overrides: Sequence[str]) -> Measured:
        result, where = found.get(name, (None, None))
        return Measured(list(overrides), result, folder=where)

    base = of(BASE, baseline)
    out = [of(n, c) for n, c in zip(names[1:], cells, strict=True)]
    if base.result is not None:
        for m in [base, *out]:
            if m.result is not None:
                m.difference = paired(base.result, m.result)
    return Window(base, out, folder)


def peak_mb(result: Result) -> Optional[float]:
    """The larger phase's peak memory (MiB above the phase's start), if measured."""
    mem = result.memory
    values = [v for v in ((mem.forward_mb, mem.backward_mb) if mem else ()) if v is not None]
    return max(values) if values else None


def compile_s(result: Result) -> Optional[float]:
    """A fresh process's time to its first result (build, scripting or compiling, first
    call)."""
    cost = result.compile_cost
    return cost.time_to_first_s if cost else None


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
