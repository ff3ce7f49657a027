"""What makes two runs the same measurement (rnnexp.results.identity): keys read from real composed
configs, and from the results those jobs record."""

from __future__ import annotations

import pytest

from rnnexp.app.config_check import check
from rnnexp.machine import platform
from rnnexp.measure import job
from rnnexp.results.identity import MeasurementKey, duplicates
from rnnexp.results.result import OK, Result

BASE = ["model=lstm", "backend=aten", "device=cpu", "shape=small", "bench=quick"]


def with_base(*overrides: str) -> list[str]:
    """BASE with `overrides` in place of its own entries for the same keys (a key is given once)."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [o for o in BASE if o.split("=", 1)[0] not in keys] + list(overrides)


def key_of(*overrides: str, torch_version: str = "2.x", commit: str = "c") -> MeasurementKey:
    (config,) = check(with_base(*overrides), multirun=False)
    return MeasurementKey.of_config(job.plain_config(config), torch_version, commit)


@pytest.fixture(scope="module")
def base() -> MeasurementKey:
    return key_of()


def test_an_overridden_shape_field_is_another_measurement_unless_it_keeps_the_value(base):
    assert key_of("shape.hidden_size=64") != base
    assert key_of("shape.seq_len=9") != base
    # By value: setting a field to what the shape option holds already measures the same.
    small = dict(base.shape)
    assert key_of(f"shape.hidden_size={small['hidden_size']}") == base


def test_dtype_device_seed_model_and_backend_each_make_another_measurement(base):
    for overrides in (["dtype=bfloat16"], ["device=auto"], ["device.index=1"], ["seed=1"],
                      ["model=gru"], ["backend=jit"], ["bench.backward=false"],
                      ["bench.num_threads=1"]):
        assert key_of(*overrides) != base, overrides


def test_how_long_and_where_results_go_are_not_part_of_it_but_are_recorded(base):
    longer = key_of("bench.iters=50", "bench.warmup=1", "bench.processes=2")
    assert longer == base and hash(longer) == hash(base)
    assert longer.taken_as() != base.taken_as()  # a rerun of that job would differ
    elsewhere = key_of("sinks=[json]", "resume=false")
    assert elsewhere.taken_as() == base.taken_as()


def test_the_code_that_ran_is_part_of_it_unless_versions_are_what_is_compared(base):
    for other in (key_of(commit="d"), key_of(torch_version="2.y")):
        assert other != base and other.without_versions() == base.without_versions()


def test_a_deepbench_problem_is_its_own_measurement_even_at_the_same_shape():
    problem = ["+experiment=deepbench", "+deepbench=server_lstm_h512_b1_t25", "bench=quick",
               "backend=aten", "device=cpu"]
    (db,) = check(problem, multirun=False)
    plain = ["model=lstm", "backend=aten", "device=cpu", "bench=quick",
             "bench.backward=false", "shape.hidden_size=512", "shape.input_size=512",
             "shape.batch_size=1", "shape.seq_len=25", "shape.num_layers=1"]
    (same_shape,) = check(plain, multirun=False)
    db_key, plain_key = (MeasurementKey.of_config(job.plain_config(c)) for c in (db, same_shape))
    assert db_key.shape == plain_key.shape and db_key.model == plain_key.model
    assert db_key != plain_key and dict(db_key.deepbench)["set"] == "server"
    assert plain_key.deepbench == ()
    (scaled,) = check([*problem, "deepbench.scale=0.5"], multirun=False)
    assert MeasurementKey.of_config(job.plain_config(scaled)) != db_key


def test_a_result_has_the_key_of_the_config_it_ran_with():
    (config,) = check(BASE, multirun=False)
    plat = platform.current()
    result = Result(choices={}, overrides=list(BASE), config=job.plain_config(config),
                    status=OK, platform=plat, git_commit="abc")
    before = MeasurementKey.of_config(job.plain_config(config), plat.torch_version, "abc")
    # Through results.json (JSON's floats, lists and nulls) and back.
    loaded = MeasurementKey.of_result(Result.from_json(result.to_json()))
    assert loaded.taken_as() == before.taken_as()


def test_the_typed_config_of_the_check_has_the_key_of_its_plain_form():
    for overrides in ([], ["backend=inductor", "bench.quiet=wait", "dtype=bfloat16"]):
        (config,) = check(with_base(*overrides), multirun=False)
        typed = MeasurementKey.of_config(config, "2.x", "c")
        plain = MeasurementKey.of_config(job.plain_config(config), "2.x", "c")
        assert typed.taken_as() == plain.taken_as()


def test_fields_name_the_config_entries_and_duplicates_are_found(base):
    fields = base.fields()
    assert fields["shape.hidden_size"] == dict(base.shape)["hidden_size"]
    assert fields["dtype"] == "float32" and fields["commit"] == "c"
    assert "bench.iters" not in fields and "bench.iters" in base.fields(method=True)
    assert not any(k.startswith(("sinks", "resume")) for k in base.fields(method=True))
    longer = key_of("bench.iters=50")
    assert duplicates([base, longer, base, key_of("seed=3"), longer]) == [[0, 2], [1, 4]]


def test_the_check_says_when_jobs_of_a_sweep_repeat_one_measurement(capsys):
    check([*BASE, "seed=3,3,4", "bench.iters=5"], multirun=True)
    assert "jobs 0, 1 take the same measurement the same way" in capsys.readouterr().err
    check([*BASE, "seed=3", "bench.iters=5,6"], multirun=True)  # taken two ways: not repeats
    assert "same measurement" not in capsys.readouterr().err
