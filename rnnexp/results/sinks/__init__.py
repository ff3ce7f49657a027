"""Where results go: a small protocol, implemented by the console table, results.json,
fastrnns JSON and MLflow, chosen in config (`sinks=[console,json,mlflow]`, `+sinks=csv`).

A sink is one module with a `Sink` subclass and one YAML in conf/sinks/ naming it by
`_target_` with its options. It learns about a job's result with `on_job`, and about a sweep
(Hydra multirun) with `on_sweep_start` before any job, `on_sweep_end` after the last and
`on_abort` when the sweep is cut short; once every sink has ended the sweep,
`on_sweep_closed` (the console says there where everything went). Jobs may run in other
processes than the sweep's events (joblib workers, cluster nodes), so a sink keeps what its
jobs need from the sweep in `sweep.state[name]`, which travels through the sweep folder.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rnnexp.config import targets
from rnnexp.results import files
from rnnexp.results.result import Result

SWEEP_FILE = "sweep.json"


@dataclass
class Sweep:
    """A multirun: its folder, identity, and what each sink keeps for its jobs."""

    dir: str
    sweep_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    name: str = ""
    overrides: list[str] = field(default_factory=list)
    started: str = field(default_factory=lambda: datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    # How many jobs the sweep has (placement divides the machine between them), and those a
    # resumed sweep skips because its folder already holds their measurement.
    jobs: int = 0
    skip_jobs: list[int] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        files.write_text(self.path / SWEEP_FILE, json.dumps(asdict(self), indent=2))

    @classmethod
    def _read(cls, folder: Path) -> Optional[Sweep]:
        try:
            data = json.loads((Path(folder) / SWEEP_FILE).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    @classmethod
    def load(cls, folder: Path) -> Optional[Sweep]:
        """The sweep saved in `folder`, wherever the folder is now (see `found_in`)."""
        sweep = cls._read(folder)
        return sweep.found_in(Path(folder).resolve()) if sweep else None

    def found_in(self, here: Path) -> Sweep:
        """This sweep, read from `here`: a folder moved elsewhere is the same sweep (its jobs
        and summary go where it is now; its MLflow parent stays its own); a copy — the
        folder it was made in still holds this sweep — is a sweep of its own, with an
        identity derived from the original's and its place and no parent run yet, so that
        resuming or syncing it never touches the original's runs."""
        made_in = Path(self.dir)
        if made_in == here:
            return self
        original = Sweep._read(made_in)
        if original is not None and original.sweep_id == self.sweep_id and \
                not _same_file(made_in / SWEEP_FILE, here / SWEEP_FILE):
            self.sweep_id = hashlib.sha256(f"{self.sweep_id} {here}".encode()).hexdigest()[:32]
            self.state = {}
        self.dir = str(here)
        return self

    @classmethod
    def start(cls, folder: Path, overrides: Sequence[str]) -> Sweep:
        sweep = cls(dir=str(Path(folder).resolve()), overrides=list(overrides))
        sweep.name = sweep_name(overrides, sweep.started)
        return sweep


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def sweep_name(overrides: Sequence[str], started: str) -> str:
    """What a sweep varies, then when it started: `model=lstm,py backend=aten · 2026-11-24
    10:31:05`. Lists that cut the name short (MLflow's runs table shows ~20 characters)
    must start with what tells sweeps apart, not with a date they all share."""
    swept = [o for o in overrides if "," in o or "(" in o] or \
        [o for o in overrides if not o.startswith("sinks.")]
    swept = [_short(o) for o in swept]
    return " ".join([*swept, "·", started]) if swept else f"sweep · {started}"


def _short(override: str, keep: int = 3) -> str:
    """A long list cut to its first options and how many: the full list is a param."""
    key, sep, value = override.partition("=")
    items = value.split(",")
    if not sep or len(items) <= keep + 1 or "(" in value:
        return override
    return f"{key}={','.join(items[:keep])},… ({len(items)})"


Jobs = Sequence[tuple[Path, Result]]


class Sink:
    """Every hook is optional: a sink overrides the ones it needs."""

    name = "sink"

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """Raise ConfigError for an option value the sink would refuse; called by the config
        check, which builds no sink (a sink's __init__ checks the same)."""

    def on_sweep_start(self, sweep: Sweep) -> None:
        """Before the first job; may put what jobs need into `sweep.state[self.name]`."""

    def warm(self) -> None:
        """Load what `on_sweep_end` will need (its imports) ahead of time: called while a
        sweep's workers set up, when this process would only wait for them
        (rnnexp.app.callback.SweepRecord). A failure here is left to `on_sweep_end`."""

    def on_job(self, result: Result, output_dir: Path, sweep: Optional[Sweep]) -> None:
        """After each job (in the job's process), with the job's Hydra output folder."""

    def on_sweep_end(self, sweep: Sweep, jobs: Jobs) -> None:
        """After the last job, with every job's (folder, result) in job order."""

    def on_abort(self, sweep: Sweep, result: Result) -> None:
        """The sweep is cut short by this job (Ctrl-C, a signal)."""

    def on_sweep_closed(self, sweep: Sweep, jobs: Jobs) -> None:
        """After every sink's `on_sweep_end`: what the others wrote is there."""


def check(config: Mapping[str, Any]) -> None:
    """The sinks `build` would make can be made — every target a Sink class of rnnexp (or an
    extension), its options taken and in range — without making any."""
    for name, node in config.items():
        if not isinstance(node, Mapping):
            raise targets.ConfigError(f"sinks.{name}", f"must be a sink's config, got {node!r}",
                                      "e.g. sinks=[json,console,mlflow]")
        cls = targets.bind(f"sinks.{name}", node)
        cls.check_options(**targets.options_of(node))


def build(config: Mapping[str, Any]) -> list[Sink]:
    """The sinks named in `cfg.sinks` ({name: {_target_, options}}), in their listed order."""
    sinks = []
    for name, node in config.items():
        sink = targets.call(f"sinks.{name}", node)
        if not isinstance(sink, Sink):
            raise targets.ConfigError(f"sinks.{name}._target_", "is not an rnnexp Sink")
        sink.name = name
        sinks.append(sink)
    return sinks


def load_jobs(sweep_dir: Path, broken: Optional[list] = None) -> list[tuple[Path, Result]]:
    """(job folder, result) for every job of a sweep that saved one, in job order; the
    files that are no result (truncated, empty, foreign) go to `broken` if given."""
    from rnnexp.results.job_links import LINKS
    from rnnexp.results.result import RESULTS_FILE, BrokenResults

    found = []
    for path in Path(sweep_dir).rglob(RESULTS_FILE):
        if path.relative_to(sweep_dir).parts[0] == LINKS:
            continue  # the jobs by name, copied as folders: each is one of the numbered ones
        try:
            found.append((path.parent, Result.load_checked(path)))
        except BrokenResults as err:
            if broken is not None:
                broken.append(err)
    key = lambda item: [int(p) if p.isdigit() else p  # noqa: E731 — 2 before 10
                        for p in item[0].relative_to(sweep_dir).parts]
    return sorted(found, key=key)
