"""The HTML report, as a person sees it: a real sweep's report opened in headless Chromium
shows every cell's status in the matrix (a refused cell's reason, a failed verification's
numbers), marks a planted regression in the matrix and the forest plot, opens a cell's
details on a click, makes no network request, and works inside a sandboxed frame as
MLflow's artifact view shows it. The sweep's own report is written and logged to its MLflow
parent run by the report sink."""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from rnnexp.analysis.report import figures, model, render
from rnnexp.app.commands import run_command
from rnnexp.measure.records import Samples, Verification
from rnnexp.results import exit_codes
from rnnexp.results.result import INVALID, OK, UNSUPPORTED, Interleaving, phase_stats
from rnnexp.results.sinks import load_jobs
from tests.browser import open_report
from tests.conftest import TINY, rnnexp_here

SWEEP = ["model=lstm,jit,quantized_lstm", "backend=aten,te", "device=cpu", *TINY]
ROUNDS, PER_ROUND = 8, 4


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """A real six-job sweep with the report sink and a real MLflow store: (folder, store URI,
    its stdout)."""
    tmp = tmp_path_factory.mktemp("report-sweep")
    uri = f"sqlite:///{tmp}/mlflow.db"
    proc = rnnexp_here("-m", *SWEEP, "sinks=[json,console,report,mlflow]",
                       f"hydra.sweep.dir={tmp}/sweep", store=uri)
    assert proc.returncode == 0, proc.stderr
    return tmp / "sweep", uri, proc.stdout


def planted(src: Path, dst: Path, slower: float = 1.3, seed: int = 0) -> Path:
    """A copy of the real sweep whose two timed LSTM jobs (lstm·aten, jit·aten) get
    synthetic interleaved rounds, jit `slower` times slower, and whose quantized job failed
    its verification."""
    shutil.copytree(src, dst)
    rng = np.random.default_rng(seed)
    shifts = rng.normal(0, 0.1, ROUNDS)
    for folder, result in load_jobs(dst):
        model_name, backend = result.choices["model"], result.choices["backend"]
        if backend == "aten" and model_name in ("lstm", "jit"):
            factor = slower if model_name == "jit" else 1.0
            per_process = []
            for _ in range(2):
                s = Samples()
                for r, shift in enumerate(shifts):
                    v = factor * np.exp(shift + rng.normal(0, 0.02, PER_ROUND))
                    s.extend(Samples(v.tolist(), (2 * v).tolist()).in_round(r))
                per_process.append(s)
            pooled = Samples()
            for s in per_process:
                pooled.extend(s)
            result.phases = phase_stats(pooled, result.work, per_process=per_process)
            result.interleaving = Interleaving(window="planted/0", jobs=[0, 2], rounds=ROUNDS)
            result.environment.flags, result.environment.warnings = [], []
        elif model_name == "quantized_lstm" and backend == "aten":
            result.status = INVALID
            result.reason = "verification failed"
            result.verification = Verification(
                "failed", max_abs_error=0.25, tensor="output[0]", error=0.01,
                reference_error=1e-4, multiple=100.0, allowed_multiple=5.0)
        result.save(folder)
    return dst


def cli(*args: str) -> int:
    return run_command("report", list(args))


# The sweep's own report -----------------------------------------------------------------


def test_a_sweep_writes_its_report_prints_it_and_logs_it_to_its_parent_run(real_sweep):
    folder, uri, out = real_sweep
    report = folder / "summary" / "report.html"
    assert report.is_file() and f"sweep: {folder}/" in out  # named among the sweep's files
    assert "summary/ " in out and "report.html (open in a browser)" in out
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp")
    parent = client.search_runs([exp.experiment_id],
                                filter_string="tags.`rnnexp.kind` = 'sweep'")[0]
    assert "summary/report.html" in {a.path for a in client.list_artifacts(
        parent.info.run_id, "summary")}
    logged = client.download_artifacts(parent.info.run_id, "summary/report.html",
                                       str(folder.parent / "logged"))
    assert Path(logged).read_text() == report.read_text()


