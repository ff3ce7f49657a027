"""The search loop: Optuna asks for cells, windows measure them against the baseline, Optuna
is told what each cost — or which constraint it failed — until the budget of cells is spent.

- What guides the search is the conservative end of each speedup's 95% interval (the lower
  bound: a cell measured noisily is not taken for a fast one), with peak memory (and, on
  request, the time to a first result) as further objectives.
- A cell the plan refuses, that fails verification, recompiles while timed, crashes or runs
  out of memory is a failed constraint (Optuna's `Trial.set_constraint`) with its reason; it is
  never measured again. Any cell proposed a second time is answered from its first
  measurement (`repeat_of`), not measured again.
- The study lives in an SQLite file in the search's folder (`study.db`, Optuna's RDB
  storage) with the space it searches: a search stopped part-way goes on from it, and a
  window that never finished is asked again.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Optional, Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from rnnexp.app.search import precheck, window
from rnnexp.app.search.space import Params, Space
from rnnexp.errors import RnnexpError
from rnnexp.results.result import OK

STUDY = "rnnexp-search"
DB = "study.db"
# Objectives by name: (direction, what it is).
OBJECTIVES = {
    # The log of the speedup: cells span orders of magnitude (a thread count that
    # oversubscribes can be 100× slower), and a ratio's natural scale is its logarithm.
    "time": ("maximize", "log speedup vs the baseline, lower end of its 95% interval"),
    "memory": ("minimize", "peak memory of the larger phase, MiB above its start"),
    "compile": ("minimize", "a fresh process's time to its first result, s"),
}
SAMPLERS = ("gp", "tpe", "random", "default")
FEASIBLE, INFEASIBLE = 0.0, 1.0
CONSTRAINT = "ran_and_verified"  # > 0: refused, failed verification, crashed, out of memory
# Proposals of cells already tried, in a row, before the loop draws an untried cell itself
# (the sampler has nothing new to say; each proposal costs a model fit).
MAX_REPEATS = 3
# The last window takes the neighbours of this many of the best cells.
CENTERS = 3


@dataclass
class Settings:
    objectives: tuple[str, ...] = ("time", "memory")
    budget: int = 12  # distinct cells measured (cells their plan refuses cost nothing)
    batch: int = 4  # cells per window (the baseline besides)
    sampler: str = "gp"
    seed: Optional[int] = None
    startup: int = 4  # cells drawn at random before the model guides (gp, tpe)
    # A refusal names what would run instead ("— use backend=aten or its cell loop
    # model=jit"): the first such cell of the space is proposed next.
    follow_advice: bool = True
    # The first window screens the baseline's neighbours (`Search.neighbours`): every key's
    # effect seen from a cell known to run, and every option that runs in few cells
    # measured where it runs, before a model guides the sampler.
    screen: bool = True
    # The last window measures the best cell's neighbours: a model fitted to a dozen cells
    # misses what one step finds.
    refine: bool = True


def constraints(trial: FrozenTrial) -> Sequence[float]:
    """The trial's constraint values (> 0: failed), as it was told them."""
    return list(trial.constraints.values()) or [FEASIBLE]


def make_sampler(settings: Settings) -> optuna.samplers.BaseSampler:
    if settings.sampler in ("default", "tpe"):  # what Optuna picks when given none: TPE
        return optuna.samplers.TPESampler(seed=settings.seed)
    if settings.sampler == "gp":
        # The objective is a noisy measurement: the GP fits a noise term.
        return optuna.samplers.GPSampler(seed=settings.seed, n_startup_trials=settings.startup,
                                         deterministic_objective=False,
                                         warn_independent_sampling=False)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=settings.seed)
    raise RnnexpError(f"--sampler {settings.sampler}: choose one of {', '.join(SAMPLERS)}")


def storage_url(folder: Path) -> str:
    return f"sqlite:///{(folder / DB).resolve()}"


