"""examples/haste-lstm-plugin: refused on a machine without haste (CUDA only) in one line;
its weight mapping checked against nn.LSTM on the CPU, through a plain-torch transcription of
haste's documented recurrence (haste_pytorch/lstm.py, LSTMScript) standing in for the
library, for these tests only."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import types

import pytest
import torch
from torch import nn

from rnnexp.config.schema import ShapeConfig
from rnnexp.measure import verify
from rnnexp.models import plugin
from rnnexp.models.inputs import module_inputs, native_rnn
from rnnexp.models.workload import WorkloadSpec
from rnnexp.results.exit_codes import USER_ERROR
from tests.conftest import ROOT, TINY

SHAPE = ShapeConfig(seq_len=6, num_layers=2, input_size=5, hidden_size=4, batch_size=3)


class DocumentedLSTM(nn.Module):
    """haste_pytorch.LSTM's recurrence as haste documents and implements it off the GPU:
    Wx = x @ kernel; v = h @ recurrent_kernel + Wx[t] + bias; i, g, f, o = chunk(v, 4)."""

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float = 1.0):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(input_size, 4 * hidden_size))
        self.recurrent_kernel = nn.Parameter(torch.empty(hidden_size, 4 * hidden_size))
        self.bias = nn.Parameter(torch.full((4 * hidden_size,), forget_bias))

    def forward(self, x, state):
        h, c = state[0][0], state[1][0]
        wx = x @ self.kernel
        outputs = []
        for t in range(x.shape[0]):
            i, g, f, o = torch.chunk(h @ self.recurrent_kernel + wx[t] + self.bias, 4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs), (h[None], c[None])


@pytest.fixture
def adapter(monkeypatch):
    """The example's module, imported from its folder (not installed)."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "haste-lstm-plugin"))
    return importlib.import_module("haste_lstm_plugin")


@pytest.fixture
def documented_haste(adapter, monkeypatch):
    monkeypatch.setitem(sys.modules, "haste_pytorch",
                        types.SimpleNamespace(LSTM=DocumentedLSTM))
    return adapter


def spec(dtype=torch.float64) -> WorkloadSpec:
    return WorkloadSpec(shape=SHAPE, device=torch.device("cpu"), dtype=dtype, seed=3)


def test_the_mapping_turns_nn_lstm_weights_into_haste_s_layout(documented_haste):
    haste_lstm_plugin = documented_haste
    lstm = native_rnn(spec(), "LSTM")
    weights = [nn.Parameter(w) for w in haste_lstm_plugin.to_haste(list(lstm.parameters()))]
    H, In = SHAPE.hidden_size, SHAPE.input_size
    assert [tuple(w.shape) for w in weights] == [(In, 4 * H), (H, 4 * H), (4 * H,),
                                                 (H, 4 * H), (H, 4 * H), (4 * H,)]
    # The forget gate's block is haste's third (i, g, f, o), nn.LSTM's second (i, f, g, o).
    assert torch.equal(weights[0][:, 2 * H:3 * H], lstm.weight_ih_l0[H:2 * H].t())
    x, state = module_inputs(spec(), "LSTM")
    got = haste_lstm_plugin.build(spec(), weights)(x, state)
    want = lstm(x, state)
    for a, b in zip(verify.tensors(got), verify.tensors(want), strict=True):
        torch.testing.assert_close(a, b)


def test_rnnexp_verifies_it_with_gradients_in_nn_lstm_s_layout(documented_haste):
    haste_lstm_plugin = documented_haste
    workload = plugin.build(haste_lstm_plugin.KERNEL, spec(torch.float32), {})
    result = verify.verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail
    # A mapping that swapped two gates would not pass.
    swapped = haste_lstm_plugin.KERNEL.__class__(
        **{**haste_lstm_plugin.KERNEL.__dict__,
           "layout": lambda ws: [w.flip(-1) for w in haste_lstm_plugin.to_haste(ws)]})
    workload = plugin.build(swapped, spec(torch.float32), {})
    assert verify.verify(workload, torch.float32, backward=True).status == "failed"


def test_without_haste_it_is_refused_in_one_line(tmp_path, adapter):
    """Installed for real (pip --target); on this machine haste_pytorch is absent."""
    site = tmp_path / "site"
    # pip builds in the source folder: a copy, so the checkout gets no build files.
    source = shutil.copytree(ROOT / "examples" / "haste-lstm-plugin", tmp_path / "source")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--no-index", "--no-build-isolation", "--target", str(site),
                          str(source)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    env = {**os.environ, "PYTHONPATH": str(site),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "model=haste_lstm", *TINY,
                           f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == USER_ERROR
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    reason = adapter.requires()
    assert reason == adapter.NOT_INSTALLED
    assert lines == [f"error: model=haste_lstm cannot run here: {reason}"]