@pytest.mark.browser
def test_the_sweep_report_shows_every_cell_in_its_matrix(real_sweep, page):
    folder, _, _ = real_sweep
    open_report(page, folder / "summary" / "report.html")
    head = page.locator("table.matrix thead th").all_inner_texts()
    assert head == ["model", "backend=aten", "backend=te"]
    cells = page.locator("table.matrix a.cell")
    assert cells.count() == 6
    refused = page.locator("table.matrix a.cell.k-refused")
    assert refused.count() == 3
    # A refused cell says why, in one line, where a person looks.
    assert "backend=te scripts cell-loop models" in refused.first.inner_text()
    assert page.locator("#roofline .main-svg").count() > 0
    assert not page.errors and not page.remote_requests


# A comparison's report ------------------------------------------------------------------


@pytest.fixture(scope="module")
def compared(real_sweep, tmp_path_factory):
    """The planted sweep's report against model=lstm with a 10% gate: (html, exit code)."""
    tmp = tmp_path_factory.mktemp("report-compared")
    sweep = planted(real_sweep[0], tmp / "s")
    html = tmp / "report.html"
    rc = cli(str(sweep), "--baseline", "model=lstm", "--fail-on-regression", "10",
             "-o", str(html))
    return html, rc


def test_a_planted_regression_trips_the_gate_and_is_written(compared):
    html, rc = compared
    assert rc == exit_codes.REGRESSION
    assert html.stat().st_size < 5_000_000


@pytest.mark.browser
def test_the_matrix_shows_status_reasons_numbers_and_the_regression(compared, page):
    open_report(page, compared[0])
    baseline = page.locator("a.cell[data-cell='1']")
    assert "baseline" in baseline.inner_text()
    slow = page.locator("a.cell[data-cell='3']")
    assert "regression" in slow.get_attribute("class")
    assert "slower" in slow.locator(".verdict.regression").first.inner_text()
    invalid = page.locator("a.cell.k-invalid")
    assert invalid.count() == 1
    text = invalid.inner_text()
    assert "verification failed" in text and "100× the reference's" in text \
        and "allowed 5×" in text and "output[0]" in text
    assert page.locator("header .chip.v-slower").inner_text() == "1 regression"


@pytest.mark.browser
def test_the_forest_plot_has_every_verdict_and_the_gate(compared, page):
    open_report(page, compared[0])
    rows = page.locator("table.verdicts tbody tr")
    assert rows.count() == 2  # jit·aten against lstm·aten, forward and backward
    # Two processes a side, each its own: the processes column says so.
    assert rows.locator("td:nth-child(8)").all_inner_texts() == ["2/2"] * 2
    assert rows.locator("td:nth-child(9)").all_inner_texts() == ["slower — regression"] * 2
    forest = page.locator("#fig-forest")
    assert forest.locator("path.point").count() == 2
    assert "gate: 10% slower" in forest.inner_text()
    methods = set(rows.locator("td:nth-child(10)").all_inner_texts())
    assert methods == {"paired by round"}


@pytest.mark.browser
def test_a_click_opens_a_cells_details_with_the_command_to_measure_it_again(compared,
                                                                             page):
    open_report(page, compared[0])
    page.locator("a.cell[data-cell='3']").click()
    page.wait_for_selector("#details[data-ready='3']")
    dialog = page.locator("#details")
    assert dialog.is_visible()
    text = dialog.inner_text()
    for heading in ("against its baseline", "medians per round", "timing", "processes",
                    "memory per phase", "compile cost and break-even", "verification",
                    "environment", "how it was measured", "measure it again"):
        assert heading in text, heading
    command = dialog.locator("pre.command").inner_text()
    assert "python -m rnnexp model=jit backend=aten" in command and "git checkout" in command
    assert dialog.locator(".samples g.trace").count() == 4  # fwd and bwd, two processes each
    # A point of the forest plot opens the same cell.
    page.locator("#details .close").click()
    assert not dialog.is_visible()
    page.locator("#fig-forest path.point").first.click(force=True)
    page.wait_for_selector("#details[open]")
    assert not page.errors and not page.remote_requests


