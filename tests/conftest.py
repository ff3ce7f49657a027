"""Shared test helpers: compose configs like the CLI does, and run the CLI for real."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest
import torch
from hydra import compose, initialize_config_dir

from rnnexp.app.config_check import CONF_DIR
from rnnexp.config import kernel_plugins, schema
from tests.browser import browser, page  # noqa: F401 — fixtures: one Chromium for the session

ROOT = Path(__file__).resolve().parent.parent
schema.register()
kernel_plugins.register()

# Tiny sizes: every model runs forward+backward in milliseconds.
TINY = ["shape=small", "bench=quick"]


# The parallel suite (pytest-xdist, a file to a worker) ends when its last file does: the
# files that take longest, mostly waiting (a SLURM cluster, signals, servers, Valgrind), are
# handed out first, the rest fill the cores around them.
LONGEST_FIRST = ("tests/slurm/", "tests/e2e/test_no_loss.py", "tests/e2e/test_hardening_faults.py",
                 "tests/e2e/test_scale.py", "tests/e2e/test_hardening_sigkill.py",
                 "tests/config/test_presets.py", "tests/results/test_tracking.py",
                 "tests/run/test_interleave.py", "tests/measure/test_instructions.py",
                 "tests/app/test_search.py", "tests/app/test_bisect_command.py")


def pytest_collection_modifyitems(config, items) -> None:
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(LONGEST_FIRST)
                     if item.nodeid.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: each file's tests keep their order


def compose_cfg(overrides: Sequence[str] = ()):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def choices_of(cfg) -> dict[str, str]:
    return {k: v for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}


@pytest.fixture(scope="session")
def store_template(tmp_path_factory) -> Path:
    """An MLflow SQLite store with MLflow's tables made, once a worker: migrating a fresh
    store costs a process ~2 CPU-s, and most tests are not about a store's first use."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("store-template")
    store = SqlAlchemyStore(f"sqlite:///{folder / 'mlflow.db'}", str(folder / "artifacts"))
    store.engine.dispose()
    return folder / "mlflow.db"


@pytest.fixture
def migrated_store(store_template):
    """`migrated_store(path)`: a copy of the migrated empty store at `path`; its URI."""

    def _at(path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store_template, path)
        return f"sqlite:///{path}"

    return _at


def cli_args(tmp_path: Path, migrated_store, args: Sequence[str], multirun: bool,
             store: bool) -> list[str]:
    """`run_cli`'s and `run_here`'s arguments: `-m` for a sweep, its folder under tmp_path,
    and tmp_path/mlflow.db made (migrated, empty) unless `store` is False."""
    dirs = [f"hydra.sweep.dir={tmp_path}/sweep"] if multirun else \
        [f"hydra.run.dir={tmp_path}/run"]
    if store and not (tmp_path / "mlflow.db").exists():
        migrated_store(tmp_path / "mlflow.db")
    return [*(["-m"] if multirun else []), *args, *dirs]


@pytest.fixture
def run_cli(tmp_path, migrated_store):
    """Run `python -m rnnexp ARGS` in a subprocess with outputs under tmp_path; its default
    store, tmp_path/mlflow.db, starts migrated and empty (`store=False`: no store until the
    run makes one — for a test that a store is made, or not)."""

    def _run(*args: str, multirun: bool = False, env: dict | None = None,
             timeout: float = 300, store: bool = True) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "rnnexp",
               *cli_args(tmp_path, migrated_store, args, multirun, store)]
        # Never the project's mlflow.db: the default store is one of the test's own (through
        # MLflow's env var, so it is not among the overrides a test checks).
        full_env = {**os.environ, "PYTHONWARNINGS": "ignore",
                    "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", **(env or {})}
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=full_env)

    return _run


