"""rnnexp's saved view in the MLflow UI, opened as a person opens the link a sweep prints: a
real `mlflow server`, a real sweep recorded to it, Debian's Chromium at 1600 pixels.

The view shows the figures without a click: every job's row (not a collapsed sweep), the
status and the machine's flags on screen, values rounded, each run named uniquely, and in the
chart view charts that compare runs where they are comparable.

`RNNEXP_SCREENSHOTS=docs/img` writes the documentation's screenshots (mlflow-view.png,
mlflow-view-charts.png) from this UI as it opens."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rnnexp.results.sinks.mlflow import view
from rnnexp.results.sinks.mlflow.runs import rounded, run_name
from tests.conftest import TINY

WIDTH = 1600
SWEEP = ["model=lstm,jit", "backend=auto,aten", *TINY]


def test_key_metrics_are_rounded_to_four_digits():
    assert rounded(1568.5855614999582) == 1569.0
    assert rounded(0.012345678) == 0.01235
    assert rounded(0.0) == 0.0 and rounded(-2.71828) == -2.718


def test_run_names_say_the_backend_that_ran_and_what_else_tells_jobs_apart():
    from rnnexp.results.result import OK, BackendInfo, Result

    def job(overrides, backend="auto", ran="aten"):
        return Result(choices={"model": "lstm", "backend": backend, "shape": "small",
                               "device": "cpu"}, overrides=overrides, config={}, status=OK,
                      device="cpu", dtype="float32", backend=BackendInfo(name=ran))

    assert run_name(job([])) == "lstm·auto→aten·small·cpu"
    assert run_name(job([], backend="aten")) == "lstm·aten·small·cpu"
    assert run_name(job(["seed=1", "bench=quick"])) == "lstm·auto→aten·small·cpu seed=1"
    assert run_name(job(["bench.python=/b/bin/python"])) == \
        "lstm·auto→aten·small·cpu bench.python=/b/bin/python"


@pytest.fixture
def recorded(run_here, mlflow_server):
    proc = run_here(*SWEEP, f"sinks.mlflow.uri={mlflow_server}", multirun=True)
    assert proc.returncode == 0, proc.stderr
    (link,) = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("MLflow: ")]
    return mlflow_server, link


def numbers(text: str) -> list[str]:
    return re.findall(r"\d+\.\d+", text)


@pytest.mark.browser
@pytest.mark.slow
def test_the_view_opens_on_every_jobs_figures(recorded, browser):
    server, link = recorded
    assert link.startswith(server) and link.endswith("?viewStateShareKey=rnnexp")
    client = MlflowClient(server)
    jobs = client.search_runs([client.get_experiment_by_name("rnnexp").experiment_id],
                              filter_string=view.JOBS_ONLY)
    names = sorted(r.info.run_name for r in jobs)
    assert len(names) == 4 and len(set(names)) == 4 and "lstm·auto→aten·small·cpu" in names

    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.goto(link)
    table = page.locator(".ag-center-cols-container")
    page.get_by_text("lstm·auto→aten·small·cpu").first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)  # the grid draws its columns after its rows
    # Every job's row, no click: no sweep to expand.
    for name in names:
        assert page.get_by_text(name, exact=True).first.is_visible(), name
    # Status and flags are on screen at 1600 pixels.
    for header in ("status", "env.flags", "fwd_median_ms"):
        box = page.get_by_role("columnheader", name=header).first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTH, header
    # Values rounded: no figure with more than four significant digits.
    shown = numbers(table.inner_text())
    assert shown and all(len(n.replace(".", "").lstrip("0")) <= 4 for n in shown), shown
    shots = os.environ.get("RNNEXP_SCREENSHOTS")
    if shots:
        page.screenshot(path=str(Path(shots) / "mlflow-view.png"))
    # The chart view: runs compared by shape, and the shares of the peaks.
    page.locator("label:has(input[value=CHART])").click()
    page.get_by_text("Parallel Coordinates").first.wait_for(timeout=60_000)
    page.locator(".parcoords").first.wait_for(timeout=60_000)
    axes = page.locator(".parcoords").first.inner_text()
    assert axes.index("shape") < axes.index("model") < axes.index("fwd_median_ms")
    assert page.get_by_text("pct_peak_flops").first.is_visible()
    assert page.get_by_text("fwd_median_ms", exact=True).count() <= 1  # no bars across shapes
    if shots:
        page.wait_for_timeout(3000)
        page.screenshot(path=str(Path(shots) / "mlflow-view-charts.png"))
    context.close()
