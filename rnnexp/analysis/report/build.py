"""A report's data (rnnexp.analysis.report.model) from a sweep's runs and, when they were
compared, compare's `Comparison`: each run a numbered cell with its status, numbers, details
and the command that measures it again; the matrix; the verdicts; the roofline; the
environments of both sides."""

from __future__ import annotations

import math
import shlex
from datetime import datetime
from typing import Any, Callable, Optional, Sequence

from rnnexp.analysis import compare_costs, roofline_chart
from rnnexp.analysis.report import model as m
from rnnexp.analysis.significance import Difference
from rnnexp.analysis.sweeps import COMMIT, PHASES, WHEN, Run
from rnnexp.machine import platform
from rnnexp.results.result import (
    CRASHED,
    INTERRUPTED,
    INVALID,
    OK,
    RECOMPILED,
    UNSUPPORTED,
    PhaseStats,
    Row,
    format_quartiles,
    label,
)

# Where a report's samples chart would grow past a few kB per cell: the rest is thinned
# (every k-th sample), and the chart says so.
MAX_SAMPLES = 400
HEADLINES = {OK: "ok", UNSUPPORTED: "refused", INVALID: "verification failed",
             RECOMPILED: "recompiled while timed", CRASHED: "crashed",
             INTERRUPTED: "interrupted"}
VERDICTS = {"faster": m.FASTER, "slower": m.SLOWER, "~": m.SAME, "?": m.CANNOT_TELL}
TIMED_PHASES = (("fwd", "forward"), ("bwd", "backward"), ("fwd+bwd", "total"))