def rnnexp_here(*argv: str, store: str) -> subprocess.CompletedProcess:
    """`python -m rnnexp ARGV` in this process, recording to `store` (an MLflow URI): a
    CompletedProcess of its exit status and what it printed. For a test or fixture whose
    subject is not the process (its signals, its exit, its streams as a parent reads them,
    the machine around it): it skips the two imports of torch and MLflow and the fork server
    a real process pays (~7 of its ~9 CPU-s), since this process and its fork server have
    them. No other environment: workers come from the fork server this process keeps, with
    the environment it started with — a test that sets variables runs a real process."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setenv("MLFLOW_TRACKING_URI", store)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main_here(argv)
    if isinstance(code, str):  # printed by the interpreter as it exits
        err.write(code + "\n")
    return subprocess.CompletedProcess(["rnnexp", *argv], code if isinstance(code, int) else
                                       int(code is not None), out.getvalue(), err.getvalue())


@pytest.fixture
def run_here(tmp_path, migrated_store):
    """`run_cli` in this process (`rnnexp_here`): the same arguments, folders and store."""

    def _run(*args: str, multirun: bool = False, store: bool = True
             ) -> subprocess.CompletedProcess:
        return rnnexp_here(*cli_args(tmp_path, migrated_store, args, multirun, store),
                           store=f"sqlite:///{tmp_path}/mlflow.db")

    return _run


def kill_tree(proc: subprocess.Popen) -> None:
    """End a sweep a failed test was waiting on, with every process it started."""
    import psutil

    if proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()


SLURM_PROGRAMS = {"srun", "sbatch", "salloc", "squeue", "scancel", "scontrol", "sacct", "sinfo"}


def path_without_slurm(folder: Path) -> str:
    """A PATH with every program of this one's but SLURM's (links in `folder`): a machine
    without SLURM, whether or not the SLURM tests installed it while the suite runs."""
    folder.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name not in SLURM_PROGRAMS and not link.exists():
                link.symlink_to(entry.path)
    return str(folder)


def load_results(folder: Path) -> dict:
    return json.loads((Path(folder) / "results.json").read_text())


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """torch's intra-op thread count put back after each test: a test that sets up a worker
    in this process (rnnexp.measure.measurer, an in-process run) sets bench.num_threads, and
    a test after it on the same xdist worker would count with it."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def roofline_cache(tmp_path_factory):
    """Device peaks and drift probes go to a cache of the test session, never the user's; every
    CLI subprocess inherits it."""
    from rnnexp.results.cache import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("rnnexp-cache"))
    yield Path(os.environ[CACHE_ENV])
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_START_S = 300
# MLflow's server starts a job runner and seven huey consumers by default (its jobs: GenAI
# evaluation, trace roll-ups), ~25 CPU-s a start; rnnexp records runs only.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@contextlib.contextmanager
def serving_mlflow(folder: Path, admin_password: str | None = None) -> Iterator[str]:
    """A real `mlflow server` on 127.0.0.1 (SQLite store, served artifacts, in `folder`), as
    `make server`; with `admin_password`, behind MLflow's own basic authentication
    (`--app-name basic-auth`: user `admin`, every request without it answered 401)."""
    port = free_port()
    auth, env = [], {**os.environ, **SERVER_ENV}
    if admin_password is not None:
        auth = ["--app-name", "basic-auth"]
        # A password check costs a PBKDF2 hash: cached, the server answers a test's many
        # requests in time on a busy machine.
        (folder / "basic_auth.ini").write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{folder / 'basic_auth.db'}\nadmin_username = admin\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            "auth_cache_ttl_seconds = 600\n")
        env.update(MLFLOW_AUTH_ADMIN_PASSWORD=admin_password,
                   MLFLOW_AUTH_CONFIG_PATH=str(folder / "basic_auth.ini"),
                   MLFLOW_FLASK_SERVER_SECRET_KEY="rnnexp-tests")
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            env.pop(key, None)
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", *auth,
         "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
         "--artifacts-destination", str(folder / "server-artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder, env=env)
    try:
        # A first start migrates a fresh SQLite store: ~20 s idle, minutes beside other tests.
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                assert time.monotonic() < deadline, \
                    f"mlflow server did not start in {SERVER_START_S} s"
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture
def mlflow_server(tmp_path, migrated_store):
    """A real `mlflow server` on 127.0.0.1 (SQLite store, served artifacts), as `make server`;
    its store starts migrated and empty."""
    migrated_store(tmp_path / "server.db")
    with serving_mlflow(tmp_path) as uri:
        yield uri


def main_here(args: Sequence[str]) -> object:
    """`python -m rnnexp ARGS` through `rnnexp.app.cli.main` in this process: its exit code
    (as SystemExit carries it). What the run sets for itself is put back for the tests after
    it: its signal handlers and variables (a credential's); torch's thread count, as after
    every test (`torch_threads_kept`)."""
    import signal

    from rnnexp.app import cli

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    environ = dict(os.environ)
    try:
        with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exit_:
            patch.setattr(sys, "argv", ["rnnexp", *args])
            cli.main()
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        os.environ.clear()
        os.environ.update(environ)
    return exit_.value.code


def in_process(args: list[str], capsys):
    """`main_here`: its exit status and what it printed."""
    return main_here(args), capsys.readouterr()
