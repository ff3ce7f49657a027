"""Kernel plugins (rnnexp.config.kernel_plugins): declared through a real entry point of a package
on the path (tests/toy_kernels.py with its dist-info), composed, admitted, verified,
counted and refused as the built-in models are."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rnnexp.app import config_check
from rnnexp.config import kernel_plugins
from rnnexp.errors import ConfigError, UnsupportedError
from rnnexp.measure import job, verify
from rnnexp.models.inputs import elem_bytes
from rnnexp.models.work import gru_work, lstm_work
from rnnexp.results.exit_codes import JOB_FAILED, USER_ERROR
from rnnexp.results.result import INVALID
from tests.conftest import TINY, compose_cfg, load_results

HERE = Path(__file__).resolve().parents[1]  # tests/, where toy_kernels.py lives
ENTRY_POINTS = """[rnnexp.kernels]
toy_lstm = toy_kernels:LSTM
toy_wrong = toy_kernels:WRONG
toy_relaid = toy_kernels:RELAID
toy_own = toy_kernels:OWN
toy_gru = toy_kernels:GRU
toy_gpu = toy_kernels:GPU
toy_clash = toy_kernels:CLASH
toy_twice = toy_kernels:TWICE
toy_nothing = toy_kernels:NOT_A_KERNEL
toy_broken = toy_kernels_missing:KERNEL
"""


def install(site: Path) -> Path:
    """What `pip install --target site` leaves: the module and its dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "toy_kernels.py", site / "toy_kernels.py")
    info = site / "toy_kernels-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kernels\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


@pytest.fixture
def toy_site(tmp_path, monkeypatch):
    site = install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    kernel_plugins.discover.cache_clear()
    lines: list[str] = []
    kernel_plugins._REPORTED.clear()
    kernel_plugins.register(report=lines.append)
    yield site, lines
    kernel_plugins.discover.cache_clear()


def planned(*overrides: str) -> job.Plan:
    (config,) = config_check.check([*TINY, *overrides], multirun=False)
    choices = {o.split("=")[0]: o.split("=")[1] for o in overrides if o.startswith("model=")}
    return job.plan(config, choices, list(overrides))


def verified(*overrides: str) -> verify.Verification:
    p = planned(*overrides)
    workload = job.build_workload(p.cfg, p.spec)
    return verify.verify(workload, p.spec.dtype, backward=True)


def test_an_installed_kernel_is_a_model_option_named_by_its_factory(toy_site):
    cfg = compose_cfg(["model=toy_lstm", *TINY])
    assert cfg.model.build._target_ == "toy_kernels.lstm"
    assert cfg.model.family == "lstm"
    assert cfg.hydra.runtime.choices.model == "toy_lstm"


def test_entry_points_that_cannot_be_used_are_reported_once_and_left_out(toy_site):
    _, lines = toy_site
    # (Other plugins installed in this environment are not the test's business.)
    toys = [name for name in kernel_plugins.installed() if name.startswith("toy_")]
    assert sorted(toys) == ["toy_gpu", "toy_gru", "toy_lstm", "toy_own", "toy_relaid",
                            "toy_wrong"]
    lines[:] = [ln for ln in lines if "toy_kernels" in ln]
    assert len(lines) == 4 and all(ln.startswith("rnnexp: kernel plugin skipped — ")
                                   for ln in lines)
    text = "\n".join(lines)
    assert "toy_clash = toy_kernels:CLASH: the name lstm is a built-in model's" in text
    assert "toy_twice = toy_kernels:TWICE: its factory toy_kernels.lstm is another" in text
    assert "toy_nothing = toy_kernels:NOT_A_KERNEL: names a object, not" in text
    assert "toy_broken = toy_kernels_missing:KERNEL: cannot be loaded " \
           "(ModuleNotFoundError" in text
    kernel_plugins.register(report=lines.append)
    assert len(lines) == 4  # said once


