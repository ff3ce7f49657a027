"""`make bench` part `report`: what the HTML report costs and how fast it opens.

From one real tiny sweep's results (two timed jobs, two refused), sweeps of N cells are made
on disk (models × 10 backends; 80% timed, 10% refused, 5% failed verification, 5% flagged;
each timed cell's times scaled by its own factor, its interleaved rounds kept), and:

- the sweep's end: the report sink's time for N = 10, 100 and the full N, in a fresh process
  with torch, MLflow and the results stage imported as a sweep has them, next to the summary
  the json/MLflow sinks write there already (tables and the fwd/bwd chart) — the ratio says
  what the report adds to a sweep's end;
- size: the N-cell sweep's report, and the report of that sweep against a second one (every
  cell compared, forward and backward: the forest plot at its largest);
- opening: each report opened `--loads` times in headless Chromium (Debian's, a fresh
  context each time) from disk: first paint and first contentful paint, DOMContentLoaded,
  and when the figures are drawn (Plotly unpacked, every figure plotted) — median and max.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from rnnexp.machine.environment import BUSY, HIGH_SPREAD
from rnnexp.measure.records import Verification
from rnnexp.results.result import INVALID, OK, UNSUPPORTED, PhaseStats, Result
from rnnexp.results.sinks import load_jobs

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=None if sys.stdout.isatty() else 150)
TEMPLATE = ["model=lstm,jit", "backend=aten,te", "device=cpu", "shape=small", "bench=quick",
            "sinks=[json]"]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def template(tmp: Path) -> list[Result]:
    folder = tmp / "template"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    subprocess.run([sys.executable, "-m", "rnnexp", "-m", *TEMPLATE,
                    f"hydra.sweep.dir={folder}"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=900)
    return [r for _, r in load_jobs(folder)]


def scaled(p: PhaseStats, k: float) -> PhaseStats:
    """A phase `k` times slower: every time scaled, rates divided."""
    data = p.to_json()
    for key, value in list(data.items()):
        if key.endswith("_ms") and isinstance(value, (int, float)):
            data[key] = value * k
        elif key in ("samples_ms", "process_medians_ms"):
            data[key] = [v * k for v in value]
        elif key == "rounds_ms":
            data[key] = [[None if v is None else v * k for v in row] for row in value]
        elif key in ("tokens_per_s", "gflops", "gbps") and value:
            data[key] = value / k
    return PhaseStats(**{k_: v for k_, v in data.items() if k_ in PhaseStats.__dataclass_fields__})


def synthetic(results: Sequence[Result], n: int, folder: Path, seed: int) -> Path:
    """A sweep folder of n cells made from the template's results."""
    rng = np.random.default_rng(seed)
    timed = [r for r in results if r.status == OK]
    refused = [r for r in results if r.status == UNSUPPORTED]
    for i in range(n):
        roll = rng.random()
        src = refused[i % len(refused)] if roll < 0.10 else timed[i % len(timed)]
        r = Result.from_json(json.loads(json.dumps(src.to_json())))
        model, backend = f"m{i // 10:03d}", f"b{i % 10}"
        r.choices = {**r.choices, "model": model, "backend": backend}
        r.overrides = [f"model={model}", f"backend={backend}"]
        r.config["model"] = {**r.config["model"], "variant": model}
        r.config["backend"] = {**r.config["backend"], "variant": backend}
        if r.status == OK:
            k = float(np.exp(rng.normal(0, 0.5)))
            r.phases = {name: scaled(p, k) if p.timed else p for name, p in r.phases.items()}
            if r.roofline is not None and r.roofline.gflops:
                r.roofline.gflops /= k
            if roll > 0.95:
                r.status, r.reason = INVALID, "verification failed"
                r.verification = Verification("failed", max_abs_error=0.3, tensor="output[0]",
                                              error=0.01, reference_error=1e-4,
                                              multiple=100.0, allowed_multiple=5.0)
            elif roll > 0.90 and r.environment is not None:
                r.environment.flags = [BUSY, HIGH_SPREAD]
                r.environment.warnings = ["machine busy (synthetic)"]
        job = folder / str(i)
        job.mkdir(parents=True)
        r.save(job)
    return folder