def open_study(space: Space, folder: Path, settings: Settings,
               storage: Any = None) -> optuna.Study:
    """The search's study in `folder` (created, or loaded to go on); the space and the
    objectives must be those it was started with."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir(parents=True, exist_ok=True)
    url = storage or storage_url(folder)
    directions = [OBJECTIVES[o][0] for o in settings.objectives]
    study = optuna.create_study(storage=url, study_name=STUDY, load_if_exists=True,
                                sampler=make_sampler(settings), directions=directions)
    described = {"fixed": space.fixed, "dimensions": {d.name: [str(v) for v in d.values()]
                                                      for d in space.dimensions},
                 "baseline": space.baseline, "objectives": list(settings.objectives)}
    earlier = study.user_attrs.get("space")
    if earlier is None:
        study.set_user_attr("space", described)
    elif earlier != described:
        changed = sorted(k for k in described if earlier.get(k) != described[k])
        raise RnnexpError(f"{folder}: holds a search of another space ({', '.join(changed)} "
                          "differ) — give its command line unchanged to go on, or start a new "
                          "search in a new folder")
    return study


@dataclass
class Told:
    """What a trial was told: its values and constraint, and what is shown of it."""

    params: Params
    values: list[float]
    constraint: float
    attrs: dict[str, Any] = field(default_factory=dict)


def _neutral(objective: str, base: Optional[window.Measured]) -> float:
    """What an infeasible cell is told for an objective: the baseline's level (no gain
    known), so that the models of the objectives are not bent by cells that never ran."""
    if objective == "time":
        d = base.difference if base else None
        return math.log(d.speedup) if d is not None and window.finite(d.speedup) and \
            d.speedup > 0 else 0.0
    r = base.result if base else None
    value = (window.peak_mb(r) if objective == "memory" else window.compile_s(r)) if r else None
    return value if window.finite(value) else 0.0


def judged(params: Params, m: window.Measured, base: Optional[window.Measured],
           objectives: Sequence[str]) -> Told:
    """A measured cell as Optuna is told it: values, or a failed constraint with its reason."""
    r = m.result
    attrs: dict[str, Any] = {"window": str(m.folder.parent.parent.name) if m.folder else "",
                             "measured": True}
    if r is None:
        reason = "the window recorded no result for it"
        return Told(params, [_neutral(o, base) for o in objectives], INFEASIBLE,
                    {**attrs, "status": "missing", "reason": reason})
    attrs.update(status=r.status, reason=r.reason[:500])
    d = m.difference
    if r.status != OK:
        return Told(params, [_neutral(o, base) for o in objectives], INFEASIBLE, attrs)
    if d is None or not window.finite(d.speedup):
        raise _Unpaired("not paired with the baseline (its window was split)")
    attrs.update(speedup=d.speedup, low=d.low, high=d.high, method=d.method,
                 median_ms=window.phase(r).median_ms)
    bound = d.low if window.finite(d.low) else d.speedup
    if not window.finite(d.low):
        attrs["interval"] = d.why_not or "none"
    values = []
    for o in objectives:
        if o == "time":
            values.append(math.log(bound))
            continue
        v = window.peak_mb(r) if o == "memory" else window.compile_s(r)
        attrs["peak_mb" if o == "memory" else "compile_s"] = v
        values.append(v if window.finite(v) else _neutral(o, base))
    return Told(params, values, FEASIBLE, attrs)


class _Unpaired(Exception):
    """A cell timed outside its baseline's window: told as failed (it may come again)."""


