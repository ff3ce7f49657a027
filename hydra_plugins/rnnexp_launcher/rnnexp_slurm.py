"""rnnexp's SLURM launcher (`hydra/launcher=rnnexp_slurm`): Hydra's public Launcher API around
rnnexp.app.slurm.

The sweep's jobs go to one SLURM job array through submitit (its sbatch script, its pickled
call, its logs): each task of the array measures a shard — `windows_per_task` interleaved
windows of consecutive jobs — with rnnexp's own launcher, on one node; the launching process
follows the tasks on the controller and, when they have ended, hands the sweep's jobs back to
Hydra (rnnexp.app.slurm says what it does around them).
"""

# No `from __future__ import annotations`: Hydra scans this module without registering it
# in sys.modules, and dataclasses then cannot resolve string annotations.
import contextlib
import io
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.rnnexp_launcher.rnnexp_launcher import RnnexpLauncher


@dataclass
class RnnexpSlurmLauncherConf:
    _target_: str = "hydra_plugins.rnnexp_launcher.rnnexp_slurm.RnnexpSlurmLauncher"
    # false: every job a task of its own, measured alone (not interleaved).
    interleave: bool = True
    # Windows one task measures one after the other (on its node): more amortise a task's
    # start (~10 s: Python, torch) over more work; fewer give the scheduler smaller pieces.
    windows_per_task: int = 1
    # submitit's SLURM parameters (hydra-submitit-launcher's names).
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    timeout_min: int = 60
    cpus_per_task: Optional[int] = None
    gpus_per_node: Optional[int] = None
    gpus_per_task: Optional[int] = None
    tasks_per_node: int = 1
    mem_gb: Optional[int] = None
    nodes: int = 1
    name: str = "${hydra.job.name}"
    stderr_to_stdout: bool = False
    partition: Optional[str] = None
    qos: Optional[str] = None
    comment: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    gres: Optional[str] = None
    cpus_per_gpu: Optional[int] = None
    mem_per_gpu: Optional[str] = None
    mem_per_cpu: Optional[str] = None
    account: Optional[str] = None
    signal_delay_s: int = 120
    max_num_timeout: int = 0
    additional_parameters: Dict[str, Any] = field(default_factory=dict)
    array_parallelism: int = 256
    setup: Optional[List[str]] = None


ConfigStore.instance().store(group="hydra/launcher", name="rnnexp_slurm_schema",
                             node=RnnexpSlurmLauncherConf, provider="rnnexp")

# Fields submitit takes under its generic names; the others go to it as slurm_<name>.
GENERIC = ("timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
           "nodes", "name", "stderr_to_stdout")
OWN = ("interleave", "windows_per_task", "submitit_folder", "max_num_timeout")