SINK = """
import sys, time
from pathlib import Path
import torch, mlflow  # a sweep's process has both
from rnnexp.results import summary
from rnnexp.results.sinks import Sweep, load_jobs
folder = Path(sys.argv[1]).resolve()
jobs = load_jobs(folder)
sweep = Sweep.start(folder, [])
t = time.perf_counter()
summary.write(folder, jobs)
t_summary = time.perf_counter() - t
from rnnexp.analysis.report.sink import Report
t = time.perf_counter()
Report().on_sweep_end(sweep, jobs)
print(t_summary, time.perf_counter() - t)
"""


def sweep_end(folder: Path) -> tuple[float, float]:
    """(summary s, report sink s) at a sweep's end, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", SINK, str(folder)], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=900).stdout.split()
    return float(out[-2]), float(out[-1])


PAINT = """() => {
  const paint = Object.fromEntries(performance.getEntriesByType('paint')
                                   .map(e => [e.name, e.startTime]));
  const nav = performance.getEntriesByType('navigation')[0];
  return {fp: paint['first-paint'], fcp: paint['first-contentful-paint'],
          dcl: nav.domContentLoadedEventEnd};
}"""


def opened(path: Path, loads: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"fp": [], "fcp": [], "dcl": [], "drawn": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        for _ in range(loads):
            context = browser.new_context(viewport={"width": 1300, "height": 900})
            page = context.new_page()
            page.goto(path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            drawn = page.evaluate("performance.now()")
            for k, v in page.evaluate(PAINT).items():
                out[k].append(v)
            out["drawn"].append(drawn)
            context.close()
        browser.close()
    return out


def report(cells: int, loads: int) -> None:
    from rnnexp.app.commands import run_command

    with tempfile.TemporaryDirectory(prefix="rnnexp-bench-report-") as tmp_name:
        tmp = Path(tmp_name)
        results = template(tmp)
        t = Table(title=f"the report at a sweep's end (fresh process; {cells} cells made "
                        "from a real sweep's results)")
        for col in ("cells", "summary s (tables + chart)", "report sink s", "report ÷ summary",
                    "report MB"):
            t.add_column(col, justify="right")
        for n in sorted({10, 100, cells}):
            folder = synthetic(results, n, tmp / f"sweep-{n}", seed=n)
            s_summary, s_report = sweep_end(folder)
            size = (folder / "summary" / "report.html").stat().st_size / 1e6
            t.add_row(str(n), f"{s_summary:.2f}", f"{s_report:.2f}",
                      f"{s_report / s_summary:.2f}", f"{size:.2f}")
        console.print(t)
        big = tmp / f"sweep-{cells}"
        other = synthetic(results, cells, tmp / "other", seed=cells + 1)
        compared = tmp / "compared.html"
        start = time.perf_counter()
        run_command("report", [str(big), "--against", str(other), "-o", str(compared)])
        wall = time.perf_counter() - start
        if not Path(CHROMIUM).is_file():
            console.print(f"report: no Chromium at {CHROMIUM} — `make browser` (as root) "
                          "installs it; opening not measured", highlight=False)
            return
        t = Table(title=f"opening a report from disk in headless Chromium ({loads} loads; "
                        "ms: median (max))")
        for col in ("report", "MB", "first paint", "first contentful paint",
                    "DOMContentLoaded", "figures drawn"):
            t.add_column(col, justify="right")
        for name, path in ((f"sweep, {cells} cells", big / "summary" / "report.html"),
                           (f"against a second sweep, {cells} cells (built in {wall:.1f} s)",
                            compared)):
            got = opened(path, loads)
            t.add_row(name, f"{path.stat().st_size / 1e6:.2f}",
                      *[f"{statistics.median(got[k]):.0f} ({max(got[k]):.0f})"
                        for k in ("fp", "fcp", "dcl", "drawn")])
        console.print(t)
