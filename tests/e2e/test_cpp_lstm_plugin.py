"""examples/cpp-lstm-plugin installed for real (`pip install --target`, its C++ extension
compiled by torch.utils.cpp_extension) and measured by `python -m rnnexp model=cpp_lstm`,
alone and in one interleaved sweep with the built-in models."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from rnnexp.results.result import OK
from tests.conftest import ROOT, TINY, load_results

EXAMPLE = ROOT / "examples" / "cpp-lstm-plugin"
pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _fingerprint() -> str:
    """The example's sources, the interpreter and torch: what the build depends on."""
    digest = hashlib.sha256(f"{sys.version}{torch.__version__}".encode())
    package = EXAMPLE / "cpp_lstm_plugin"
    for path in [EXAMPLE / "pyproject.toml", EXAMPLE / "setup.py",
                 *sorted(package.glob("*.py")), *sorted(package.glob("*.cpp"))]:
        digest.update(path.relative_to(EXAMPLE).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def cpp_site() -> Path:
    """The plugin installed into a folder of its own, built once per source version and
    kept in the temp folder (sessions share it); a build is moved into place whole."""
    site = Path(tempfile.gettempdir()) / f"rnnexp-cpp-lstm-plugin-{_fingerprint()}"
    if not (site / "cpp_lstm_plugin").is_dir():
        building = Path(tempfile.mkdtemp(prefix=site.name + ".building-"))
        # pip builds in the source folder: a copy, so the checkout gets no build files.
        source = shutil.copytree(EXAMPLE, building / "source")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
             "--no-build-isolation", "--target", str(building / "site"), str(source)],
            capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        try:
            (building / "site").rename(site)
        except OSError:  # another session moved its build into place first
            pass
        shutil.rmtree(building, ignore_errors=True)
    return site


def rnnexp(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    return subprocess.run([sys.executable, "-m", "rnnexp", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_installed_plugin_is_verified_and_timed(cpp_site, tmp_path):
    proc = rnnexp(cpp_site, tmp_path, "model=cpp_lstm", *TINY, "sinks=[json,console]",
                  "shape.num_layers=2", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 0, proc.stderr
    data = load_results(tmp_path / "run")
    assert data["status"] == OK
    assert data["verification"]["status"] == "passed"
    # Outputs and the gradients of both layers' weights were compared with nn.LSTM's.
    assert data["config"]["model"]["build"]["_target_"] == "cpp_lstm_plugin.build"
    assert data["phases"]["forward"]["median_ms"] > 0
    assert data["phases"]["backward"]["median_ms"] > 0


def test_a_sweep_compares_it_with_the_built_in_models(cpp_site, tmp_path):
    proc = rnnexp(cpp_site, tmp_path, "-m", "model=lstm,cpp_lstm", *TINY,
                  "sinks=[json,console]", f"hydra.sweep.dir={tmp_path}/sweep")
    assert proc.returncode == 0, proc.stderr
    jobs = [load_results(tmp_path / "sweep" / str(i)) for i in (0, 1)]
    assert [j["choices"]["model"] for j in jobs] == ["lstm", "cpp_lstm"]
    assert all(j["status"] == OK and j["verification"]["status"] == "passed" for j in jobs)
    # Measured together, in interleaved rounds, with the same work counted: rates compare.
    assert jobs[1]["interleaving"]["jobs"] == [0, 1]
    assert jobs[0]["work"] == jobs[1]["work"]
    assert "cpp_lstm" in proc.stdout
