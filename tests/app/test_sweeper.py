"""Sweeps in Hydra's override grammar (lists, range(), choice(), glob()), expanded and checked
by rnnexp's sweeper plugin before any job runs."""

import json

import pytest
from hydra import initialize_config_dir

from rnnexp.app.config_check import CONF_DIR, check, expand_jobs
from rnnexp.config import deepbench
from rnnexp.errors import ConfigError, RnnexpError
from tests.conftest import ROOT, TINY

# A third party's Hydra plugins, in the `hydra_plugins` namespace as Hydra requires.
PLUGINS = ROOT / "tests" / "plugins"


def test_range_and_choice_expand_to_every_combination():
    jobs = expand_jobs(["shape.seq_len=range(2,6,2)", "model=choice(lstm,jit)"], True)
    assert jobs == [["shape.seq_len=2", "model=lstm"], ["shape.seq_len=2", "model=jit"],
                    ["shape.seq_len=4", "model=lstm"], ["shape.seq_len=4", "model=jit"]]


def test_a_range_sweep_is_checked_job_by_job():
    configs = check(["shape=small", "shape.seq_len=range(2,6,2)"], multirun=True)
    assert [c.shape.seq_len for c in configs] == [2, 4]


def test_glob_lists_the_options_of_its_group():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = expand_jobs(["model=glob(jit_premul*)", "shape=small"], True)
    assert jobs == [["model=jit_premul", "shape=small"], ["model=jit_premul_bias", "shape=small"]]
    assert len(check(["model=glob(jit_premul*)", "shape=small"], multirun=True)) == 2


@pytest.mark.slow
def test_glob_over_an_added_group_as_the_docs_show():
    configs = check(["+experiment=deepbench", "+deepbench=glob(server_*)"], multirun=True)
    assert len(configs) == len(deepbench.INFERENCE_SERVER) > 1
    assert {c.deepbench.set for c in configs} == {"server"}


def test_a_later_value_of_a_key_replaces_the_earlier_sweep():
    assert expand_jobs(["seed=1,2", "seed=3"], True) == [["seed=3"]]


def test_an_interval_is_refused_in_one_line_naming_the_key():
    with pytest.raises(ConfigError) as err:
        expand_jobs(["shape.seq_len=interval(2,6)"], True)
    assert str(err.value).startswith("shape.seq_len: ") and "range(" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_bad_job_among_globbed_ones_names_its_field():
    with pytest.raises(RnnexpError, match="shape.foo"):
        check(["model=glob(jit_premul*)", "+shape.foo=1"], multirun=True)


@pytest.mark.slow
def test_a_glob_sweep_runs_through_the_cli(run_here, tmp_path):
    proc = run_here("model=glob(jit_premul*)", *TINY, multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(p.read_text())
               for p in sorted((tmp_path / "sweep").glob("*/results.json"))]
    assert sorted(r["choices"]["model"] for r in results) == ["jit_premul", "jit_premul_bias"]
    assert {r["status"] for r in results} == {"ok"}


def test_an_interval_on_the_command_line_is_one_line_and_makes_nothing(run_cli, tmp_path):
    proc = run_cli("shape.seq_len=interval(2,6)", *TINY, multirun=True)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: shape.seq_len: "), proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_the_checked_configs_reach_a_launcher_that_takes_them_through_the_extension():
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    from hydra_plugins.rnnexp_launcher.rnnexp_launcher import RnnexpLauncher
    from hydra_plugins.rnnexp_launcher.rnnexp_slurm import RnnexpSlurmLauncher
    from hydra_plugins.rnnexp_sweeper.rnnexp_sweeper import LaunchesChecked
    from tests.plugins.hydra_plugins.checked_launcher.checked_launcher import CheckedLauncher

    assert issubclass(RnnexpLauncher, LaunchesChecked)
    assert issubclass(RnnexpSlurmLauncher, LaunchesChecked)
    assert issubclass(CheckedLauncher, LaunchesChecked)
    assert not issubclass(BasicLauncher, LaunchesChecked)  # called through `launch`


def test_only_a_launcher_that_records_jobs_after_its_windows_overlaps_the_sweeps_start():
    """The sinks' start runs beside the workers' set-up only where every job is measured in
    this process's workers and recorded here; jobs elsewhere read it from the sweep folder
    before they start."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    from hydra_plugins.rnnexp_launcher.rnnexp_launcher import RnnexpLauncher
    from hydra_plugins.rnnexp_launcher.rnnexp_slurm import RnnexpSlurmLauncher
    from hydra_plugins.rnnexp_sweeper.rnnexp_sweeper import LaunchesChecked

    assert RnnexpLauncher(interleave=True).measures_in_workers()
    assert not RnnexpLauncher(interleave=False).measures_in_workers()  # jobs one by one
    assert not RnnexpSlurmLauncher(interleave=True).measures_in_workers()  # on the nodes
    assert not isinstance(BasicLauncher(), LaunchesChecked)  # neither, through `launch`


def test_a_third_party_launcher_gets_the_checked_configs_and_runs_the_jobs(run_cli, tmp_path):
    proc = run_cli("model=lstm,gru", "backend=aten", *TINY, "sinks=[json]",
                   "hydra/launcher=basic",
                   "hydra.launcher._target_=hydra_plugins.checked_launcher.checked_launcher."
                   "CheckedLauncher", multirun=True,
                   env={"RNNEXP_TARGETS": "hydra_plugins.checked_launcher",
                        "PYTHONPATH": str(PLUGINS)})
    assert proc.returncode == 0, proc.stderr
    handed = json.loads((tmp_path / "sweep" / "checked.json").read_text())
    seq_len = handed[0][1]
    assert handed == [["lstm", seq_len], ["gru", seq_len]]
    results = [json.loads(p.read_text())
               for p in sorted((tmp_path / "sweep").glob("*/results.json"))]
    assert [r["choices"]["model"] for r in results] == ["lstm", "gru"]
    assert all(r["status"] == "ok" for r in results)
