"""`make gpu-check`: every GPU claim of rnnexp checked in one go, one report.

    python3 benchmarks/gpu_check.py [--out DIR] [--device cuda|cpu] [--upstream PATH]
                                    [--only STEP,...] [--skip STEP,...] [--budget S]

Runs from a copy of the tree with rnnexp on PYTHONPATH (no install needed) and its
dependencies from wheels (docs/gpu.md). Each step has its own timeout; a failed step does not
stop the others. Writes DIR/report.md (every step: passed, failed with its reason, or skipped
with why), DIR/summary.json, and each step's logs, results.json files and sweep folders
under DIR/steps/<step>/; MLflow runs go to DIR/mlflow.db. Exits 1 if any step failed.

Steps: gpu-tests (`pytest -m gpu` of tests/backends/test_gpu_paths.py and test_backends.py),
matrix, default-run (`python -m rnnexp` as a user first runs it), sweep (cudnn/aten on
nn.LSTM, jit/te on the TorchScript loops, inductor default and reduce-overhead), half
(float16/bfloat16), roofline, aa (an interleaved A/A on the TorchScript loop and cuDNN, then
`rnnexp compare --fail-on-regression 5`; with the loop's spread and the window's wall time
against its timed work), planted (seq_len 100 → 105, 5% more work: compare must find it),
float32 (cuDNN's float32 LSTM and GRU verified at hidden 16-256, seq 8 and 50: the persistent
small-hidden algorithm and the standard one), spread (the fastrnns-shaped TorchScript loop
alone in one process, benchmarks/loop_spread.py, beside the same loop as one sweep job),
upstream (fastrnns beside rnnexp, benchmarks/fastrnns_agreement.py; only with --upstream).
Every step's folder is also packed into DIR/steps.tar.gz (one file to carry back).

`--device cpu` runs the same steps at small shapes, so the plumbing can be tried without a
GPU; what needs one says "skipped: no GPU", and the statistical verdicts are not judged.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["gpu-tests", "matrix", "default-run", "sweep", "float32", "half", "roofline", "aa",
         "planted", "spread", "upstream"]
BUDGET_S = 360.0  # the whole check on one GPU
LEAN = ["bench.roofline=false", "bench.drift=false"]  # per-job extras the check needs not


@dataclass
class Step:
    name: str
    status: str = "passed"  # passed | failed | skipped
    reason: str = ""
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = "failed"
        self.failures.append(reason)
        self.reason = self.reason or reason

    def skip(self, reason: str) -> None:
        self.status, self.reason = "skipped", reason


class Check:
    def __init__(self, args):
        self.args = args
        self.out: Path = args.out.resolve()
        self.cuda = args.device == "cuda"
        self.python = args.python
        self.store = f"sqlite:///{self.out / 'mlflow.db'}"
        self.started = time.perf_counter()
        self.step_timeout = args.step_timeout

    # --- running commands ---------------------------------------------------------------

    def folder(self, step: Step) -> Path:
        path = self.out / "steps" / step.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self, step: Step, label: str, argv: list[str], timeout: float,
            cwd: Path = ROOT) -> subprocess.CompletedProcess:
        """One command of a step; its command line, output and exit status are kept."""
        folder = self.folder(step)
        left = self.args.budget - (time.perf_counter() - self.started)
        timeout = max(5.0, min(timeout, left))
        (folder / f"{label}.cmd").write_text(" ".join(argv) + "\n")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired as err:
            out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            errs = err.stderr.decode() if isinstance(err.stderr, bytes) else (err.stderr or "")
            proc = subprocess.CompletedProcess(argv, 124, out, errs + f"\ntimed out after "
                                               f"{timeout:.0f} s\n")
        (folder / f"{label}.log").write_text(
            f"$ {' '.join(argv)}\n# exit {proc.returncode}\n--- stdout\n{proc.stdout}\n"
            f"--- stderr\n{proc.stderr}")
        return proc

    def rnnexp(self, step: Step, label: str, overrides: list[str], timeout: float,
               sweep: bool = False) -> subprocess.CompletedProcess:
        folder = self.folder(step) / label
        where = ([f"hydra.sweep.dir={folder}"] if sweep else [f"hydra.run.dir={folder}"])
        argv = [self.python, "-m", "rnnexp", *(["-m"] if sweep else []), *overrides,
                f"sinks.mlflow.uri={self.store}", *where]
        return self.run(step, label, argv, timeout)

    def command(self, step: Step, label: str, args: list[str], timeout: float):
        return self.run(step, label, [self.python, "-m", "rnnexp", *args], timeout)

    # --- reading results ----------------------------------------------------------------

    @staticmethod
    def results(folder: Path) -> list[dict]:
        files = [folder / "results.json"] if (folder / "results.json").exists() else \
            sorted(folder.glob("*/results.json"), key=lambda p: int(p.parent.name)
                   if p.parent.name.isdigit() else 0)
        return [json.loads(p.read_text()) for p in files]

    @staticmethod
    def job_name(r: dict) -> str:
        c = r.get("choices", {})
        extra = [o for o in r.get("overrides", []) if not o.startswith((
            "model=", "backend=", "hydra.", "sinks.", "bench.", "device=", "shape=small"))]
        return " ".join([f"{c.get('model')}·{c.get('backend')}", *extra]).strip()

    def judge_jobs(self, step: Step, label: str, proc, expected: int) -> list[dict]:
        """Every job ran `ok` and verified; each failure named with its reason."""
        found = self.results(self.folder(step) / label)
        for r in found:
            name = self.job_name(r)
            v = r.get("verification") or {}
            phases = r.get("phases") or {}
            step.figures[name] = {
                "status": r["status"],
                "fwd_ms": (phases.get("forward") or {}).get("median_ms"),
                "bwd_ms": (phases.get("backward") or {}).get("median_ms"),
                "verification": v.get("status"),
                "verification_multiple": v.get("multiple"),
                **({"cudnn_algorithm": r["backend"]["cudnn_algorithm"]}
                   if "cudnn_algorithm" in (r.get("backend") or {}) else {}),
                **({"tensorexpr_kernels": sum(r["backend"]["tensorexpr_kernels"].values())}
                   if (r.get("backend") or {}).get("tensorexpr_kernels") else {})}
            if r["status"] != "ok":
                step.fail(f"{name}: {r['status']}: {r.get('reason') or 'no reason recorded'}")
        if len(found) < expected:
            tail = last_line(proc.stderr) or last_line(proc.stdout)
            step.fail(f"{label}: {len(found)} of {expected} jobs left a result (exit "
                      f"{proc.returncode}: {tail})")
        elif proc.returncode and not step.failures:
            step.fail(f"{label}: exit {proc.returncode}: {last_line(proc.stderr)}")
        return found

    # --- the steps ----------------------------------------------------------------------

    def gpu_tests(self, step: Step) -> None:
        junit = self.folder(step) / "junit.xml"
        probe = self.run(step, "pytest_version", [self.python, "-m", "pytest", "--version"], 60)
        if probe.returncode:
            step.fail("pytest is not installed for this interpreter (not among the wheels): "
                      "GPU tests not run — install it, or carry its wheel")
            return
        only = ["-k", self.args.tests_k] if self.args.tests_k else []
        proc = self.run(step, "pytest", [
            self.python, "-m", "pytest", "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider",
            f"--junitxml={junit}", *only, "tests/backends/test_gpu_paths.py",
            "tests/backends/test_backends.py"], 240)
        if not junit.exists():
            step.fail(f"pytest did not run (exit {proc.returncode}): "
                      f"{last_line(proc.stderr) or last_line(proc.stdout)}")
            return
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for case in ET.parse(junit).getroot().iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None \
                else case.find("error")
            if bad is not None:
                counts["failed"] += 1
                message = (bad.get("message") or bad.text or "").strip().splitlines()
                step.fail(f"{case.get('name')}: {message[0][:300] if message else '?'}")
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        step.figures = counts
        if counts["failed"]:
            step.reason = f"{counts['failed']} of {sum(counts.values())} failed"
        elif not counts["passed"]:
            step.skip(f"no GPU: {counts['skipped']} GPU tests collected, all skipped")

    def matrix(self, step: Step) -> None:
        proc = self.command(step, "matrix", ["matrix", "--device", self.args.device], 120)
        if proc.returncode:
            step.fail(f"exit {proc.returncode}: {last_line(proc.stderr)}")
        step.figures["refused_cells"] = proc.stdout.count("✗")

    def default_run(self, step: Step) -> None:
        overrides = [] if self.cuda else ["device=cpu", "shape=small", "bench=quick"]
        proc = self.rnnexp(step, "run", overrides, 240)
        found = self.judge_jobs(step, "run", proc, 1)
        if found:
            r = found[0]
            roof = r.get("roofline") or {}
            step.figures["backend"] = r["backend"].get("name")
            step.figures["roofline"] = {k: roof.get(k) for k in (
                "phase", "pct_peak_flops", "pct_peak_bandwidth", "bound")} if roof else None

    def sweep(self, step: Step) -> None:
        if self.cuda:
            parts = [("lstm", ["model=lstm", "backend=cudnn,aten"], 2),
                     ("loops", ["model=jit,jit_premul", "backend=jit,te"], 4),
                     ("inductor", ["model=eltwise", "backend=inductor",
                                   "backend.mode=default,reduce-overhead"], 2),
                     ("inductor_loop", ["model=py", "backend=inductor", "shape.seq_len=10",
                                        "backend.mode=reduce-overhead"], 1)]
        else:
            parts = [("lstm", ["model=lstm", "backend=aten", "shape=small", "bench=quick"], 1),
                     ("loops", ["model=jit,jit_premul", "backend=jit", "shape=small",
                                "bench=quick"], 2)]
            step.reason = ("no GPU: cudnn, te and inductor (default, reduce-overhead) "
                           "skipped; aten and jit at shape=small")
        for label, overrides, jobs in parts:
            proc = self.rnnexp(step, label, [*overrides, *LEAN], 240, sweep=True)
            self.judge_jobs(step, label, proc, jobs)

    def float32(self, step: Step) -> None:
        """cuDNN's float32 RNNs verified where PyTorch picks the persistent small-hidden
        kernels (hidden ≤ 192) and where it does not; each job's deciding multiple, its
        reference's arithmetic and the algorithm."""
        if not self.cuda:
            step.skip("no GPU: cuDNN's float32 kernels need one (tests/backends/"
                      "test_float32_orders.py emulates them on the CPU)")
            return
        proc = self.rnnexp(step, "kernels", [
            "model=lstm,gru", "backend=cudnn", "shape=small", "shape.hidden_size=16,32,64,128,"
            "192,256", "shape.input_size=32", "shape.seq_len=8,50", "bench=quick", *LEAN,
            "bench.memory=false"], 240, sweep=True)
        found = self.judge_jobs(step, "kernels", proc, 24)
        step.figures = {}
        for r in found:
            v, c = r.get("verification") or {}, r["config"]["shape"]
            algo = (r.get("backend") or {}).get("cudnn_algorithm") or {}
            step.figures[f"{r['choices'].get('model')} hidden {c['hidden_size']} seq "
                         f"{c['seq_len']}"] = {
                "status": v.get("status"), "multiple": round(v.get("multiple") or 0, 2),
                "tensor": v.get("tensor"), "reference": v.get("reference_math") or "float32",
                "cpu_error": v.get("cpu_error"), "rounded_error": v.get("rounded_error"),
                "error": v.get("error"), "algorithm": algo}

    def spread(self, step: Step) -> None:
        """The TorchScript loop's spread alone in one process (no workers, no interleaving
        with other configurations) against the same loop as a sweep's job."""
        shape = [] if self.cuda else ["shape=small", "device=cpu"]
        backend = "cudnn" if self.cuda else "jit"
        folder = self.folder(step)
        parts = [("alone", backend, 5)] + ([("alone_te", "te", 3)] if self.cuda else [])
        for label, part_backend, rounds in parts:
            out = folder / f"{label}.json"
            proc = self.run(step, label, [
                self.python, str(ROOT / "benchmarks" / "loop_spread.py"), "--out", str(out),
                "--rounds", str(rounds), "model=jit_premul", f"backend={part_backend}", *shape,
                *(["device=cuda"] if self.cuda else [])], 120)
            if proc.returncode or not out.exists():
                step.fail(f"{label}: exit {proc.returncode}: {last_line(proc.stderr)}")
                continue
            for name, v in json.loads(out.read_text())["variants"].items():
                mhz = [row[3] for row in v["samples"] if row[3] is not None]
                step.figures[f"{label}: {name}"] = {
                    k: v[k]["iqr_pct"] for k in ("forward", "backward") if k in v} | {
                    "fwd_ms": v["forward"]["median_ms"]} | (
                    {"sm_clock_mhz": [min(mhz), max(mhz)]} if mhz else {})
        proc = self.rnnexp(step, "job", ["model=jit_premul", f"backend={backend}", *shape,
                                         "bench.processes=1", *LEAN, "bench.memory=false"],
                           120)
        for r in self.judge_jobs(step, "job", proc, 1):
            phases = r.get("phases") or {}
            step.figures["one sweep job (1 process)"] = {
                k: round(100 * phases[k]["iqr_ms"] / phases[k]["median_ms"], 2)
                for k in ("forward", "backward") if (phases.get(k) or {}).get("median_ms")}

    def half(self, step: Step) -> None:
        shape = [] if self.cuda else ["shape=small", "bench=quick", "device=cpu"]
        proc = self.rnnexp(step, "half", ["model=lstm,jit_premul", "backend=auto",
                                          "dtype=float16,bfloat16", *shape, *LEAN], 240,
                           sweep=True)
        self.judge_jobs(step, "half", proc, 4)

    def roofline(self, step: Step) -> None:
        dtypes = ["float32", "float16"] if self.cuda else ["float32"]
        for dtype in dtypes:
            proc = self.command(step, f"roofline_{dtype}", [
                "roofline", "--device", self.args.device, "--dtype", dtype], 120)
            if proc.returncode:
                step.fail(f"{dtype}: exit {proc.returncode}: {last_line(proc.stderr)}")
            step.figures[dtype] = [ln.strip() for ln in proc.stdout.splitlines()
                                   if ln.strip()][-3:]

    def paired(self, step: Step, label: str, varied: list[str], baseline: str,
               gate: str, jobs: int):
        """An interleaved sweep of the TorchScript loop and nn.LSTM (cuDNN on a GPU) over
        `varied`, then `rnnexp compare` against `baseline` with a regression gate."""
        shape = [] if self.cuda else ["shape=small", "device=cpu", "bench.warmup=3",
                                      "bench.iters=20"]
        t0 = time.perf_counter()
        proc = self.rnnexp(step, label, ["model=jit_premul,lstm", "backend=auto", *varied,
                                         *shape, *LEAN, "bench.memory=false"], 240,
                           sweep=True)
        wall = time.perf_counter() - t0
        found = self.judge_jobs(step, label, proc, jobs)
        timed = sum((r.get("timing") or {}).get("timed_s") or 0.0 for r in found)
        # The window's wall time (the whole sweep process) against the timed work in it.
        step.figures["sweep_wall_s"] = round(wall, 1)
        step.figures["timed_work_s"] = round(timed, 2)
        step.figures["timed_share_of_wall"] = round(timed / wall, 3) if wall else None
        for r in found:
            if r["choices"].get("model") == "jit_premul":
                for phase in ("forward", "backward"):
                    p = (r.get("phases") or {}).get(phase) or {}
                    if p.get("median_ms"):
                        step.figures[f"{self.job_name(r)} {phase} IQR % of median"] = round(
                            100 * p["iqr_ms"] / p["median_ms"], 2)
        compare = self.command(step, f"{label}_compare", [
            "compare", str(self.folder(step) / label), "--baseline", baseline,
            "--fail-on-regression", gate, "--tracking-uri", self.store,
            "--output", str(self.folder(step) / f"{label}.png")], 120)
        return compare

    def aa(self, step: Step) -> None:
        compare = self.paired(step, "aa", ["seed=0,1"], "seed=0", "5", 4)
        step.figures["compare_exit"] = compare.returncode
        if compare.returncode == 3:
            verdict = "the A/A flagged a regression ≥ 5% between identical configurations"
            self.verdict(step, verdict)
        elif compare.returncode:
            step.fail(f"compare exit {compare.returncode}: {last_line(compare.stderr)}")

    def planted(self, step: Step) -> None:
        seqs = ("100", "105") if self.cuda else ("20", "21")
        compare = self.paired(step, "planted", [f"shape.seq_len={seqs[0]},{seqs[1]}"],
                              f"shape.seq_len={seqs[0]}", "2", 4)
        step.figures["compare_exit"] = compare.returncode
        if compare.returncode == 0:
            self.verdict(step, f"the planted 5% (seq_len {seqs[0]} → {seqs[1]}) was not "
                               "found (no cell ≥ 2% slower)")
        elif compare.returncode != 3:
            step.fail(f"compare exit {compare.returncode}: {last_line(compare.stderr)}")

    def verdict(self, step: Step, failure: str) -> None:
        """A statistical verdict: judged on a GPU; on a shared CPU only reported."""
        if self.cuda:
            step.fail(failure)
        else:
            step.reason = f"not judged without a GPU: {failure}"

    def upstream(self, step: Step) -> None:
        path = self.args.upstream
        if not path:
            step.skip("no upstream fastrnns copy given (--upstream PATH, the folder holding "
                      "fastrnns/)")
            return
        if not (Path(path) / "fastrnns" / "bench.py").exists():
            step.skip(f"no fastrnns/bench.py under {path}")
            return
        # cuDNN's nn.LSTM, the comparison; the TorchScript loops take longer than the
        # check allows (docs/benchmarks.md has the command for them).
        size = ["--runners", "cudnn", "--repeats", "2"] if self.cuda else [
            "--runners", "aten", "--repeats", "1", "--seq", "20", "--input", "64", "--hidden",
            "64", "--batch", "8", "--nloops", "20", "--warmup", "3", "--no-loops"]
        out = self.folder(step) / "agreement"
        proc = self.run(step, "agreement", [
            self.python, str(ROOT / "benchmarks" / "fastrnns_agreement.py"), "--upstream",
            str(path), "--device", self.args.device, "--out", str(out), *size], 300)
        if proc.returncode:
            tail = last_line(proc.stderr) or last_line(proc.stdout)
            step.fail(f"exit {proc.returncode}: {tail}")
        if (out / "agreement.md").exists():
            step.figures["table"] = str((out / "agreement.md").relative_to(self.out))

    # --- the whole check ----------------------------------------------------------------

    def steps(self) -> dict[str, Callable[[Step], None]]:
        return {"gpu-tests": self.gpu_tests, "matrix": self.matrix,
                "default-run": self.default_run, "sweep": self.sweep, "half": self.half,
                "roofline": self.roofline, "aa": self.aa, "planted": self.planted,
                "float32": self.float32, "spread": self.spread, "upstream": self.upstream}

    def run_all(self, names: list[str]) -> list[Step]:
        done = []
        for name in names:
            step = Step(name)
            elapsed = time.perf_counter() - self.started
            if elapsed >= self.args.budget:
                step.skip(f"out of time: the check's budget of {self.args.budget:.0f} s was "
                          "spent")
            else:
                t0 = time.perf_counter()
                try:
                    self.steps()[name](step)
                except Exception as err:  # one broken step must not hide the others
                    step.fail(f"{type(err).__name__}: {err}")
                step.seconds = round(time.perf_counter() - t0, 1)
            print(f"{name}: {step.status}" + (f" — {step.reason}" if step.reason else ""),
                  flush=True)
            done.append(step)
        return done


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def machine(python: str) -> dict:
    code = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({"
            "'torch': torch.__version__, 'cuda': torch.version.cuda, "
            "'hip': torch.version.hip, 'cudnn': torch.backends.cudnn.version() if c else None,"
            " 'gpu': torch.cuda.get_device_name(0) if c else None}))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": last_line(proc.stderr)}


def report(check: Check, steps: list[Step], info: dict) -> str:
    failed = [s for s in steps if s.status == "failed"]
    lines = [f"# rnnexp gpu-check ({check.args.device})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC · "
             + " · ".join(f"{k} {v}" for k, v in info.items() if v) + f" · "
             f"{time.perf_counter() - check.started:.0f} s in all", "",
             f"**{'FAILED: ' + ', '.join(s.name for s in failed) if failed else 'passed'}**",
             "", "| step | status | s | reason |", "|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {s.name} | {s.status} | {s.seconds:g} | "
                     f"{s.reason.replace('|', '/')} |")
    for s in steps:
        if not (s.failures or s.figures):
            continue
        lines += ["", f"## {s.name}", "", f"logs: `steps/{s.name}/`", ""]
        lines += [f"- failed: {f}" for f in s.failures]
        for key, value in s.figures.items():
            lines.append(f"- {key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def pack(out: Path) -> None:
    """DIR/steps.tar.gz: every step's logs and results in one file (a deep folder may not
    come back from a machine that returns files one level at a time)."""
    import tarfile

    if (out / "steps").is_dir():
        with tarfile.open(out / "steps.tar.gz", "w:gz") as tar:
            tar.add(out / "steps", arcname="steps")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="report folder (default: outputs/gpu-check/<time>)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda if there is a GPU, else cpu")
    parser.add_argument("--upstream", default=os.environ.get("FASTRNNS_UPSTREAM", "") or (
        str(ROOT / ".upstream") if (ROOT / ".upstream" / "fastrnns").is_dir() else ""),
                        help="folder holding a copy of upstream fastrnns (default: .upstream "
                             "when it holds fastrnns/)")
    parser.add_argument("--only", default="", help=f"comma-separated steps: {','.join(STEPS)}")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help="seconds for the whole check; later steps are skipped after it")
    parser.add_argument("--step-timeout", type=float, default=240.0)
    parser.add_argument("--tests-k", default="",
                        help="the gpu-tests step runs only the tests pytest -k selects")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs rnnexp (default: this one)")
    args = parser.parse_args(argv)
    names = [n for n in (args.only.split(",") if args.only else STEPS) if n]
    unknown = [n for n in names + [n for n in args.skip.split(",") if n] if n not in STEPS]
    if unknown:
        parser.error(f"--only/--skip: unknown step {unknown[0]} — use one of {', '.join(STEPS)}")
    names = [n for n in names if n not in args.skip.split(",")]
    if args.device is None:
        import torch  # the check itself needs only what rnnexp needs
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.out is None:
        args.out = ROOT / "outputs" / "gpu-check" / f"{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args)
    info = machine(args.python)
    steps = check.run_all(names)
    text = report(check, steps, info)
    (args.out / "report.md").write_text(text)
    (args.out / "summary.json").write_text(json.dumps(
        {"device": args.device, "machine": info, "steps": [asdict(s) for s in steps]},
        indent=1, ensure_ascii=False))
    pack(args.out)
    print(f"report: {args.out / 'report.md'}")
    return 1 if any(s.status == "failed" for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