def num(value: Any, spec: str = ".4g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{format(value, spec)}{unit}"


def kind_of(run: Run) -> str:
    status = run.row.status
    if status == OK:
        return m.FLAGGED if run.flags else m.OK
    if status == UNSUPPORTED:
        return m.REFUSED
    return m.INVALID if status == INVALID else m.FAILED


def verification_line(run: Run) -> str:
    """A failed verification's numbers in one line."""
    v = run.result.verification
    if v is None:
        return run.row.reason
    parts = []
    if v.multiple is not None and v.allowed_multiple is not None:
        parts.append(f"error {v.multiple:.3g}× the reference's in its dtype (allowed "
                     f"{v.allowed_multiple:g}×)")
    elif v.atol is not None:
        parts.append(f"beyond atol {v.atol:g} + rtol {v.rtol or 0:g}·|reference|")
    if v.max_abs_error is not None:
        parts.append(f"max |model − float64| {v.max_abs_error:.3g}")
    if v.tensor:
        parts.append(f"in {v.tensor}")
    if v.detail:
        parts.append(v.detail)
    return "; ".join(parts) or run.row.reason


def reason_of(run: Run) -> str:
    kind = kind_of(run)
    if kind == m.INVALID:
        return verification_line(run)
    if kind == m.FLAGGED:
        env = run.result.environment
        return "; ".join(env.warnings) if env and env.warnings else ", ".join(run.flags)
    return " ".join(run.row.reason.split())


def headline(run: Run) -> str:
    text = HEADLINES.get(run.row.status, run.row.status)
    return f"{text} ({', '.join(run.flags)})" if run.row.status == OK and run.flags else text


def command(run: Run) -> str:
    """The command that measures this configuration again, as one run, with the code and
    torch that measured it named."""
    r = run.result
    overrides = [o for o in r.overrides if not o.startswith("hydra.")]
    # A preset that makes a sweep (hydra.mode=MULTIRUN) measures just this job as a run.
    if any(o.lstrip("+").startswith("experiment=") for o in overrides):
        overrides.append("hydra.mode=RUN")
    line = " ".join(["python -m rnnexp", *map(shlex.quote, overrides)])
    versions = [f"torch {r.platform.torch_version}"] if r.platform else []
    if r.git_commit:
        return f"git checkout {r.git_commit[:12]}  # " + ", ".join(
            ["the code that measured it", *versions]) + "\n" + line
    return line + (f"  # measured with {versions[0]}" if versions else "")


def _short(value: Optional[float]) -> Optional[float]:
    """Four significant digits: a chart needs no more, and 1,000 cells' samples stay small."""
    return None if value is None or not math.isfinite(value) else float(f"{value:.4g}")


def samples_of(run: Run) -> tuple[dict[str, list[list[Optional[float]]]], bool, str]:
    """Each timed phase's medians per round and process (interleaved), else its samples."""
    out: dict[str, list[list[Optional[float]]]] = {}
    rounds = any(len(run.stats(p).rounds_ms) and len(run.stats(p).rounds_ms[0]) > 1
                 for p, _ in PHASES)
    note = ""
    for p, _ in PHASES:
        s = run.stats(p)
        if not s.timed:
            continue
        if rounds and s.rounds_ms:
            out[p] = [[_short(v) for v in row] for row in s.rounds_ms]
        elif s.samples_ms:
            step = max(1, math.ceil(len(s.samples_ms) / MAX_SAMPLES))
            if step > 1:
                note = f"every {step}th of {len(s.samples_ms)} samples shown"
            out[p] = [[_short(v) for v in s.samples_ms[::step]]]
    return out, rounds, note


def _phase_rows(run: Run) -> list[list[str]]:
    rows = []
    for name, phase in TIMED_PHASES:
        s: PhaseStats = run.result.phase(phase)
        if not s.timed:
            if phase != "total":
                rows.append([name, s.not_applicable or "not timed", *[""] * 8])
            continue
        ci = (f"{num(s.median_ci_low_ms)}–{num(s.median_ci_high_ms)}"
              if s.median_ci_low_ms is not None else "—")
        between = (f"{num(s.between_low_ms)}–{num(s.between_high_ms)}"
                   if s.between_low_ms is not None else "—")
        rows.append([name, num(s.median_ms), num(s.iqr_ms), ci,
                     f"{num(s.p10_ms)}–{num(s.p90_ms)}", str(s.n), num(s.cv, ".1%"),
                     str(s.processes), between, num(s.between_drift, ".1%")])
    return rows


def _process_rows(run: Run) -> list[list[str]]:
    rows = []
    for name, phase in TIMED_PHASES:
        s = run.result.phase(phase)
        if s.timed and s.process_medians_ms:
            rows.append([name, ", ".join(num(v) for v in s.process_medians_ms),
                         num(s.between_spread, ".1%")])
    return rows


def _verification_rows(run: Run) -> list[tuple[str, str]]:
    v = run.result.verification
    if v is None:
        return [("status", "not recorded")]
    rows = [("status", v.status), ("max |model − float64|", num(v.max_abs_error, ".3g")),
            ("deciding tensor", v.tensor or "—"), ("rms error", num(v.error, ".3g")),
            ("reference's rms error in its dtype", num(v.reference_error, ".3g")),
            ("multiple (allowed)", f"{num(v.multiple, '.3g')} ({num(v.allowed_multiple, 'g')})"),
            ("floor", num(v.floor, ".3g"))]
    if v.atol is not None:
        rows.append(("atol / rtol", f"{v.atol:g} / {v.rtol or 0:g}"))
    if v.reference_math:
        rows.append(("reference arithmetic", v.reference_math))
    if v.detail:
        rows.append(("detail", v.detail))
    return rows


def _memory_rows(run: Run) -> list[tuple[str, str]]:
    mem = run.result.memory
    if mem is None:
        return []
    if not mem.kind:
        return [("not measured", mem.not_measured or "—")]
    return [("kind", mem.kind), ("forward peak MiB", num(mem.forward_mb, ".3g")),
            ("backward peak MiB", num(mem.backward_mb, ".3g"))]


def _startup_rows(run: Run, base: Optional[Run]) -> list[tuple[str, str]]:
    cost = run.result.compile_cost
    if cost is None:
        return []
    rows = [("compiles", "yes" if cost.compiles else "no"),
            ("build s", num(cost.build_s, ".3g")), ("compile s", num(cost.compile_s, ".3g")),
            ("first call ms", num(cost.first_call_ms, ".4g")),
            ("time to first result s", num(cost.time_to_first_s, ".3g")),
            ("steady iteration ms", num(cost.steady_ms, ".4g")),
            ("start-up overhead ms", num(cost.overhead_ms, ".4g"))]
    if base is not None:
        rows.append(("break-even against its baseline", compare_costs.break_even_cell(run, base)))
    return rows


def _gpu_text(gpu: dict) -> str:
    keys = ("sm_clock_mhz", "sm_max_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w",
            "throttle_reasons", "error", "note")
    return ", ".join(f"{k}={gpu[k]}" for k in keys if gpu.get(k) not in (None, "", []))


def _cpu_clock(env) -> str:
    governor = f", {env.governor}" if env.governor else ""
    return f"{num(env.cpu_mhz, '.0f')} ({num(env.cpu_max_mhz, '.0f')}){governor}"


# The environment as the details and the A/B difference show it: (name, value of a run).
ENVIRONMENT: list[tuple[str, Callable[[Run], str]]] = [
    ("torch", lambda r: r.result.platform.torch_version if r.result.platform else ""),
    ("CUDA", lambda r: (r.result.platform.cuda_version or "") if r.result.platform else ""),
    ("ROCm", lambda r: (r.result.platform.hip_version or "") if r.result.platform else ""),
    ("cuDNN / MIOpen", lambda r: str(r.result.platform.cudnn_version or "")
     if r.result.platform else ""),
    ("python", lambda r: str((r.result.platform.extra or {}).get("python", ""))
     if r.result.platform else ""),
    ("code (git commit)", lambda r: r.result.git_commit[:12]),
    ("device", lambda r: f"{r.result.device_name or r.result.device}"),
    ("dtype", lambda r: r.result.dtype),
    ("host", lambda r: r.result.platform.host if r.result.platform else ""),
    ("CPU", lambda r: (r.result.environment.cpu_model if r.result.environment else "")
     or (r.result.platform.cpu_name if r.result.platform else "")),
    ("cores usable / logical", lambda r: f"{r.result.environment.cores} / "
     f"{r.result.environment.logical_cores}" if r.result.environment else ""),
    ("torch threads", lambda r: str(r.result.environment.torch_threads)
     if r.result.environment else ""),
    ("thread variables", lambda r: " ".join(f"{k}={v}" for k, v in sorted(
        r.result.environment.thread_env.items())) if r.result.environment else ""),
    ("CPU clock MHz (max), governor", lambda r: _cpu_clock(r.result.environment)
     if r.result.environment else ""),
    ("GPU clocks", lambda r: _gpu_text(r.result.environment.gpu)
     if r.result.environment else ""),
    ("machine flags", lambda r: ", ".join(r.flags) or "none"),
]


def _environment_rows(run: Run) -> list[tuple[str, str]]:
    rows = [(name, get(run)) for name, get in ENVIRONMENT]
    env = run.result.environment
    if env is not None:
        for when, look in (("load before timing", env.before), ("load while timed", env.after)):
            if look is not None:
                rows.append((when, f"{'/'.join(num(v, '.2f') for v in look.load_avg)} — "
                                   f"{look.summary(env.cores)}"))
        if env.drift is not None:
            rows.append(("drift between runs", f"{env.drift:.1%} over {env.drift_runs} runs "
                                               f"({env.drift_from})"))
    rows.append(("started", run.result.started_at))
    return [(k, v) for k, v in rows if v]


def _method_rows(run: Run) -> list[tuple[str, str]]:
    t = run.result.timing
    if t is None:
        return []
    rows = [("clock", t.clock), ("warm-up / iterations (timed)", f"{t.warmup} / {t.iters} "
                                                                 f"({t.timed_iters})"),
            ("iterations per sample", str(t.block)), ("processes", str(t.processes)),
            ("stopped on", t.stopped or "—"), ("interleaved", "yes" if t.interleaved else "no")]
    inter = run.result.interleaving
    if inter is not None:
        rows.append(("window (rounds, jobs)", f"{inter.window} ({inter.rounds}, "
                                              f"{len(inter.jobs)} jobs)"))
    rows.append(("measuring s (setup, verify, warm-up, timed)",
                 f"{num(t.measure_s, '.3g')} ({num(t.setup_s, '.3g')}, {num(t.verify_s, '.3g')}"
                 f", {num(t.warmup_s, '.3g')}, {num(t.timed_s, '.3g')})"))
    return rows


def instructions(run: Run, phase: str) -> str:
    """A counted phase as the cells' table shows it: median instructions per iteration
    and the range of every counted iteration ("" where it was not counted)."""
    ins = run.result.instructions
    c = ins.phases.get(dict(PHASES)[phase]) if ins else None
    return f"{c.median / 1e6:,.3f}M ±{c.spread / 2:.3%}" if c else ""


def _count_rows(run: Run) -> list[list[str]]:
    ins = run.result.instructions
    if not ins:
        return []
    return [[name, f"{c.median:,.0f}", f"{c.low:,.0f}–{c.high:,.0f}", f"{c.spread:.3%}",
             ", ".join(f"{v:,.0f}" for v in c.process_medians),
             num(c.ns_per_instruction, ".3g")]
            for name, c in ins.phases.items()]


def _count_env(run: Run) -> str:
    ins = run.result.instructions
    return (f"{ins.tool}, one thread; {' '.join(f'{k}={v}' for k, v in ins.env.items())}; "
            f"counting took {ins.count_s:.0f} s") if ins else ""


def sections(run: Run, base: Optional[Run]) -> list[m.Section]:
    out = [m.Section("timing", columns=["phase", "median ms", "IQR ms", "median 95% CI",
                                        "p10–p90", "n", "CV", "processes",
                                        "between-process 95%", "drift"],
                     rows=_phase_rows(run))]
    counts = _count_rows(run)
    if counts:
        out.append(m.Section("instruction counts", columns=[
            "phase", "median per iteration", "range", "range / median",
            "median of each process", "ns per instruction"], rows=counts,
            note=_count_env(run)))
    processes = _process_rows(run)
    if processes:
        out.append(m.Section("processes", columns=["phase", "median ms of each process",
                                                   "spread"], rows=processes))
    for title, rows in (("memory per phase", _memory_rows(run)),
                        ("compile cost and break-even", _startup_rows(run, base)),
                        ("verification", _verification_rows(run)),
                        ("environment", _environment_rows(run)),
                        ("how it was measured", _method_rows(run))):
        if rows:
            out.append(m.Section(title, rows=[list(r) for r in rows]))
    return out


Judged = dict[tuple[int, str], Difference]  # compare's cells: (run index, phase) → difference


def verdicts(runs: Sequence[Run], bases: Sequence[Optional[Run]], judged: Judged,
             numbers: dict[int, int], keys: Sequence[str], gate: Optional[float]
             ) -> list[m.Verdict]:
    order = [p for p, _ in PHASES]
    out = []
    for (i, p), d in sorted(judged.items(), key=lambda item: (item[0][0],
                                                             order.index(item[0][1]))):
        run, base = runs[i], bases[i]
        assert base is not None
        v = VERDICTS.get(d.verdict, m.CANNOT_TELL)
        regression = v == m.SLOWER and (gate is None or d.slowdown >= gate)
        out.append(m.Verdict(
            number=i + 1, label=label(run.config, keys), phase=p,
            baseline=f"#{numbers[id(base)]}" if id(base) in numbers else base.row.label,
            baseline_ms=level(base, p, d.baseline_ms, d.unit),
            candidate_ms=level(run, p, d.candidate_ms, d.unit), processes=d.processes_text,
            speedup=d.speedup, low=d.low, high=d.high, verdict=v, text=d.cell(),
            method=d.method, p_holm=d.p_holm, why_not=d.why_not, regression=regression,
            flagged=bool(run.flags or base.flags)))
    return out


def ms(row: Row, p: str) -> str:
    """A phase's time as the console shows it: median [25th, 75th percentile]."""
    return format_quartiles(*(getattr(row, f"{p}_{s}_ms") for s in ("median", "q1", "q3")))


def level(run: Run, p: str, value: float, unit: str = "ms") -> str:
    """A side's level as a comparison estimated it (its speedup is the ratio of the two;
    in instructions for a cell judged on counts), else the run's median [quartiles]."""
    return run.shown_ms(p, value, unit) if math.isfinite(value) else ms(run.row, p)


def cells(runs: Sequence[Run], bases: Optional[Sequence[Optional[Run]]],
          judged: Judged, keys: Sequence[str], gate: Optional[float]) -> list[m.Cell]:
    numbers = {id(r): n for n, r in enumerate(runs, 1)}
    found = verdicts(runs, bases, judged, numbers, keys, gate) if bases is not None else []
    out = []
    for n, run in enumerate(runs, 1):
        base = bases[n - 1] if bases is not None else None
        samples, rounds, note = samples_of(run)
        out.append(m.Cell(
            number=n, job=run.row.job, label=run.row.label,
            axes={k: run.config.get(k, "?") for k in keys}, status=run.row.status,
            kind=kind_of(run), headline=headline(run), reason=reason_of(run),
            flags=list(run.flags),
            fwd=ms(run.row, "fwd"), bwd=ms(run.row, "bwd"),
            fwd_instr=instructions(run, "fwd"), bwd_instr=instructions(run, "bwd"),
            is_baseline=base is run, verdicts=[v for v in found if v.number == n],
            sections=sections(run, base if base is not run else None),
            command=command(run), samples=samples, rounds=rounds, samples_note=note))
    return out


def matrix(cells: Sequence[m.Cell], keys: Sequence[str]) -> m.Matrix:
    """Rows by every varying field but one, columns by that one: the backend where it
    varies, else the last."""
    keys = list(keys)
    column = "" if len(keys) < 2 else ("backend" if "backend" in keys else keys[-1])
    row_fields = [k for k in keys if k != column]
    columns = list(dict.fromkeys(c.axes.get(column, "") for c in cells)) if column else [""]
    rows: dict[tuple[str, ...], list[list[m.Cell]]] = {}
    for c in cells:
        at = tuple(c.axes.get(k, "?") for k in row_fields)
        slots = rows.setdefault(at, [[] for _ in columns])
        slots[columns.index(c.axes.get(column, "")) if column else 0].append(c)
    return m.Matrix(row_fields=row_fields, column_field=column, columns=columns,
                    rows=[m.MatrixRow(list(k), v) for k, v in rows.items()])


def roofline(runs: Sequence[Run], keys: Sequence[str]) -> Optional[m.Roofline]:
    points, missing = [], 0
    for n, run in enumerate(runs, 1):
        if run.row.status != OK:
            continue
        roof = run.roofline
        if roof is None or any(getattr(roof, k) is None for k in roofline_chart.NEEDED):
            missing += 1
            continue
        points.append(m.RooflinePoint(
            number=n, label=label(run.config, keys), intensity=roof.intensity,
            gflops=roof.gflops, peak_gflops=roof.peak_gflops, peak_gbps=roof.peak_gbps,
            where=run.where, pct_attainable=roof.pct_attainable, bound=roof.bound))
    return m.Roofline(points, missing) if points else None


def _side_value(side: Sequence[Run], get: Callable[[Run], str]) -> str:
    values = list(dict.fromkeys(get(r) or "—" for r in side))
    if len(values) == 1:
        return values[0]
    return "varies: " + ", ".join(values[:3]) + (f" (+{len(values) - 3})" if len(values) > 3
                                                  else "")


def environment(runs: Sequence[Run], bases: Optional[Sequence[Optional[Run]]],
                names: tuple[str, str] = ("baseline", "candidate")
                ) -> Optional[m.Environment]:
    """Each side's versions, device, clocks and code, and the config entries that differ
    between the sides; one column when nothing was compared."""
    timed = [r for r in runs if r.row.status == OK] or list(runs)
    if bases is None:
        sides, columns = [timed], ["this sweep"]
    else:
        pairs = [(r, b) for r, b in zip(runs, bases, strict=True)
                 if b is not None and b is not r and r.row.status == OK]
        base_side = list({id(b): b for _, b in pairs}.values())
        sides, columns = [base_side, [r for r, _ in pairs]], list(names)
        if not pairs:
            return None
    rows = [m.EnvRow(name, [_side_value(s, get) for s in sides]) for name, get in ENVIRONMENT]
    if len(sides) == 2:
        # When and from which code each side was measured are rows of their own above.
        differ = [row for k in sorted({k for s in sides for r in s for k in r.config}
                                      - {WHEN, COMMIT})
                  if (row := m.EnvRow(k, [_side_value(s, lambda r, k=k: r.config.get(k, ""))
                                          for s in sides])).differs]
        # A group that differs names its option: its own fields differ with it.
        groups = {row.name for row in differ if "." not in row.name}
        rows += [m.EnvRow(f"config {row.name}", row.values) for row in differ
                 if not any(row.name.startswith(g + ".") for g in groups)]
    return m.Environment(columns=columns, rows=[r for r in rows if any(
        v != "—" for v in r.values)])


def comparison(cells_: Sequence[m.Cell], baseline: str, min_effect: float,
               gate: Optional[float], how_judged: str, regressions: Sequence[str],
               flagged: int) -> m.Comparison:
    return m.Comparison(baseline=baseline, verdicts=[v for c in cells_ for v in c.verdicts],
                        how_judged=how_judged or "no cell could be compared",
                        min_effect=min_effect, gate=gate, regressions=list(regressions),
                        flagged=flagged)


def generated() -> str:
    commit = platform.git_commit()
    return datetime.now().strftime("%Y-%m-%d %H:%M") + (f" by rnnexp {commit[:12]}"
                                                         if commit else "")


def report(title: str, sources: Sequence[str], runs: Sequence[Run],
           bases: Optional[Sequence[Optional[Run]]], judged: Judged, keys: Sequence[str], *,
           baseline: str = "", min_effect: float = 0.03, gate: Optional[float] = None,
           how_judged: str = "", regressions: Sequence[str] = (), flagged: int = 0,
           sides: tuple[str, str] = ("baseline", "candidate"),
           series: Sequence[m.Series] = ()) -> m.Report:
    """The report of a sweep's runs (`bases` None) or of them against their baselines, as
    compare judged them (`judged`, and its lines: how_judged, regressions, flagged cells)."""
    cells_ = cells(runs, bases, judged, keys, gate)
    return m.Report(
        title=title, generated=generated(), sources=list(sources), cells=cells_,
        matrix=matrix(cells_, keys),
        comparison=None if bases is None else comparison(
            cells_, baseline, min_effect, gate, how_judged, regressions, flagged),
        roofline=roofline(runs, keys), environment=environment(runs, bases, sides),
        series=list(series))
