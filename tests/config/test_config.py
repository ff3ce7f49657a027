"""Config composition and validation: bad input fails before anything runs, in one line."""

import copy

import pytest

from rnnexp.app.config_check import check, expand_jobs
from rnnexp.config.schema import DeviceKind, DType, validate
from rnnexp.errors import ConfigError, RnnexpError
from tests.conftest import choices_of, compose_cfg


def test_defaults_compose_to_fastrnns_shape():
    cfg = compose_cfg()
    assert choices_of(cfg)["model"] == "lstm"
    assert choices_of(cfg)["backend"] == "auto"
    typed = validate(cfg)
    s = typed.shape
    assert (s.seq_len, s.num_layers, s.input_size, s.hidden_size, s.batch_size) == \
        (100, 1, 512, 512, 64)
    assert typed.device.kind is DeviceKind.auto
    assert typed.dtype is DType.float32
    assert (typed.bench.warmup, typed.bench.iters) == (10, 300)


def test_every_shape_field_is_overridable():
    fields = {"seq_len": 7, "num_layers": 3, "input_size": 5, "hidden_size": 6,
              "batch_size": 2, "min_len": 2, "max_len": 4}
    typed = validate(compose_cfg([f"shape.{k}={v}" for k, v in fields.items()]))
    assert {k: getattr(typed.shape, k) for k in fields} == fields


@pytest.mark.parametrize("override, field", [
    ("shape.hidden_size=-3", "shape.hidden_size"),
    ("shape.batch_size=0", "shape.batch_size"),
    ("bench.iters=0", "bench.iters"),
    ("bench.warmup=-1", "bench.warmup"),
    ("device.index=-1", "device.index"),
])
def test_out_of_range_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        check([override], multirun=False)
    assert str(err.value).startswith(field + ":")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, field", [
    (["bench.precision=1.5"], "bench.precision"),
    (["bench.precision=0.02", "bench.min_iters=3"], "bench.min_iters"),
    (["bench=adaptive", "bench.iters=5"], "bench.min_iters"),
])
def test_precision_target_is_validated(overrides, field):
    with pytest.raises(ConfigError, match=field):
        check(overrides, multirun=False)


def test_min_len_above_max_len_is_refused():
    with pytest.raises(ConfigError, match="shape.min_len"):
        check(["shape.min_len=50", "shape.max_len=40"], multirun=False)


@pytest.mark.parametrize("override, expected", [
    ("model=nope", "model=nope: no such option — choose one of: "),
    ("shape.hidden_size=abc", "shape.hidden_size: 'abc' is not a whole number — e.g. "
                              "shape.hidden_size=512"),
    ("bench.iters=ten", "bench.iters: 'ten' is not a whole number — e.g. bench.iters=100"),
    ("bench.backward=maybe", "bench.backward: 'maybe' is not true or false — e.g. "
                             "bench.backward=true"),
    ("bench.iters=null", "bench.iters: cannot be null — e.g. bench.iters=100"),
    ("device=gpu", "device=gpu: no such option — did you mean cuda?"),
    ("backend=eager", "backend=eager: no such option — did you mean aten?"),
    ("shape.foo=1", "shape.foo: no such field — valid: shape.seq_len"),
    ("shape.hiden_size=1", "shape.hiden_size: no such field — did you mean shape.hidden_size?"),
    ("foo=1", "foo: no such field — valid: model, backend"),
    ("dtype=float64", "dtype: 'float64' is not one of float32, float16, bfloat16 — did you "
                      "mean float16?"),
    ("device.kind=tpu", "device.kind: 'tpu' is not one of auto, cpu, cuda"),
])
def test_composition_errors_are_one_line(override, expected):
    with pytest.raises(RnnexpError) as err:
        check([override], multirun=False)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message


def test_unknown_model_lists_the_options():
    with pytest.raises(RnnexpError) as err:
        check(["model=nope"], multirun=False)
    assert "lstm" in str(err.value) and "jit" in str(err.value)