class RnnexpSlurmLauncher(RnnexpLauncher):
    def __init__(self, interleave: bool = True, windows_per_task: int = 1,
                 **params: Any) -> None:
        super().__init__(interleave=interleave)
        self.windows_per_task = windows_per_task
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v)
                       else v for k, v in params.items()}

    def measures_in_workers(self) -> bool:
        """No: the jobs are measured on the cluster's nodes, which read the sweep's record
        (its MLflow parent run) from the sweep folder — started before any is submitted."""
        return False

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)

    # --- the launching process -------------------------------------------------------------

    def launch_checked(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                       checked: Optional[Sequence[Any]],
                       composed: Optional[Sequence[DictConfig]] = None
                       ) -> Sequence[JobReturn]:
        """Submit the sweep's shards as one array, follow them, and return every job's
        JobReturn once every task has ended."""
        import submitit

        from rnnexp.app import slurm
        from rnnexp.app.callback import sinks_of
        from rnnexp.errors import Interrupted, InterruptRecorded, RnnexpError
        from rnnexp.machine import placement, platform
        from rnnexp.results.result import INTERRUPTED, RESULTS_FILE, Result
        from rnnexp.results.sinks import Sweep, load_jobs

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        started = time.time()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        sweep = Sweep.load(sweep_dir) or Sweep.start(sweep_dir, [])
        launcher = OmegaConf.to_container(self.config.hydra.launcher, resolve=True)
        plat, cores = platform.current(), placement.visible_cores()
        launch = placement.launch_of(launcher, len(job_overrides), cores)
        configs, checked_here = self.compose(job_overrides, initial_job_idx, checked, composed)
        overrides = {initial_job_idx + i: list(job) for i, job in enumerate(job_overrides)}
        # Each task's cores are the job's: bench.num_threads = cpus_per_task, as the sweep's
        # record (and resume) expects.
        typed = {num: placement.for_job(config, num, launch, overrides[num], plat.gpu_count,
                                        cores) for num, config in checked_here.items()}
        self.typed = typed
        returns: Dict[int, JobReturn] = {}
        skip = set(sweep.skip_jobs)
        for num in sorted(skip & set(configs)):  # a resumed sweep's: said here, run nowhere
            returns[num] = self._run(configs[num])
        window = (lambda n: typed[n].bench.window) if self.interleave else (lambda n: 1)
        shard_blocks = slurm.shards([n for n in sorted(configs) if n not in skip], window,
                                    self.windows_per_task)
        if not shard_blocks:
            return [returns[n] for n in sorted(returns)]
        executor = submitit.AutoExecutor(folder=self.params.get(
            "submitit_folder", str(sweep_dir / ".submitit" / "%j")), cluster="slurm",
            slurm_max_num_timeout=self.params.get("max_num_timeout", 0))
        executor.update_parameters(**{
            k if k in GENERIC else f"slurm_{k}": v for k, v in self.params.items()
            if k not in OWN and v is not None})
        arguments = [[[(n, overrides[n], typed[n]) for n in b] for b in blocks]
                     for blocks in shard_blocks]
        self.typed = {}  # each task carries its own jobs' configs, not the sweep's
        with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's errors
            try:
                submitted = executor.map_array(self, arguments,
                                               [Singleton.get_state()] * len(shard_blocks))
            except submitit.core.utils.FailedJobError as err:
                said = [ln for ln in str(err).splitlines() if ln.strip()] or ["no reason"]
                raise RnnexpError("hydra/launcher=rnnexp_slurm: sbatch refused the sweep's "
                                  f"array: {said[-1].strip()}") from None
        self.typed = typed
        tasks = slurm.tasks_of(submitted, shard_blocks)
        slurm.say(f"array {slurm.array_id(tasks)}: {len(tasks)} task(s) for "
                  f"{sum(len(t.jobs) for t in tasks)} job(s), at most "
                  f"{self.params.get('array_parallelism', 256)} at once (logs in "
                  f"{tasks[0].log.parent})")
        try:
            slurm.wait(tasks)
        except (KeyboardInterrupt, Interrupted) as err:
            slurm.cancel(tasks, "the sweep was interrupted")
            self._collect(tasks, configs, returns, started, final=False)
            slurm.write_tasks(sweep_dir, tasks)
            raise err
        self._collect(tasks, configs, returns, started, final=True)
        slurm.write_tasks(sweep_dir, tasks)
        targets = sinks_of(self.config)
        slurm.catch_up(targets, sweep, [(f, r) for f, r in load_jobs(sweep_dir)
                                        if (f / RESULTS_FILE).stat().st_mtime >= started])
        cancelled = slurm.cut_short(tasks)
        if cancelled:
            left = slurm.never_started(tasks)
            reason = (f"SLURM array {slurm.array_id(tasks)} cancelled: task(s) "
                      f"{', '.join(t.name for t in cancelled)}"
                      + (f"; job(s) {slurm.jobs_text(left)} never started" if left else "")
                      + " — resume=true measures what is left")
            slurm.say(reason)
            ended = Result(choices={}, overrides=[], config={}, status=INTERRUPTED,
                           reason=reason)
            for sink in targets:
                sink.on_abort(sweep, ended)
            raise InterruptRecorded(signal.SIGTERM)
        return [returns[n] for n in sorted(returns)]

    def _collect(self, tasks: Sequence[Any], configs: Dict[int, DictConfig],
                 returns: Dict[int, JobReturn], started: float, final: bool) -> None:
        """Each task's JobReturns; a job of a task that ran but left it without a result is
        recorded here (`final`: else the sweep's own abort records what is left)."""
        from rnnexp.app import config_check, recording, slurm
        from rnnexp.app.callback import sinks_of
        from rnnexp.results.sinks import Sweep

        sweep = Sweep.load(Path(str(self.config.hydra.sweep.dir)).resolve())
        targets = None
        for task in tasks:
            kind, value = task.outcome()
            if kind == "success":
                returns.update({n: r for n, r in value.items() if n in task.jobs})
            for num in task.jobs:
                if num in returns:
                    continue
                cfg = configs[num]
                folder = Path(str(cfg.hydra.sweep.dir)) / str(
                    OmegaConf.select(cfg, "hydra.sweep.subdir"))
                result = slurm.recorded_since(folder, started)
                if result is None and task.started and final:
                    result = slurm.unfinished(task, self.typed[num], config_check.app_choices(
                        cfg.hydra.runtime.choices), cfg.hydra.overrides.task)
                    targets = targets if targets is not None else sinks_of(self.config)
                    folder.mkdir(parents=True, exist_ok=True)  # never reached by the task
                    recording.publish(targets, result, folder, sweep)
                if result is not None:
                    returns[num] = JobReturn(overrides=list(cfg.hydra.overrides.task), cfg=cfg,
                                             status=JobStatus.COMPLETED,
                                             _return_value=result.status)

    # --- a task of the array, on its node -------------------------------------------------

    def __call__(self, blocks: List[List[Any]], singleton_state: Dict[type, Singleton]
                 ) -> Dict[int, JobReturn]:
        """The shard's windows measured one after the other, each by rnnexp's launcher; jobs
        an earlier attempt measured (a requeued task) are kept."""
        from rnnexp.app import slurm
        from rnnexp.run import signals

        Singleton.set_state(singleton_state)
        signals.install()
        signals.sigterm_from_scheduler()  # scancel/requeue ends this task's jobs, not the sweep
        signals.stop_job_on_scheduler()
        setup_globals()
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        typed = {n: config for block in blocks for n, _, config in block}
        kept = slurm.measured_before(sweep_dir, typed)
        if kept:
            slurm.say(f"job(s) {slurm.jobs_text(sorted(kept))} measured before the requeue: "
                      "kept, not measured again")
        returns: Dict[int, JobReturn] = {
            n: JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value="ok")
            for block in blocks for n, o, _ in block if n in kept}
        try:
            for block in blocks:
                todo = [(n, o, c) for n, o, c in block if n not in kept]
                for run in slurm.runs_of([n for n, _, _ in todo]):
                    if signals.scheduler_signalled():
                        return returns  # the scheduler is ending this task: start nothing
                    jobs = [(o, c) for n, o, c in todo if n in run]
                    done = RnnexpLauncher.launch_checked(
                        self, [o for o, _ in jobs], run[0], [c for _, c in jobs])
                    returns.update(zip(run, done, strict=True))
        except signals.Killed:  # outside a measurement (composing, recording): stop here
            pass
        return returns
