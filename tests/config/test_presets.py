"""Every preset in conf/experiment/ documents its question, composes every job, and runs
(at shape=small or DeepBench scaled down; unsupported jobs declined, not fatal)."""

from __future__ import annotations

import functools
import json

import pytest

from rnnexp.app.config_check import CONF_DIR, check
from rnnexp.config import deepbench
from tests.conftest import TINY

PRESETS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
# Jobs each preset expands to, as composed here.
JOBS = {"fastrnns": 7, "fastrnns_varlen": 3, "eltwise": 6, "quantized": 4, "backends": 6,
        "hidden_sizes": 5, "deepbench": 110, "compile_seq_len": 6}


def test_the_presets_the_project_promises_exist():
    assert set(JOBS) == set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_says_which_question_it_answers(preset):
    header = (CONF_DIR / "experiment" / f"{preset}.yaml").read_text().split("\nhydra:")[0]
    assert "# Question:" in header and "python -m rnnexp +experiment=" + preset in header


@functools.cache
def composed(preset: str) -> list:
    """Every job of a preset, composed and checked (DeepBench's 110 take seconds: once)."""
    return check([f"+experiment={preset}", *TINY], multirun=False)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.slow
def test_every_preset_composes_every_job(preset):
    configs = composed(preset)
    assert len(configs) == JOBS[preset]
    assert len({json.dumps(str(c)) for c in configs}) == len(configs)  # no job twice


def test_quantized_preset_is_cpu_and_both_weight_types():
    configs = check(["+experiment=quantized", *TINY], multirun=False)
    assert {c.device.kind.value for c in configs} == {"cpu"}
    assert sorted((c.model.build["kind"], c.model.build["weight_dtype"]) for c in configs) == \
        [("GRU", "float16"), ("GRU", "qint8"), ("LSTM", "float16"), ("LSTM", "qint8")]


def test_compile_preset_compiles_loop_models_cold_over_sequence_lengths():
    configs = check(["+experiment=compile_seq_len"], multirun=False)
    assert {c.backend.cache for c in configs} == {False}
    assert sorted({c.shape.seq_len for c in configs}) == [2, 4, 8]
    assert {c.model.form for c in configs} == {"loop"}
    assert {c.backend._target_.rsplit(".", 1)[-1] for c in configs} == {"Inductor"}


def test_deepbench_holds_its_published_lstm_and_gru_problems():
    # rnn_problems.h: training 40 LSTM/GRU rows (vanilla left out), server inference 69,
    # device inference 1.
    assert (len(deepbench.TRAINING), len(deepbench.INFERENCE_SERVER),
            len(deepbench.INFERENCE_DEVICE)) == (40, 69, 1)
    assert (2816, 32, 750, "gru") in deepbench.TRAINING
    assert (4096, 128, 25, "lstm") in deepbench.TRAINING
    assert (1024, 4, 1500, "gru") in deepbench.INFERENCE_SERVER
    assert deepbench.INFERENCE_DEVICE == [(256, 1, 150, "lstm")]
    assert all(cell in ("lstm", "gru") for *_, cell in deepbench.TRAINING)


@pytest.mark.slow
def test_deepbench_jobs_take_the_shape_model_and_phases_of_their_problem():
    """A problem's shape and phases override the command line's (here shape=small and
    bench=quick, whose backward is on)."""
    configs = composed("deepbench")
    by_name = {deepbench.option_name(c.deepbench.set, c.deepbench.hidden, c.deepbench.batch,
                                     c.deepbench.steps, c.deepbench.cell): c for c in configs}
    train = by_name["train_gru_h2816_b32_t750"]
    assert (train.shape.hidden_size, train.shape.input_size, train.shape.batch_size,
            train.shape.seq_len, train.shape.num_layers) == (2816, 2816, 32, 750, 1)
    assert train.model.build["_target_"].endswith(".gru") and train.bench.backward
    server = by_name["server_lstm_h512_b1_t25"]
    assert server.model.build["_target_"].endswith(".lstm") and not server.bench.backward


def test_deepbench_scales_down_for_a_cpu():
    [c] = check(["+experiment=deepbench", "+deepbench=train_gru_h2816_b32_t750",
                 "deepbench.scale=0.1"], multirun=True)
    assert (c.shape.hidden_size, c.shape.batch_size, c.shape.seq_len) == (282, 3, 75)
    assert c.deepbench.scale == 0.1 and c.deepbench.hidden == 2816  # the problem is kept
    [one] = check(["+experiment=deepbench", "+deepbench=server_gru_h512_b1_t1",
                   "deepbench.scale=0.01"], multirun=False)
    assert (one.shape.batch_size, one.shape.seq_len) == (1, 1)  # never below 1


# One real sweep per preset, filtered to jobs that are quick on a CPU (inductor's compiles
# are left out; tests/backends/test_backends.py covers them).
RUNS = {
    "fastrnns": ["model=lstm,py"],
    "fastrnns_varlen": [],
    "eltwise": ["backend=jit,te"],
    "quantized": [],
    "backends": ["backend=aten,cudnn,miopen,jit,te"],
    "hidden_sizes": [],
    # One cold inductor compile, the shortest loop.
    "compile_seq_len": ["model=jit", "shape.seq_len=2"],
    "deepbench": ["+deepbench=train_lstm_h512_b16_t25,server_gru_h512_b1_t1,"
                  "device_lstm_h256_b1_t150", "deepbench.scale=0.05"],
}


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_runs(preset, run_here, tmp_path):
    shape = [] if preset == "deepbench" else ["shape=small"]
    proc = run_here(f"+experiment={preset}", *shape, "bench=quick", "sinks=[json]",
                    *RUNS[preset], multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/results.json")]
    assert results, proc.stderr
    statuses = [r["status"] for r in results]
    assert set(statuses) <= {"ok", "unsupported"}, [(r["status"], r["reason"]) for r in results]
    assert "ok" in statuses
    if preset == "compile_seq_len":  # a cold compile, recorded apart from the first call
        (start,) = [r["compile_cost"] for r in results]
        assert start["compiles"] and 0 < start["compile_s"] <= start["first_call_ms"] / 1e3
        assert results[0]["backend"]["cache"] is False
    if preset == "backends":  # what this machine cannot run is declined with its reason
        declined = {r["choices"]["backend"]: r["reason"] for r in results
                    if r["status"] == "unsupported"}
        assert all(reason.startswith(f"backend={b} ") for b, reason in declined.items())
