"""Sweeps on a SLURM cluster (`hydra/launcher=rnnexp_slurm`): what the launching process does
around the tasks of a job array, and what a task does around the windows it measures.

A sweep's jobs are cut into **shards**: consecutive windows of interleaved jobs (a window: up
to `bench.window` jobs, as rnnexp.run.interleave plans them), `windows_per_task` windows a
shard. Each shard is one task of one SLURM job array (`--array=0-N%array_parallelism`), so
a window — every arm of a block — is measured on one node, never split across two. The task
measures its windows with rnnexp's own launcher (rnnexp.app.launch) and records each job as
any sweep does; after a requeue it keeps what it had measured and measures the rest.

The launching process waits on the controller (`scontrol show job`: no accounting database
needed; `sacct` once the controller has forgotten a task), says when a task starts, is
requeued or ends, and at the end: records the jobs of a task that ended without recording
them (killed hard, node failure, out of memory), uploads to the tracking server what a job
could not (the server was down when it recorded), ends half-written runs, and writes
`slurm.json` (array id, and each task's jobs, node, state and restarts). A cancelled task
(`scancel`) cuts the sweep short: its parent run ends KILLED and `resume=true` measures
what is left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from rnnexp.machine import platform
from rnnexp.measure import job
from rnnexp.results import resume
from rnnexp.results.report import err_console
from rnnexp.results.result import CRASHED, INTERRUPTED, RESULTS_FILE, Result
from rnnexp.results.sinks import Sink, Sweep
from rnnexp.results.sinks.mlflow import Mlflow, runs

TASKS_FILE = "slurm.json"
# States after which a task never runs again (squeue(1), JOB STATE CODES). A requeued task
# goes back to PENDING, so PREEMPTED or NODE_FAIL is final only once the controller says so.
# FORGOTTEN: neither the controller (past MinJobAge) nor accounting knows it, and it left no
# result.
FORGOTTEN = "FORGOTTEN"
FINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT", FORGOTTEN}
# What a job that a task left without a result is recorded as, by the task's final state.
CRASH_STATES = {"FAILED", "OUT_OF_MEMORY", "BOOT_FAIL"}
# Asking the controller: again after POLL_MIN_S when something changed, then less often, up
# to every POLL_MAX_S; the tasks' results are looked for on disk every WATCH_S.
POLL_MIN_S, POLL_MAX_S, WATCH_S = 1.0, 15.0, 0.5
# After the launching process is interrupted: how long its cancelled tasks get to record
# their jobs (SLURM's KillWait is 30 s by default) before it records what is left.
CANCEL_GRACE_S = 60.0


Block = list[int]  # job numbers of one window, consecutive


def shards(jobs: Sequence[int], window: Callable[[int], int], windows_per_task: int
           ) -> list[list[Block]]:
    """The array's tasks: each a list of windows, a window at most `window(first job)` jobs
    with consecutive numbers (a gap — jobs a resumed sweep skips — closes a window)."""
    blocks: list[Block] = []
    for number in jobs:
        last = blocks[-1] if blocks else None
        if last and number == last[-1] + 1 and len(last) < max(1, window(last[0])):
            last.append(number)
        else:
            blocks.append([number])
    per = max(1, windows_per_task)
    return [blocks[i:i + per] for i in range(0, len(blocks), per)]


def runs_of(numbers: Sequence[int]) -> Iterator[list[int]]:
    """`numbers` (ascending) as runs of consecutive numbers."""
    run: list[int] = []
    for n in numbers:
        if run and n != run[-1] + 1:
            yield run
            run = []
        run.append(n)
    if run:
        yield run


def jobs_text(numbers: Sequence[int]) -> str:
    """Job numbers for a line: `0–3, 6, 8–9`."""
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs_of(numbers))


# --- the task's side -------------------------------------------------------------------------

def measured_before(sweep_dir: Path, configs: dict[int, object]) -> set[int]:
    """Jobs of a requeued task's shard that an earlier attempt measured (`ok` in the sweep
    folder, the same measurement by the same code): kept, not measured again."""
    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) == 0:
        return set()  # a first attempt: nothing of its shard was measured yet
    nums = sorted(configs)
    plat = platform.current()
    found = resume.finished_jobs(sweep_dir, [job.plain_config(configs[n]) for n in nums],
                                 platform.git_commit(), plat.torch_version)
    return {nums[i] for i in found}


# --- the controller's view of the tasks --------------------------------------------------

@dataclass
class TaskState:
    state: str = "PENDING"
    node: str = ""
    restarts: int = 0
    reason: str = ""
    # When its last attempt started and ended, as the controller says (ISO, "" unknown).
    start: str = field(default="", compare=False)
    end: str = field(default="", compare=False)


def _indexes(text: str) -> list[int]:
    """An ArrayTaskId field: `3`, or a pending range like `2-5,7%2`."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            out.extend(range(int(low), int(high) + 1))
        elif part.strip().isdigit():
            out.append(int(part))
    return out