class Search:
    """One search: its space, folder, study, and how it measures."""

    def __init__(self, space: Space, folder: Path, settings: Settings,
                 measure: window.Measure = window.measure,
                 refusal: Callable[[Sequence[str]], Optional[precheck.Refusal]] =
                 precheck.refusal,
                 on_told: Optional[Callable[[FrozenTrial, Optional[window.Measured],
                                             Optional[precheck.Refusal]], None]] = None,
                 say: Callable[[str], None] = lambda _: None,
                 storage: Any = None):
        self.space, self.folder, self.settings = space, Path(folder), settings
        self.measure, self.refusal, self.on_told, self.say = measure, refusal, on_told, say
        self.study = open_study(space, self.folder, settings, storage)
        self.rng = random.Random(settings.seed)
        self.windows = 0

    # What the study holds already.
    def first_of(self) -> dict[tuple[str, ...], FrozenTrial]:
        """Each cell tried, by its first (non-repeated) trial."""
        out: dict[tuple[str, ...], FrozenTrial] = {}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "repeat_of" not in t.user_attrs:
                out.setdefault(self.space.key(t.params), t)
        return out

    @property
    def tried(self) -> int:
        """Distinct cells tried: measured, or refused by their plan."""
        return len(self.first_of())

    @property
    def measured(self) -> int:
        """Distinct cells measured in a window (what the budget counts)."""
        return sum(bool(t.user_attrs.get("measured")) for t in self.first_of().values())

    def _abandon_unfinished(self) -> None:
        """Trials asked by a search that stopped before their window ended: failed, so their
        cells may be asked again."""
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self.study.tell(t.number, state=TrialState.FAIL)

    def run(self) -> None:
        self._abandon_unfinished()
        self.windows = len(list(self.folder.glob("w[0-9]*")))
        if not self.study.trials:  # the baseline is the first cell: it is measured anyway
            self.study.enqueue_trial(self.space.baseline)
            if self.settings.screen:
                room = min(self.settings.batch, self.settings.budget - 1)
                for cell in self.neighbours(self.space.baseline, room):
                    self.study.enqueue_trial(cell, user_attrs={"screens": "baseline"})
        while self.measured < self.settings.budget:
            room = self.settings.budget - self.measured
            if self.settings.refine and room <= self.settings.batch:
                self._enqueue_neighbours(room)
            asked = self._ask_batch(room)
            if not asked:
                self.say("every cell of the space has been tried")
                return
            self._measure(asked)

    def _ask_batch(self, room: int) -> list[tuple[optuna.Trial, Params]]:
        """Up to `batch` new cells (no more than `room`); refused ones are told at once."""
        known = self.first_of()
        batch: list[tuple[optuna.Trial, Params]] = []
        keys: set[tuple[str, ...]] = set()
        base = self.space.key(self.space.baseline)
        repeats = 0

        def full() -> bool:  # the baseline is in every window anyway: it takes no place
            return len([k for k in keys if k != base]) >= self.settings.batch or \
                len(batch) >= room or len(known) + len(batch) >= self.space.size

        while not full():
            if repeats >= MAX_REPEATS:
                self._enqueue_untried(known, keys)
                repeats = 0
            trial = self.study.ask(self.space.distributions())
            params = dict(trial.params)
            key = self.space.key(params)
            if key in known:
                self._repeat(trial, known[key])
                repeats += 1
                continue
            if key in keys:  # asked twice for one window: the second waits for the first
                self.study.tell(trial, state=TrialState.FAIL)
                repeats += 1
                continue
            refused = self.refusal(self.space.command_line(params))
            if refused is not None:
                self._tell_refused(trial, params, refused)
                known = self.first_of()
                continue
            batch.append((trial, params))
            keys.add(key)
        return batch

    def _enqueue_untried(self, known: dict, pending: set) -> None:
        """The sampler keeps proposing cells it has: an untried cell drawn at random."""
        untried = [p for p in self.space.cells()
                   if self.space.key(p) not in known and self.space.key(p) not in pending]
        if untried:
            self.study.enqueue_trial(self.rng.choice(untried))

    def _repeat(self, trial: optuna.Trial, first: FrozenTrial) -> None:
        trial.set_user_attr("repeat_of", first.number)
        trial.set_constraint(CONSTRAINT, constraints(first)[0])
        self.study.tell(trial, list(first.values))

    def _tell_refused(self, trial: optuna.Trial, params: Params,
                      refused: precheck.Refusal) -> None:
        folder = None
        if refused.result is not None:
            folder = precheck.record(refused, self.folder / "refused" / str(trial.number))
        told = Told(params, [self._level(o) for o in self.settings.objectives], INFEASIBLE,
                    {"status": "unsupported", "reason": refused.reason[:500],
                     "measured": False})
        frozen = self._tell(trial, told)
        self.say(f"#{trial.number} {self.space.label(params)}: refused — {refused.reason}")
        advised = self.advised(params, refused.reason) if self.settings.follow_advice else None
        if advised is not None:
            self.study.enqueue_trial(advised, user_attrs={"advised_by": trial.number})
        if self.on_told:
            m = window.Measured(self.space.overrides(params), refused.result, folder=folder)
            self.on_told(frozen, m if refused.result else None, refused)

    def _enqueue_neighbours(self, room: int) -> None:
        """The last window: the neighbours of the best cells so far (the best's first where
        nothing tells them apart), the most promising first: the best may be two steps from
        the fastest cell, and one of the runners-up one step."""
        best = ranked(self.study)[:CENTERS]
        cells: dict[tuple[str, ...], tuple[Params, int]] = {}
        for t in best:
            for cell in self.neighbours(dict(t.params), room + len(self.space.dimensions)):
                cells.setdefault(self.space.key(cell), (cell, t.number))
        order = promise(self.first_of().values())
        for cell, of in sorted(cells.values(), key=lambda c: order(c[0]))[:room]:
            self.study.enqueue_trial(cell, user_attrs={"neighbour_of": of})

    def neighbours(self, center: Params, room: int) -> list[Params]:
        """Up to `room` untried cells one key away from `center`, that their plan accepts.

        Spaces of models, backends and settings are conditional: an option may run under
        few of the others (an nn module under ATen alone, a fuser only where LLVM is built).
        Such an option's cells are a sliver of the grid and its marginals look bad (refused
        almost everywhere), so a sampler that draws keys independently seldom measures it
        where it runs. A neighbour its plan refuses is therefore taken where its refusal's
        advice says it runs (`advised`: the advised key changed too), and these come first;
        then one new value of each key in turn, keys with fewer values first. Last, what is
        known of their values orders them (`promise`, a stable sort): a cell with a value
        never measured comes first, then the others by what the cells measured so far
        predict of them, so that a value already seen poor is tried last."""
        known = self.first_of()
        seen = set(known) | {self.space.key(center)}
        moved: list[Params] = []
        plain: list[list[Params]] = []
        for d in sorted(self.space.dimensions, key=lambda d: len(d.values())):
            mine: list[Params] = []
            for v in d.values():
                cell = {**center, d.name: v}
                if self.space.key(cell) in seen:
                    continue
                seen.add(self.space.key(cell))
                refused = self.refusal(self.space.command_line(cell))
                if refused is None:
                    mine.append(cell)
                    continue
                fixed = self.advised(cell, refused.reason, seen)
                if fixed is not None and self.refusal(self.space.command_line(fixed)) is None:
                    seen.add(self.space.key(fixed))
                    moved.append(fixed)
            plain.append(mine)
        in_turn = [c for row in itertools.zip_longest(*plain) for c in row if c is not None]
        return sorted([*moved, *in_turn], key=promise(known.values()))[:room]

    def advised(self, params: Params, reason: str,
                exclude: Collection[tuple[str, ...]] = ()) -> Optional[Params]:
        """The first cell a refusal's advice names (its `key=value`s after " — "), with the
        rest of the refused cell kept, if the space has it and it was not tried (nor is
        in `exclude`)."""
        _, _, advice = reason.partition(" — ")
        known = set(self.first_of()) | set(exclude)
        for token in re.findall(r"[\w.]+=[\w.-]+", advice):
            for d in self.space.dimensions:
                options = [v for v in d.values() if token in d.overrides(v)]
                if not options:
                    continue
                cell = {**params, d.name: options[0]}
                if self.space.key(cell) not in known:
                    return cell
        return None

    def _level(self, objective: str) -> float:
        """The baseline's measured value of an objective (neutral for refused cells)."""
        base = self.first_of().get(self.space.key(self.space.baseline))
        if objective == "time":
            return base.values[0] if base else 0.0
        name = "peak_mb" if objective == "memory" else "compile_s"
        value = base.user_attrs.get(name) if base else None
        return float(value) if window.finite(value) else 0.0

    def _tell(self, trial: optuna.Trial, told: Told) -> FrozenTrial:
        for k, v in told.attrs.items():
            trial.set_user_attr(k, v)
        trial.set_user_attr("cell", self.space.label(told.params))
        trial.set_constraint(CONSTRAINT, told.constraint)
        return self.study.tell(trial, told.values)

    def _measure(self, asked: list[tuple[optuna.Trial, Params]]) -> None:
        base_params = self.space.baseline
        base_key = self.space.key(base_params)
        cells = [self.space.overrides(p) for _, p in asked if self.space.key(p) != base_key]
        folder = self.folder / f"w{self.windows:03d}"
        self.windows += 1
        self.say(f"window {folder.name}: {len(cells)} cell(s) and the baseline, interleaved")
        w = self.measure(cells, self.space.overrides(base_params), self.space.fixed, folder)
        by_key = {tuple(m.overrides): m for m in w.cells}
        by_key.setdefault(base_key, w.baseline)
        for trial, params in asked:
            m = by_key[self.space.key(params)]
            try:
                told = judged(params, m, w.baseline, self.settings.objectives)
            except _Unpaired as why:
                trial.set_user_attr("reason", str(why))
                self.study.tell(trial, state=TrialState.FAIL)
                self.say(f"#{trial.number} {self.space.label(params)}: {why}; asked again "
                         "later")
                continue
            frozen = self._tell(trial, told)
            self.say(line(frozen))
            if self.on_told:
                self.on_told(frozen, m, None)