@pytest.mark.browser
def test_it_opens_inside_a_sandboxed_frame_as_mlflow_shows_an_html_artifact(compared,
                                                                          page):
    """MLflow's UI (3.x, ShowArtifactHtmlView) fetches the artifact and shows it in an
    iframe whose src is a blob URL, sandbox="allow-scripts": an opaque origin, no relative
    path, no storage, no forms."""
    page.set_content("<html><body><iframe id='f' sandbox='allow-scripts' "
                     "style='width:1200px;height:800px'></iframe></body></html>")
    page.evaluate("""html => { const blob = new Blob([html], {type: 'text/html'});
                      document.getElementById('f').src = URL.createObjectURL(blob); }""",
                  compared[0].read_text())
    frame = page.frame_locator("#f")
    frame.locator("body[data-ready='1']").wait_for(timeout=60_000)
    assert frame.locator("#fig-forest .main-svg").count() > 0
    frame.locator("a.cell[data-cell='3']").click()
    frame.locator("#details[data-ready='3']").wait_for()
    assert "measure it again" in frame.locator("#details").inner_text()
    assert not page.errors and not page.remote_requests


@pytest.mark.browser
def test_two_sweeps_show_what_differs_between_their_environments(real_sweep, tmp_path,
                                                                 page):
    base = real_sweep[0]
    other = tmp_path / "other"
    shutil.copytree(base, other)
    for folder, result in load_jobs(other):
        result.git_commit = "f" * 40
        result.save(folder)
    html = tmp_path / "ab.html"
    assert cli(str(other), "--against", str(base), "-o", str(html)) == 0
    open_report(page, html)
    differs = page.locator("#environment tr.differs")
    assert differs.locator("th").all_inner_texts() == ["code (git commit)"]
    assert "ffffffffffff" in differs.inner_text()
    # The same measurements on both sides: never called different.
    verdicts = page.locator("table.verdicts tbody td:nth-child(9)").all_inner_texts()
    assert len(verdicts) == 5 and set(verdicts) <= {"~", "cannot tell"}


# The page's parts, without a browser ----------------------------------------------------


def test_report_refuses_bad_arguments_in_one_line(capsys, tmp_path):
    assert cli(str(tmp_path), "-o", str(tmp_path / "r.png")) == exit_codes.USER_ERROR
    assert "-o" in capsys.readouterr().err
    assert cli(str(tmp_path), "--fail-on-regression", "5") == exit_codes.USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a baseline" in err[0]


def history() -> model.Series:
    points = [model.SeriesPoint(at=f"c{i}", median_ms=v, low_ms=0.95 * v, high_ms=1.05 * v)
              for i, v in enumerate([10, 10.2, 9.9, 12.1, 12.0, 12.2])]
    return model.Series(title="jit·aten·small·cpu fwd", points=points,
                        change_points=[model.ChangePoint(index=3, before_ms=10.03,
                                                         after_ms=12.1, note="c3")])


def test_every_kind_of_figure_is_valid_plotly(compared):
    """The figures are Plotly's JSON written directly: Plotly's own schema checks them."""
    import plotly.graph_objects as go

    html = compared[0].read_text()
    found = 0
    for part in html.split('<script type="application/json" id="data-')[1:]:
        go.Figure(json.loads(part.split(">", 1)[1].split("</script>", 1)[0]))
        found += 1
    assert found == 2  # the forest plot and the roofline
    go.Figure(figures.series(history(), 0))
    cell = model.Cell(number=1, job="0", label="x", axes={}, status=OK, kind=model.OK,
                      headline="ok", samples={"fwd": [[1.0, 2.0, None]]}, rounds=True)
    go.Figure(figures.samples(cell))


@pytest.mark.browser
def test_a_history_series_gets_its_section(tmp_path, page):
    """The hook a history command fills: series with change points, shown as a section."""
    report = model.Report(title="history", generated="now", sources=[], cells=[],
                          matrix=model.Matrix([], "", [""], []), series=[history()])
    path = render.write(report, tmp_path / "history.html")
    open_report(page, path)
    row = page.locator("#history table.changes tbody tr")
    assert row.count() == 1 and "+20.6% slower" in row.inner_text()
    assert page.locator("#fig-series-0 path.point").count() == 6


