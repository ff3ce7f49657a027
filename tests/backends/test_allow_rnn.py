"""nn.LSTM/nn.GRU under inductor: refused by default (dynamo does not trace RNN modules),
compiled as modules with backend.allow_rnn=true, compile time and graph breaks recorded."""

from __future__ import annotations

import pytest

from tests.conftest import TINY, load_results


def test_lstm_under_inductor_is_refused_in_one_line_without_allow_rnn(run_cli):
    proc = run_cli(*TINY, "model=lstm", "backend=inductor")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "dynamo does not trace" in line and "backend.allow_rnn=true" in line


@pytest.mark.slow
def test_lstm_compiles_as_a_module_with_allow_rnn(run_cli, tmp_path):
    # seq_len 2: inductor unrolls the time loop, so compile time grows with it.
    proc = run_cli(*TINY, "model=lstm", "backend=inductor", "backend.allow_rnn=true",
                   "shape.seq_len=2", "sinks=[json]", timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "run")
    backend = result["backend"]
    assert result["status"] == "ok", result["reason"]
    assert backend["name"] == "inductor" and backend["allow_rnn"] is True
    assert backend["graphs"] >= 1 and backend["graph_breaks"] == 0
    assert backend["compile_s"] > 0
    assert backend["onednn"] is False  # torch 2.13 cannot lower oneDNN's RNN op on the CPU
    assert result["verification"]["status"] == "passed"