def _time(text: Optional[str]) -> str:
    return text if text and text[:1].isdigit() else ""


def parse_scontrol(text: str) -> dict[int, TaskState]:
    """`scontrol -o show job <array>`: task index → its state (index 0 for a lone job)."""
    found: dict[int, TaskState] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobState" not in fields:
            continue
        node = fields.get("NodeList", "")
        seen = TaskState(state=fields["JobState"], node="" if node == "(null)" else node,
                         restarts=int(fields.get("Restarts") or 0),
                         reason="" if fields.get("Reason") == "None" else
                         fields.get("Reason", ""), start=_time(fields.get("StartTime")),
                         end=_time(fields.get("EndTime")))
        for index in _indexes(fields.get("ArrayTaskId", "0")):
            found[index] = seen
    return found


def parse_sacct(text: str) -> dict[int, TaskState]:
    """`sacct -X -n -P -o JobID,State,NodeList -j <array>`: task index → its state."""
    found: dict[int, TaskState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3:
            continue
        job_id, state, node = parts[0], parts[1].split()[0] if parts[1] else "", parts[2]
        index = job_id.split("_", 1)[1] if "_" in job_id else "0"
        for i in _indexes(index.strip("[]")):
            found[i] = TaskState(state=state, node="" if node in ("None assigned", "") else
                                 node)
    return found


def controller_states(array_id: str) -> Optional[dict[int, TaskState]]:
    """The array's tasks as the controller (or, once it forgot them, accounting) knows them;
    None if neither answers."""
    done = subprocess.run(["scontrol", "-o", "show", "job", array_id], capture_output=True,
                          text=True, timeout=60)
    if done.returncode == 0 and done.stdout.strip():
        return parse_scontrol(done.stdout)
    if shutil.which("sacct"):
        done = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,NodeList", "-j",
                               array_id], capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip():
            return parse_sacct(done.stdout)
    return None


# --- the launching process's side --------------------------------------------------------------

@dataclass
class Task:
    """One task of the array as the launching process follows it."""

    index: int
    blocks: list[Block]
    name: str  # <array id>_<index> (or the job id of a lone task)
    result_pickle: Path
    log: Path  # its stderr (submitit's log)
    state: TaskState = field(default_factory=TaskState)
    nodes: list[str] = field(default_factory=list)  # every node an attempt ran on

    @property
    def jobs(self) -> list[int]:
        return [n for b in self.blocks for n in b]

    @property
    def final(self) -> bool:
        return self.state.state in FINAL

    @property
    def started(self) -> bool:
        return bool(self.nodes) or self.result_pickle.exists()

    def update(self, seen: TaskState) -> Optional[str]:
        """Take the controller's view; a line for the console when something happened."""
        before, self.state = self.state, seen
        what = f"task {self.name} (jobs {jobs_text(self.jobs)})"
        # A node is known once it ran there — seen running, or only in its end (a task that
        # started and ended between two looks).
        if seen.node and (not self.nodes or self.nodes[-1] != seen.node):
            self.nodes.append(seen.node)
        if seen.restarts > before.restarts:
            return f"{what} requeued (restart {seen.restarts}): what it measured is kept"
        if seen.state == "RUNNING" and before.state != "RUNNING":
            return f"{what} running on {seen.node}"
        if seen.state in FINAL and before.state not in FINAL:
            where = f" on {self.nodes[-1]}" if self.nodes else " before it started"
            return f"{what} ended {seen.state}{where}"
        return None

    def outcome(self) -> tuple[str, object]:
        """What the task's function returned (submitit's result pickle): ("success", its
        returns) or ("error", the traceback); ("none", None) when it left nothing."""
        from submitit.core.utils import pickle_load

        try:
            return pickle_load(self.result_pickle)
        except (OSError, EOFError, ValueError, ImportError, AttributeError):
            return "none", None

    def last_error(self) -> str:
        """The last line of the task's log that says what went wrong ("" if none does)."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        for line in reversed(lines):
            if WHAT_WENT_WRONG.search(line):
                return " ".join(line.split())[:200]
        return ""


# A log line that names a failure: an exception, a kill, SLURM's own error lines.
WHAT_WENT_WRONG = re.compile(r"(^|\s)(\w+Error\b|\w+Exception\b|Killed\b|error:|"
                             r"oom[-_]kill|Out Of Memory)")


def tasks_of(submitted: Sequence[object], shard_blocks: Sequence[list[Block]]) -> list[Task]:
    """The launching process's Task for each submitit job of the array."""
    return [Task(index=i, blocks=blocks, name=str(s.job_id),  # type: ignore[attr-defined]
                 result_pickle=s.paths.result_pickle,  # type: ignore[attr-defined]
                 log=s.paths.stderr)  # type: ignore[attr-defined]
            for i, (s, blocks) in enumerate(zip(submitted, shard_blocks, strict=True))]