def test_a_kernel_gets_the_seeded_weights_reference_and_work_of_nn_lstm(toy_site):
    p = planned("model=toy_lstm", "shape.num_layers=2")
    workload = job.build_workload(p.cfg, p.spec)
    reference = workload.reference(torch.float32)
    for mine, theirs in zip(workload.params, reference.params, strict=True):
        assert torch.equal(mine, theirs)
    assert workload.work == lstm_work(p.cfg.shape, elem_bytes(torch.float32))
    result = verify.verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail
    assert result.tensor  # outputs and every parameter's gradient were compared


@pytest.mark.parametrize("overrides", [["model=toy_wrong"],
                                       ["model=toy_lstm", "+model.build.scale=1.01"]])
def test_wrong_outputs_fail_verification_like_a_built_in(toy_site, overrides):
    result = verified(*overrides)
    assert result.status == "failed"
    assert "rms error" in result.detail


def test_weights_in_another_layout_verify_with_gradients_mapped_back(toy_site):
    result = verified("model=toy_relaid", "shape.num_layers=2")
    assert result.status == "passed", result.detail
    assert "mapped back to nn.LSTM's" in result.detail


def test_a_gru_kernel_is_verified_against_nn_gru_with_gru_work(toy_site):
    p = planned("model=toy_gru", "shape.num_layers=2")
    workload = job.build_workload(p.cfg, p.spec)
    assert workload.work == gru_work(p.cfg.shape, elem_bytes(torch.float32))
    result = verify.verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail


def test_a_kernel_with_its_own_reference_builds_its_whole_workload(toy_site):
    assert verified("model=toy_own").status == "passed"


def test_plugin_refusals_come_at_plan_time_in_one_line(toy_site):
    with pytest.raises(UnsupportedError, match=r"^model=toy_gpu cannot run here: toylib is "
                                               r"not installed$"):
        planned("model=toy_gpu")
    with pytest.raises(UnsupportedError, match=r"^model=toy_lstm runs under backend aten "
                                               r"only \(its plugin says so\), not backend=jit"
                                               r" — use backend=aten$"):
        planned("model=toy_lstm", "backend=jit")


def test_the_allowlist_admits_declared_factories_only(toy_site, monkeypatch):
    planned("model=toy_lstm")
    with pytest.raises(ConfigError, match="'toy_kernels.helper' is outside rnnexp"):
        planned("model=toy_lstm", "model.build._target_=toy_kernels.helper")
    with pytest.raises(ConfigError, match="no option 'nope'"):
        planned("model=toy_lstm", "+model.build.nope=1")
    # Importable but no longer installed: the same config is refused.
    site, _ = toy_site
    monkeypatch.syspath_prepend(str(HERE))
    shutil.rmtree(site / "toy_kernels-0.1.dist-info")
    kernel_plugins.discover.cache_clear()
    with pytest.raises(ConfigError, match="'toy_kernels.lstm' is outside rnnexp"):
        planned("model=jit", "model.build._target_=toy_kernels.lstm", "~model.build.cell")


def test_cli_runs_a_wrong_plugin_to_a_failed_verification(tmp_path, run_cli):
    site = install(tmp_path / "site")
    proc = run_cli("model=toy_wrong", *TINY, "sinks=[json,console]",
                   env={"PYTHONPATH": str(site)})
    assert proc.returncode == JOB_FAILED, proc.stderr
    data = load_results(tmp_path / "run")
    assert data["status"] == INVALID and data["verification"]["status"] == "failed"


def test_cli_refuses_an_unusable_plugin_in_one_line(tmp_path, run_cli):
    site = install(tmp_path / "site")
    proc = run_cli("model=toy_gpu", *TINY, "sinks=[json,console]",
                   env={"PYTHONPATH": str(site)})
    assert proc.returncode == USER_ERROR
    assert "Traceback" not in proc.stderr
    assert "model=toy_gpu cannot run here: toylib is not installed" in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()