def test_sweep_is_expanded_and_every_job_checked_before_any_runs():
    jobs = expand_jobs(["model=lstm,jit", "shape=small"], multirun=True)
    assert sorted(jobs) == sorted([["model=lstm", "shape=small"], ["model=jit", "shape=small"]])
    with pytest.raises(RnnexpError, match="model=nope"):
        check(["model=lstm,nope"], multirun=True)


def test_hydra_overrides_are_left_to_hydra():
    assert expand_jobs(["hydra.run.dir=/x", "hydra/launcher=joblib", "model=py"], False) == \
        [["model=py"]]


def test_a_preset_sweep_is_expanded_and_checked_job_by_job():
    configs = check(["+experiment=fastrnns", "shape=small"], multirun=False)
    forms = sorted(c.model.form.value for c in configs)
    assert forms == ["eager", *["loop"] * 5, "module"]  # py; jit, jit_premul, ...; lstm
    # A command-line value replaces the preset's sweep of the same key.
    assert len(check(["+experiment=fastrnns", "model=lstm,jit"], multirun=True)) == 2


def test_compositions_sharing_the_config_store_equal_hydras_and_leave_the_store_alone():
    """hydra_private.share_store stops Hydra deep-copying the ConfigStore at every
    composition; the configs (Hydra's own node included) must be what Hydra composes with
    its copy, and what a composition gets from the store must still be its own copy."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf, open_dict

    from rnnexp.app.config_check import CONF_DIR
    from rnnexp.config.hydra_private import share_store

    jobs = [["model=jit_layernorm", "backend=jit", "backend.executor=simple"],
            ["model=quantized_lstm", "+sinks=fastrnns", "bench=adaptive", "shape=small"]]

    def composed():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return [OmegaConf.to_container(compose(config_name="config", overrides=job,
                                                   return_hydra_config=True))
                    for job in jobs]

    share_store()
    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
    shared = composed()
    del ConfigStore.__deepcopy__  # Hydra as it ships
    try:
        assert copy.deepcopy(store) is not store
        assert composed() == shared
    finally:
        share_store()
    node = store.load("rnnexp_schema.yaml").node
    with open_dict(node):
        node.seed = 12345
    assert store.load("rnnexp_schema.yaml").node.seed != 12345


def test_a_single_run_is_checked_by_a_hydra_callback_that_ends_the_program(capsys):
    """Hydra turns a callback's exception into a warning and runs the job anyway: the check
    of a single run (before Hydra makes its folder) ends the program itself, exit 2."""
    from rnnexp.app.callback import RunCheck

    RunCheck().on_run_start(config=compose_cfg(["shape=small"]))  # a good config passes
    with pytest.raises(SystemExit) as exit_:
        RunCheck().on_run_start(config=compose_cfg(["shape.hidden_size=-3"]))
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == "error: shape.hidden_size: must be ≥ 1, got -3"


def test_a_single_runs_typed_config_goes_from_its_check_to_its_task_once():
    from hydra import compose, initialize_config_dir

    from rnnexp.app.config_check import CONF_DIR, CONFIG_NAME, CheckedRun, check_composed

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        plain = compose(CONFIG_NAME, ["seed=5"], return_hydra_config=True)
        env = compose(CONFIG_NAME, ["+hydra.job.env_set.SEED=2", "seed=${oc.env:SEED,1}"],
                      return_hydra_config=True)
    slot = CheckedRun()
    (typed,) = check_composed([plain], multirun=False)
    slot.keep(plain, typed)
    assert slot.take() is typed and slot.take() is None  # taken once
    slot.keep(env, check_composed([env], multirun=False)[0])
    assert slot.take() is None  # a resolver's value may change by the time the task runs


def _counting_compositions(monkeypatch) -> list[list[str]]:
    """Every composition Hydra makes from here on: its overrides."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    composed: list[list[str]] = []
    load = ConfigLoaderImpl.load_configuration

    def counting(self, config_name, overrides, *args, **kwargs):
        composed.append(list(overrides))
        return load(self, config_name, overrides, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counting)
    return composed


