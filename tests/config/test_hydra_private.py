"""rnnexp/config/hydra_private.py uses what Hydra does not export: this fails on a Hydra release it
was not written for, or when one of those names changes, so that an upgrade means reading
that module again rather than a silent break."""

import copy
import inspect

import hydra
from hydra.core.config_store import ConfigStore
from packaging.version import Version

from rnnexp.config import hydra_private


def test_hydra_is_a_release_the_private_uses_were_read_for():
    first, after = (Version(".".join(map(str, v))) for v in hydra_private.SUPPORTED)
    assert first <= Version(hydra.__version__) < after, (
        f"hydra-core {hydra.__version__}: read rnnexp/config/hydra_private.py against this release "
        f"and widen SUPPORTED")


def test_the_private_names_have_the_signatures_used():
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser

    assert list(inspect.signature(create_automatic_config_search_path).parameters) == \
        ["calling_file", "calling_module", "config_path"]
    assert {"task_name", "config_search_path"} <= \
        set(inspect.signature(Hydra.create_main_hydra2).parameters)
    args = get_args_parser().parse_args(["-m", "--config-dir", "d", "seed=1"])
    assert (args.multirun, args.config_dir, args.overrides) == (True, "d", ["seed=1"])
    for name in ("config_path", "config_name", "help", "hydra_help", "info", "cfg",
                 "shell_completion", "experimental_rerun"):
        assert hasattr(args, name), name


def test_hydra_s_run_is_what_run_composed_repeats():
    """`run_composed` is `Hydra.run` after its composition: the same calls, in that order."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra.core.utils import run_job

    source = inspect.getsource(Hydra.run)
    calls = ["self.compose_config(", "Callbacks(cfg)", "callbacks.on_run_start(", "run_job(",
             'job_dir_key="hydra.run.dir"', "job_subdir_key=None",
             "callbacks.on_run_end(", "ret.return_value"]
    at = [source.find(c) for c in calls]
    assert -1 not in at and at == sorted(at), dict(zip(calls, at, strict=True))
    assert list(inspect.signature(Callbacks).parameters) == ["config"]
    assert {"task_function", "config", "job_dir_key", "job_subdir_key", "hydra_context",
            "configure_logging"} == set(inspect.signature(run_job).parameters)


def test_the_store_is_shared_by_copies():
    hydra_private.share_store()
    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
