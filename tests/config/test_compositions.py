"""A job's config composed from its group choices once, then its plain overrides applied,
must be what Hydra composes for it from scratch — Hydra's own node included."""

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobRuntime
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from rnnexp.app.config_check import CONF_DIR, CONFIG_NAME
from rnnexp.config import compositions

SWEEP_DIR = "hydra.sweep.dir=/tmp/rnnexp-sweep"


@pytest.fixture
def loader():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def hydras(loader, overrides):
    return OmegaConf.to_container(loader.load_configuration(CONFIG_NAME, list(overrides),
                                                            RunMode.RUN))


@pytest.mark.parametrize("job", [
    ["model=jit", "shape.hidden_size=64", "seed=3"],
    ["backend=jit", "backend.executor=simple", "model=jit_premul", "dtype=bfloat16"],
    ["+sinks=fastrnns", "sinks.fastrnns.format=pep", "bench=adaptive", "bench.precision=0.05"],
    ["shape=small", "model.build.dropout=0.1", "model=jit_dropout"],
    ["sinks=[json,console]", "bench.num_threads=1", "shape.seq_len=${shape.batch_size}"],
    ["+experiment=hidden_sizes", "model=jit", "shape.hidden_size=256"],
    # Hydra's own: values, a group, and the fields it reads while composing.
    [SWEEP_DIR, "hydra.mode=MULTIRUN", "model=py", "seed=2"],
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1", "model=lstm", "shape.batch_size=3"],
    ["hydra.job.env_copy=[HOME]", "hydra.job.config.override_dirname.exclude_keys=[seed]",
     "seed=1", "model=jit"],
])
def test_a_job_equals_hydras_composition_first_and_from_the_kept_one(loader, job):
    # Another job with the same choices first: the second `load` starts from its composition.
    other = [o.replace("=3", "=7").replace("=64", "=32").replace("=2", "=5") for o in job]
    first = compositions.load(loader, CONFIG_NAME, other)
    kept = len(compositions._BASES)
    ours = compositions.load(loader, CONFIG_NAME, job)
    assert len(compositions._BASES) == kept  # nothing composed again
    assert OmegaConf.to_container(ours) == hydras(loader, job)
    assert OmegaConf.to_container(first) == hydras(loader, other)  # left alone by the second
    resolved = [OmegaConf.to_container(cfg, resolve=True)
                for cfg in (app(ours), app(loader.load_configuration(CONFIG_NAME, job,
                                                                      RunMode.RUN)))]
    assert resolved[0] == resolved[1]


def app(cfg):
    """The app's part (Hydra's node resolves only inside a running job)."""
    cfg = cfg.copy()
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def test_jobs_with_other_group_choices_are_composed_on_their_own(loader):
    a = compositions.load(loader, CONFIG_NAME, ["model=jit_gru", "shape=small"])
    b = compositions.load(loader, CONFIG_NAME, ["model=jit_simple", "shape=small"])
    assert a.model != b.model
    assert a.hydra.runtime.choices.model == "jit_gru"
    assert b.hydra.runtime.choices.model == "jit_simple"


def test_a_job_named_after_the_app_is_named_after_the_app_that_runs_it(loader):
    """Without hydra.job.name in the config, Hydra names the job after the running app (the
    config check's name differs from the app's)."""
    job = ["hydra.job.name=???", "model=jit", "seed=4"]
    runtime = JobRuntime.instance()
    before = runtime.get("name")
    try:
        assert compositions.load(loader, CONFIG_NAME, job).hydra.job.name == before
        runtime.set("name", "another_app")
        assert compositions.load(loader, CONFIG_NAME, job).hydra.job.name == "another_app"
        assert hydras(loader, job)["hydra"]["job"]["name"] == "another_app"
    finally:
        runtime.set("name", before)


def test_a_bad_plain_value_fails_as_hydras_does(loader):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        loader.load_configuration(CONFIG_NAME, ["model=jit", "seed=abc"], RunMode.RUN)
    with pytest.raises(ConfigCompositionException):
        compositions.load(loader, CONFIG_NAME, ["model=jit", "seed=abc"])


def test_the_least_recently_used_composition_goes_first(loader, monkeypatch):
    monkeypatch.setattr(compositions, "_BASES", type(compositions._BASES)())
    monkeypatch.setattr(compositions, "KEPT", 2)
    jobs = [["model=jit", "shape=small"], ["model=py", "shape=small"],
            ["model=lstm", "shape=small"]]
    compositions.load(loader, CONFIG_NAME, jobs[0])
    compositions.load(loader, CONFIG_NAME, jobs[1])
    compositions.load(loader, CONFIG_NAME, [*jobs[0], "seed=9"])  # jit used again
    third = compositions.load(loader, CONFIG_NAME, jobs[2])
    kept = [key[2] for key in compositions._BASES]
    assert kept == [tuple(jobs[0]), tuple(jobs[2])]
    assert OmegaConf.to_container(third) == hydras(loader, jobs[2])


def test_jobs_composed_before_the_sweep_claims_its_folder_follow_it(loader, tmp_path):
    """The sweeper composes its jobs to check them before it claims the sweep's folder, and
    hands them to the launcher: each must be what composing after the claim gives."""
    from rnnexp.app import run_dir

    master = loader.load_configuration(CONFIG_NAME, [f"hydra.sweep.dir={tmp_path}/s",
                                                     "hydra.mode=MULTIRUN"], RunMode.MULTIRUN)
    with open_dict(master.hydra):  # the default folder: not named on the command line
        master.hydra.overrides.hydra = ["hydra.mode=MULTIRUN"]
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / run_dir.SWEEP_MARKER).touch()  # taken by another sweep
    job = ["hydra.job.env_copy=[HOME]", "model=jit", "seed=4"]
    before = compositions.load_sweep_config(loader, master, job)
    run_dir.claim_sweep(master, [before])
    assert str(master.hydra.sweep.dir) == f"{tmp_path}/s-2"
    after = compositions.load_sweep_config(loader, master, job)
    assert OmegaConf.to_container(before) == OmegaConf.to_container(after)