def line(t: FrozenTrial) -> str:
    """One trial, one line."""
    a = t.user_attrs
    head = f"#{t.number} {a.get('cell', '')}: "
    if constraints(t)[0] > 0:
        return head + f"{a.get('status', 'failed')} — {a.get('reason', '')}"
    text = head + f"{a['speedup']:.3f}× vs baseline"
    if window.finite(a.get("low")):
        text += f" (95% {a['low']:.3f}–{a['high']:.3f})"
    if window.finite(a.get("peak_mb")):
        text += f", peak {a['peak_mb']:.1f} MiB"
    return text


def feasible(study: optuna.Study) -> list[FrozenTrial]:
    """Each cell measured and feasible, once (its first trial)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "repeat_of" not in t.user_attrs and constraints(t)[0] <= 0]


def bound(t: FrozenTrial) -> float:
    """A measured cell's speedup, by the conservative end of its interval where it has one."""
    low = t.user_attrs.get("low")
    return low if window.finite(low) else t.user_attrs.get("speedup", -math.inf)


def promise(trials: Collection[FrozenTrial]) -> Callable[[Params], tuple[int, float]]:
    """What the measured cells say of an untried cell, as a sort key (lower: try first).

    A cell with a value never measured comes first (nothing is known of it); the others by
    the log speedup (lower bound) that a main-effects model predicts for them — each value
    of each key adding its own effect, fitted by least squares to the feasible measured
    cells (`numpy.linalg.lstsq`; effects it cannot tell apart are shared, the minimum-norm
    solution). It is the classic follow-up to a one-factor-at-a-time screen, and it sees a
    value that was poor wherever it was measured as poor anywhere else."""
    measured = [t for t in trials if t.user_attrs.get("measured")]  # refusals: not speed
    seen = {(k, v) for t in measured for k, v in t.params.items()}
    fit = [t for t in measured if constraints(t)[0] <= 0 and bound(t) > 0]
    columns = sorted({(k, v) for t in fit for k, v in t.params.items()}, key=str)
    at = {c: i for i, c in enumerate(columns)}
    effect = np.zeros(len(columns))
    if fit:
        x = np.zeros((len(fit), len(columns)))
        for row, t in enumerate(fit):
            for c in t.params.items():
                x[row, at[c]] = 1.0
        y = np.log([bound(t) for t in fit])
        effect = np.linalg.lstsq(x, y, rcond=None)[0]

    def key(cell: Params) -> tuple[int, float]:
        if any(c not in seen for c in cell.items()):
            return (0, 0.0)
        return (1, -sum(effect[at[c]] for c in cell.items() if c in at))
    return key


def ranked(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible cells, fastest first by the conservative end of their interval."""
    return sorted(feasible(study), key=lambda t: (-bound(t), t.number))


def pareto(study: optuna.Study) -> list[FrozenTrial]:
    """The feasible trials no other feasible trial beats in every objective."""
    seen, out = set(), []
    for t in sorted(study.best_trials, key=lambda t: t.number):
        if constraints(t)[0] <= 0 and "repeat_of" not in t.user_attrs and \
                t.user_attrs.get("cell") not in seen:
            seen.add(t.user_attrs.get("cell"))
            out.append(t)
    return out
