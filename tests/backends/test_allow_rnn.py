"""nn.LSTM/nn.GRU under inductor with backend.allow_rnn=true: compiled as modules, compile
time and graph breaks recorded (refused without it, in one line that names the switch:
tests/backends/test_backends.py)."""

from __future__ import annotations

import pytest

from tests.conftest import TINY, load_results


@pytest.mark.slow
def test_lstm_compiles_as_a_module_with_allow_rnn(run_here, tmp_path):
    # seq_len 2: inductor unrolls the time loop, so compile time grows with it.
    proc = run_here(*TINY, "model=lstm", "backend=inductor", "backend.allow_rnn=true",
                    "shape.seq_len=2", "sinks=[json]")
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "run")
    backend = result["backend"]
    assert result["status"] == "ok", result["reason"]
    assert backend["name"] == "inductor" and backend["allow_rnn"] is True
    assert backend["graphs"] >= 1 and backend["graph_breaks"] == 0
    assert backend["compile_s"] > 0
    assert backend["onednn"] is False  # torch 2.13 cannot lower oneDNN's RNN op on the CPU
    assert result["verification"]["status"] == "passed"