def test_a_single_run_is_composed_and_validated_once(tmp_path, monkeypatch, capsys):
    """`python -m rnnexp ARGS`: the gate's composition is the one the job runs with (Hydra's
    own path composes twice more: for the mode, then the run), validated once; what Hydra
    records of it is what its own composition records."""
    from rnnexp.app import config_check
    from tests.conftest import in_process, load_results

    composed = _counting_compositions(monkeypatch)
    validated = []
    monkeypatch.setattr(config_check, "validate",
                        lambda cfg: validated.append(cfg.seed) or validate(cfg))
    out = tmp_path / "run"
    args = ["shape=small", "bench=quick", "sinks=[json]", "seed=7", f"hydra.run.dir={out}"]
    code, printed = in_process(args, capsys)
    assert code == 0, printed.err
    assert len(composed) == 1 and validated == [7]  # (its group choices: values go on top)
    assert load_results(out)["status"] == "ok"
    recorded = (out / ".hydra" / "hydra.yaml").read_text()
    assert f"- hydra.run.dir={out}\n    - hydra.mode=RUN\n" in recorded  # as hydra.main adds it
    assert (out / ".hydra" / "overrides.yaml").read_text().split() == \
        ["-", "shape=small", "-", "bench=quick", "-", "sinks=[json]", "-", "seed=7"]


def test_a_config_file_s_credential_is_hidden_on_the_gate_s_composition(tmp_path, monkeypatch):
    """A single run whose config file holds a password: the composition the job runs with
    has it hidden, recorded as a hidden override — and Hydra composed once."""
    from rnnexp.app import config_check
    from rnnexp.config import credentials

    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "store.yaml").write_text(
        "# @package _global_\nsinks:\n  mlflow:\n    uri: 'http://admin:s3cret@127.0.0.1:9'\n")
    composed = _counting_compositions(monkeypatch)
    args = [f"hydra.searchpath=[file://{tmp_path}]", "+experiment=store",
            f"hydra.run.dir={tmp_path}/run", "seed=11"]  # seed: no composition kept for it
    gated = config_check.gate(args, multirun=False)
    assert len(composed) == 1
    assert gated.composed is not None
    uri = str(gated.composed.sinks.mlflow.uri)
    assert "s3cret" not in uri and credentials.reveal(uri) == "http://admin:s3cret@127.0.0.1:9"
    assert [o.split("=")[0] for o in gated.hidden] == ["sinks.mlflow.uri"]
    assert list(gated.composed.hydra.overrides.task)[-1].startswith("sinks.mlflow.uri=")
    assert list(gated.composed.hydra.overrides.hydra)[-1] == "hydra.mode=RUN"


def test_a_sweep_and_a_verbose_run_are_left_to_hydra_to_compose():
    """A sweep's jobs are composed by the sweeper; Hydra's debug listing (hydra.verbose)
    comes from its own composition."""
    from rnnexp.app import config_check

    assert config_check.gate(["seed=1,2"], multirun=True).composed is None
    assert config_check.gate(["hydra.verbose=true"], multirun=False).composed is None
    assert config_check.gate(["hydra.verbose=false"], multirun=False).composed is not None


def test_a_single_run_is_validated_once_from_the_gate_to_its_task(monkeypatch):
    """The gate validates a single run's values; the check of the config Hydra composes takes
    that typed config when the app's fields are the same, and validates what differs."""
    from hydra import compose, initialize_config_dir

    from rnnexp.app import config_check

    validated = []

    def counting(cfg):
        validated.append(cfg.seed)
        return validate(cfg)

    monkeypatch.setattr(config_check, "validate", counting)
    with initialize_config_dir(config_dir=str(config_check.CONF_DIR), version_base="1.3"):
        same, other = (compose(config_check.CONFIG_NAME, [f"seed={s}"], return_hydra_config=True)
                       for s in (5, 6))
    config_check.gate(["seed=5"], multirun=False)
    (typed,) = config_check.check_composed([same], multirun=False)
    assert validated == [5] and typed.seed == 5  # the gate's, taken by the check
    config_check.gate(["seed=5"], multirun=False)
    (typed,) = config_check.check_composed([other], multirun=False)
    assert validated == [5, 5, 6] and typed.seed == 6  # not what the gate saw: validated
    (typed,) = config_check.check_composed([same], multirun=False)
    assert validated == [5, 5, 6, 5]  # the gate's is taken once