def array_id(tasks: Sequence[Task]) -> str:
    return tasks[0].name.split("_", 1)[0]


def say(line: str) -> None:
    err_console.print(f"slurm: {line}", highlight=False, markup=False, soft_wrap=True)


def wait(tasks: Sequence[Task], poll: Callable[[str], Optional[dict[int, TaskState]]]
         = controller_states, sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> None:
    """Until every task has ended, saying what happens to each. The controller is asked
    often while things happen — a task's result appearing is such a thing, seen on disk —
    and less and less often while nothing does."""
    array, delay, due = array_id(tasks), POLL_MIN_S, 0.0
    lone = len(tasks) == 1 and "_" not in tasks[0].name
    results = {t.index for t in tasks if t.result_pickle.exists()}  # a requeue's earlier
    while True:
        landed = {t.index for t in tasks if not t.final and t.result_pickle.exists()}
        if clock() < due and not landed - results:
            sleep(WATCH_S)
            continue
        results |= landed
        seen = poll(array)
        changed = False
        for task in tasks:
            state = (seen or {}).get(0 if lone else task.index)
            if state is None:
                if seen is not None:
                    continue
                # Forgotten by the controller, and no accounting: a result says it ended.
                state = TaskState("COMPLETED" if task.result_pickle.exists() else FORGOTTEN,
                                  task.state.node, task.state.restarts)
            changed |= state != task.state
            line = task.update(state)
            if line:
                say(line)
        if all(t.final for t in tasks):
            return
        delay = POLL_MIN_S if changed else min(POLL_MAX_S, delay * 1.5)
        due = clock() + delay


def cancel(tasks: Sequence[Task], why: str) -> None:
    """The array cancelled (its running tasks get SIGTERM and record their jobs), and a wait
    of up to CANCEL_GRACE_S for them to end."""
    say(f"cancelling array {array_id(tasks)}: {why}")
    subprocess.run(["scancel", array_id(tasks)], capture_output=True, timeout=60)
    deadline = time.monotonic() + CANCEL_GRACE_S
    while time.monotonic() < deadline:
        seen = controller_states(array_id(tasks)) or {}
        if all(s.state in FINAL for s in seen.values()):
            return
        time.sleep(1.0)


def write_tasks(sweep_dir: Path, tasks: Sequence[Task]) -> None:
    """slurm.json in the sweep folder: which task measured which jobs, where, how it ended."""
    record = {"array_job_id": array_id(tasks), "tasks": [
        {"task": t.name, "jobs": t.jobs, "windows": t.blocks, "state": t.state.state,
         "node": t.nodes[-1] if t.nodes else "", "nodes": t.nodes,
         "restarts": t.state.restarts, "start": t.state.start, "end": t.state.end,
         "log": str(t.log)} for t in tasks]}
    path = Path(sweep_dir) / TASKS_FILE
    if path.exists():  # a resumed sweep keeps the record of its earlier launches
        try:
            earlier = json.loads(path.read_text())
            record["earlier"] = [*earlier.pop("earlier", []), earlier]
        except (OSError, ValueError):
            pass
    path.write_text(json.dumps(record, indent=2))


# --- the end of a launch: what no task recorded, and what the tracking server missed --------

def recorded_since(folder: Path, since: float) -> Optional[Result]:
    """The job's result if this launch wrote it (a task recorded it, then ended hard)."""
    path = folder / RESULTS_FILE
    try:
        if path.stat().st_mtime >= since:
            return Result.load(path)
    except (OSError, ValueError, TypeError):
        pass
    return None


def unfinished(task: Task, config: object, choices: dict, overrides: Sequence[str]) -> Result:
    """The record of a job whose task ended, having started, before the job had a result."""
    state = task.state.state
    where = f" on {task.nodes[-1]}" if task.nodes else ""
    why = task.last_error() if state in CRASH_STATES else ""
    reason = (f"SLURM task {task.name} ended {state}{where} before this job had a result"
              + (f": {why}" if why else "") + " — resume=true measures it again")
    return Result(choices=dict(choices), overrides=[str(o) for o in overrides],
                  config=job.plain_config(config),
                  status=CRASHED if state in CRASH_STATES else INTERRUPTED, reason=reason,
                  platform=platform.current(), git_commit=platform.git_commit())


def untracked(sink: Mlflow, sweep: Sweep, jobs: Sequence[tuple[Path, Result]]
              ) -> tuple[list[tuple[Path, Result]], list[str]]:
    """Of `jobs`, those the sink's store holds no run of; and the sweep's child runs still
    RUNNING, which no job can be once every task has ended (a server that went away while
    one was written)."""
    run_id = sweep.state.get(sink.name, {}).get("run_id")
    if not run_id:
        return [], []
    held, running, token = set(), [], None
    with sink.client() as (client, exp_id):
        while True:
            page = client.search_runs([exp_id], f"tags.mlflow.parentRunId = '{run_id}'",
                                      max_results=1000, page_token=token)
            for r in page:
                held.add(r.data.tags.get(runs.TAG_RESULT_ID))
                if r.info.status == "RUNNING":
                    running.append(r.info.run_id)
            token = page.token
            if not token:
                break
    missing = [(f, r) for f, r in jobs
               if (f / RESULTS_FILE).exists() and runs.result_id(f / RESULTS_FILE) not in held]
    return missing, running


def catch_up(targets: Sequence[Sink], sweep: Sweep, jobs: Sequence[tuple[Path, Result]]
             ) -> None:
    """Upload what a job could not record to the tracking server (it was unreachable then),
    and end runs left half-written; one line for each kind, a warning if it is still down."""
    from rnnexp.results.sinks.mlflow import store

    with store.http_limits(PATIENT_HTTP):
        for sink in targets:
            _catch_up(sink, sweep, jobs, store)


# The end of a sweep is not in a hurry: a server that was just restarted gets a few tries
# and time to answer (jobs themselves fail fast: rnnexp.results.sinks.mlflow.store).
PATIENT_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def _catch_up(sink: Sink, sweep: Sweep, jobs: Sequence[tuple[Path, Result]], store) -> None:
    if not isinstance(sink, Mlflow) or sweep.state.get(sink.name, {}).get("offline"):
        return
    try:
        missing, running = untracked(sink, sweep, jobs)
        parent = sweep.state[sink.name]["run_id"]
        with sink.client() as (client, exp_id):
            for run_id in running:
                client.delete_run(run_id)
            for folder, result in missing:
                runs.log_result(client, exp_id, result, folder, parent_run_id=parent)
    except Exception as err:
        store.warn_offline(sink.uri, err, sweep.path)
        return
    if running:
        say(f"{len(running)} half-written run(s) deleted from {sink.uri} (the server went "
            "away while they were written; their results are uploaded whole)")
    if missing:
        say(f"uploaded to {sink.uri} what {len(missing)} job(s) could not record there "
            f"(jobs {', '.join(f.name for f, _ in missing)})")


def never_started(tasks: Sequence[Task]) -> list[int]:
    return [n for t in tasks if not t.started for n in t.jobs]


def cut_short(tasks: Sequence[Task]) -> list[Task]:
    """Tasks cancelled (scancel): the sweep did not run as asked."""
    return [t for t in tasks if t.state.state == "CANCELLED"]