def test_a_refused_cell_is_never_shown_as_timed(real_sweep):
    from rnnexp.analysis import sweeps
    from rnnexp.analysis.report import build

    runs = sweeps.from_folder(real_sweep[0]).runs
    cells = build.cells(runs, None, {}, ["model", "backend"], None)
    refused = [c for c in cells if c.status == UNSUPPORTED]
    assert refused and all(c.kind == model.REFUSED and c.fwd == "—" and not c.samples and
                           c.reason for c in refused)
    timed = [c for c in cells if c.status == OK]
    assert all(c.samples and all(v is None or math.isfinite(v) for lines in c.samples.values()
                                 for ys in lines for v in ys) for c in timed)


def test_several_sweeps_are_shown_together_numbered_in_turn(real_sweep, tmp_path):
    html = tmp_path / "both.html"
    assert cli(str(real_sweep[0]), str(real_sweep[0]), "-o", str(html)) == 0
    text = html.read_text()
    assert text.count('<a class="cell ') == 12 and 'data-cell="12"' in text


def test_the_report_sink_is_on_by_default_before_mlflow():
    """Before mlflow: the MLflow sink attaches what the report sink wrote to the parent run."""
    from tests.conftest import compose_cfg

    names = list(compose_cfg().sinks)
    assert names.index("report") < names.index("mlflow")


def test_compare_and_report_log_their_pages_to_the_sweeps_parent_run(real_sweep, tmp_path,
                                                                     capsys):
    folder, uri, _ = real_sweep
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp")
    parent = client.search_runs([exp.experiment_id],
                                filter_string="tags.`rnnexp.kind` = 'sweep'")[0]
    rc = run_command("compare", [parent.info.run_id, "--baseline", "model=lstm",
                                 "--tracking-uri", uri, "--output", str(tmp_path / "c.png")])
    assert rc == 0
    out = capsys.readouterr().out
    assert f"report: {tmp_path / 'c.html'} (also logged to run {parent.info.run_id} " \
           "under compare/)" in out
    assert cli(parent.info.run_id, "--tracking-uri", uri, "-o", str(tmp_path / "r.html")) == 0
    logged = {a.path for d in ("compare", "report")
              for a in client.list_artifacts(parent.info.run_id, d)}
    assert logged == {"compare/c.png", "compare/c.html", "report/r.html"}


def test_a_counted_sweep_shows_its_counts_and_judges_on_them(real_sweep, tmp_path):
    # bench.metric=instructions recorded on the real sweep's two LSTM cells (jit counting 2%
    # more instructions than lstm): the cells' table gets count columns, each cell a section
    # with its counts, and the verdict is judged on counts and shown in instructions.
    from rnnexp.results.result import CountStats, Instructions

    sweep = shutil.copytree(real_sweep[0], tmp_path / "s")
    for folder, result in load_jobs(sweep):
        if result.choices["backend"] == "aten" and result.choices["model"] in ("lstm", "jit"):
            n = 1.02e6 if result.choices["model"] == "jit" else 1e6
            result.instructions = Instructions(
                phases={"forward": CountStats.of([[n, n + 10], [n + 5]], time_ms=0.2),
                        "backward": CountStats.of([[2 * n], [2 * n]], time_ms=0.4)},
                env={"ATEN_CPU_CAPABILITY": "avx2"}, count_s=60.0)
            result.save(folder)
    html = tmp_path / "r.html"
    assert cli(str(sweep), "--baseline", "model=lstm", "-o", str(html)) == 0
    text = html.read_text()
    assert "<th>fwd instructions</th>" in text and "1.020M ±0.000%" in text
    packed = re.search(r'id="cell-details">([^<]+)<', text).group(1)
    details = gzip.decompress(base64.b64decode(packed)).decode()
    assert "<h3>instruction counts</h3>" in details and "ATEN_CPU_CAPABILITY=avx2" in details
    assert "1.020M instr" in details and "0.980× (instr)" in details
    assert details.count("<h3>instruction counts</h3>") == 2  # the two counted cells only
