"""What decides whether a job's timings can be trusted, read around its timed loop: load, other
busy processes, threads against cores, CPU frequency policy, GPU clocks and throttling — and
the guard that waits for, warns about or refuses a busy machine (`bench.quiet`).

psutil reads processes and load; NVIDIA clocks come from nvidia-ml-py (`pip install
rnnexp[gpu]`) when it is installed. Nothing here knows about models or sinks.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import psutil

from rnnexp.errors import UnsupportedError
from rnnexp.machine import scheduler

if TYPE_CHECKING:
    import torch

# Other processes using this many cores on average (over a short look) make the machine busy;
# on a large machine a tenth of its cores, whichever is more.
BUSY_CORES = 0.5
BUSY_SHARE = 0.1
LOOK_S = 0.3  # how long a look of its own (bench.quiet=wait) samples CPU use
# The shortest window a look spans; the looks around a job span its set-up and its timed
# samples, which usually last longer, so they cost nothing extra.
MIN_LOOK_S = 0.1
TOP_PROCESSES = 3

# torch.utils.benchmark warns when IQR/median exceeds this (its private
# _IQR_WARN_THRESHOLD, utils/common.py; a test keeps the two equal).
IQR_WARN = 0.1

# Thread-count variables that OpenMP, MKL and other BLAS libraries read at start-up.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
               "KMP_AFFINITY", "GOMP_CPU_AFFINITY")
GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")

# Flags a result can carry.
BUSY = "busy"
OVERSUBSCRIBED = "oversubscribed"
HIGH_SPREAD = "high_spread"
GPU_THROTTLED = "gpu_throttled"
DRIFTING = "drifting"
# A configuration's median moving by more than this between its runs (1σ, relative;
# rnnexp.run.drift) is flagged: a rerun may land about 2.8× as far away.
DRIFT_WARN = 0.05


@dataclass
class Look:
    """One look at the machine: load average and what other processes were doing."""

    load_avg: tuple = ()  # 1, 5, 15 minutes
    other_cores: float = 0.0  # CPU used by processes outside this job, in cores
    top: list[str] = field(default_factory=list)  # the busiest of them, "name[pid] 97%"
    # Over timed rounds, looked at after each (Watch): how many rounds, in how many of them
    # other processes used a busy machine's share of the cores, the most they used in one,
    # and how many of their tasks were runnable at a round's end, on average.
    rounds: int = 0
    busy_rounds: int = 0
    peak_cores: float = 0.0
    run_queue: float = 0.0

    def summary(self, cores: int) -> str:
        top = f" ({', '.join(self.top)})" if self.top else ""
        text = f"other processes used {self.other_cores:.1f} of {cores} cores{top}"
        if self.rounds:
            text += (f", {self.peak_cores:.1f} at most; busy in {self.busy_rounds} of "
                     f"{self.rounds} rounds, {self.run_queue:.1f} of their tasks runnable "
                     "on average")
        return text


@dataclass
class Environment:
    cores: int = 0  # usable by this process (CPU affinity)
    logical_cores: int = 0
    torch_threads: int = 0
    interop_threads: int = 0
    thread_env: dict[str, str] = field(default_factory=dict)
    cpu_model: str = ""
    cpu_mhz: Optional[float] = None
    cpu_max_mhz: Optional[float] = None
    governor: str = ""
    gpu: dict[str, Any] = field(default_factory=dict)
    before: Optional[Look] = None  # over the set-up, up to right before the timed samples
    after: Optional[Look] = None  # over the timed samples (and the backend's finish)
    quiet: str = ""  # the bench.quiet policy in force
    malloc: str = ""  # the measuring processes' malloc thresholds (rnnexp.machine.malloc)
    waited_s: float = 0.0  # time spent waiting for a quiet machine
    # How much this configuration's median moved between its earlier runs here (rnnexp.run.drift):
    # 1σ of their log fwd+bwd medians (None: not known), how many runs, over how many hours,
    # and whose runs: "own", or "pooled from N configurations" measured here.
    drift: Optional[float] = None
    drift_runs: int = 0
    drift_hours: float = 0.0
    drift_from: str = ""
    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # why each flag was raised
    # The cluster job it ran in (rnnexp.machine.scheduler): node, job and array ids, restarts.
    scheduler: dict[str, str] = field(default_factory=dict)

    def flag(self, name: str, why: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
        self.warnings.append(why)

    def warning_line(self) -> str:
        """One line for the console, empty when nothing is flagged."""
        if not self.warnings:
            return ""
        return "timings may not be trustworthy: " + "; ".join(self.warnings)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Environment:
        names = set(cls.__dataclass_fields__)
        known = {k: v for k, v in data.items() if k in names}
        for key in ("before", "after"):
            if known.get(key):
                look = known[key]
                fields = {k: v for k, v in look.items() if k in Look.__dataclass_fields__}
                known[key] = Look(**{**fields, "load_avg": tuple(look.get("load_avg") or ()),
                                     "top": list(look.get("top") or [])})
        return cls(**known)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _our_processes() -> set[int]:
    """This job's process, its children and its ancestors (the launcher that waits on it)."""
    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(p.pid for p in me.children(recursive=True))
        pids.update(p.pid for p in me.parents())
    except psutil.Error:
        pass
    return pids


@dataclass
class Snapshot:
    """CPU seconds used so far by every process, at one moment: two of them give what each
    process used in between, with no sleeping in this process."""

    at: float
    cpu: dict[int, tuple[float, str]]  # pid → (user + system seconds, "name[pid]")


def snapshot() -> Snapshot:
    cpu = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info.get("cpu_times")
        if times is not None:
            cpu[p.pid] = (times.user + times.system, f"{p.info.get('name') or '?'}[{p.pid}]")
    return Snapshot(time.monotonic(), cpu)


def usage(start: Snapshot, end: Snapshot, exclude: set[int]) -> list[tuple[float, str]]:
    """(% of one core, "name[pid]") of every process seen at both moments and not excluded,
    busiest first (a process started in between is not counted)."""
    elapsed = max(end.at - start.at, 1e-6)
    return sorted(((100 * (cpu - start.cpu[pid][0]) / elapsed, name)
                   for pid, (cpu, name) in end.cpu.items()
                   if pid in start.cpu and pid not in exclude), reverse=True)


def cpu_by_process(seconds: float, exclude: set[int]) -> list[tuple[float, str]]:
    """(% of one core, "name[pid]") of every process not excluded, over `seconds`, busiest
    first."""
    start = snapshot()
    time.sleep(seconds)
    return usage(start, snapshot(), exclude)


class LastLook:
    """Where this process's last look at the machine ended. In a sweep whose jobs run one
    after the other in one process, the next job's look starts there: it spans the gap
    between jobs (the launcher's own work, not counted) instead of sleeping to be long
    enough. Per process: a look is only comparable with snapshots of the same machine."""

    def __init__(self) -> None:
        self._end: Optional[Snapshot] = None

    def get(self, max_age_s: float) -> Optional[Snapshot]:
        end = self._end
        return end if end is not None and time.monotonic() - end.at <= max_age_s else None

    def ended(self, end: Snapshot) -> None:
        self._end = end


LAST_LOOK = LastLook()  # this process's


def last_look(max_age_s: float = 5.0) -> Optional[Snapshot]:
    """Where this process's last look ended, if it was at most `max_age_s` ago (LAST_LOOK):
    in a sweep, the previous job's."""
    return LAST_LOOK.get(max_age_s)


def look_since(start: Snapshot, min_s: float = MIN_LOOK_S,
               earlier: Optional[Snapshot] = None) -> Look:
    """Load average and the CPU other processes used from `start` to now. CPU times tick in
    10 ms, so a window shorter than `min_s` is noise: it starts at `earlier` instead if
    given, else this sleeps until it is long enough."""
    if earlier is not None and time.monotonic() - start.at < min_s:
        start = earlier
    rest = min_s - (time.monotonic() - start.at)
    if rest > 0:
        time.sleep(rest)
    end = snapshot()
    LAST_LOOK.ended(end)
    used = usage(start, end, _our_processes())
    try:
        load = tuple(round(x, 2) for x in os.getloadavg())
    except OSError:
        load = ()
    return Look(load_avg=load, other_cores=round(sum(pct for pct, _ in used) / 100, 2),
                top=[f"{name} {pct:.0f}%" for pct, name in used[:TOP_PROCESSES] if pct >= 5])


def look(seconds: float = LOOK_S) -> Look:
    """Load average and the CPU other processes use over the next `seconds`."""
    return look_since(snapshot(), seconds)


def busy_cores(cores: int) -> float:
    """Cores other processes use on a busy machine."""
    return max(BUSY_CORES, BUSY_SHARE * cores)


def busy_reason(seen: Look, cores: int) -> str:
    """Why the machine counts as busy, or "" when it does not: other processes used a busy
    machine's share of the cores on average, in a quarter of the timed rounds or more, or
    had that many tasks runnable at the rounds' ends on average."""
    if seen.other_cores >= busy_cores(cores) or seen.run_queue >= max(1.0, busy_cores(cores)) \
            or (seen.rounds and seen.busy_rounds >= BUSY_ROUNDS * seen.rounds):
        return f"machine busy: {seen.summary(cores)}"
    return ""


# The share of timed rounds in which others may use a busy machine's share of the cores
# before the measurement counts as busy: a burst in a round or two moves medians by a rank,
# contention through a quarter of them moves the level.
BUSY_ROUNDS = 0.25


class Watch:
    """Other processes' use of the machine while rounds are timed, looked at after each
    round: the CPU time the whole machine spent (/proc/stat, psutil.cpu_times: processes
    that started and ended inside a round count too, and a virtual machine's stolen time)
    less what this job's processes spent, and the tasks runnable beyond this one
    (/proc/loadavg). Costs a few file reads a round, never during a timed sample."""

    def __init__(self) -> None:
        self.pids = _our_processes()
        # (other cores, others runnable, resolved): a round is judged over the span from the
        # newest earlier read at least MIN_LOOK_S before its end — over a few milliseconds
        # one 10 ms tick of /proc/stat reads as whole cores — and a round no such read
        # precedes (the first ones of a short measurement) is never counted busy.
        self.rounds: list[tuple[float, float, bool]] = []
        self._last = self._read()
        self._first = self._last
        self._reads = [self._last]  # the reads a later round's span may start at

    def refresh(self) -> None:
        """This job's processes again (a worker was added)."""
        self.pids = _our_processes() | self.pids

    def _read(self) -> tuple[float, float, dict[int, float]]:
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0) \
            - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
        ours = {}
        for pid in self.pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            ours[pid] = t.user + t.system
        return time.monotonic(), busy, ours

    @staticmethod
    def _others(start, end) -> tuple[float, float]:
        """(seconds, cores) others used between two reads (a process of ours seen at one
        end only is counted as others': it started or ended in between)."""
        elapsed = max(end[0] - start[0], 1e-6)
        ours = sum(end[2][p] - start[2][p] for p in end[2] if p in start[2])
        others = max(0.0, end[1] - start[1] - ours)
        return elapsed, others / elapsed

    def tick(self) -> None:
        """After a round."""
        now = self._read()
        spans = [r for r in self._reads if now[0] - r[0] >= MIN_LOOK_S]
        start = spans[-1] if spans else self._first
        _, cores = self._others(start, now)
        self._last = now
        if spans:  # reads older than the newest one a span can start at are never needed
            del self._reads[:len(spans) - 1]
        self._reads.append(now)
        self.rounds.append((cores, others_runnable(self.pids), bool(spans)))

    def look(self, top: Optional[Look] = None) -> Look:
        """Over every round since the start; the busiest processes' names from `top`. Rounds
        that lasted less than MIN_LOOK_S in all are judged over that long: this waits for
        the rest (after the last sample)."""
        rest = MIN_LOOK_S - (self._last[0] - self._first[0])
        if rest > 0:
            time.sleep(rest)
            self._last = self._read()
        _, cores = self._others(self._first, self._last)
        try:
            load = tuple(round(x, 2) for x in os.getloadavg())
        except OSError:
            load = ()
        limit = busy_cores(usable_cores())
        return Look(load_avg=load, other_cores=round(cores, 2),
                    top=list(top.top) if top else [], rounds=len(self.rounds),
                    busy_rounds=sum(seen and c >= limit for c, _, seen in self.rounds),
                    peak_cores=round(max((c for c, _, seen in self.rounds if seen),
                                         default=0.0), 2),
                    run_queue=round(sum(q for _, q, _ in self.rounds) / len(self.rounds), 2)
                    if self.rounds else 0.0)


def runnable() -> int:
    """Tasks runnable on the machine now (/proc/loadavg's 4th field; 0 where unreadable)."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return 0


def running_threads(pids: set[int]) -> int:
    """Threads of `pids` runnable now (state R in /proc/<pid>/task/<tid>/stat): the reader
    itself, and a worker's OpenMP threads still spinning after its turn."""
    count = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            count += stat.rpartition(")")[2].split()[:1] == ["R"]
    return count


def others_runnable(pids: set[int]) -> float:
    """Tasks runnable now that are not this job's: the machine's less this job's own threads
    (read on both sides of the machine's count, the larger taken: a thread of ours that stops
    spinning in between must not read as someone else's)."""
    before = running_threads(pids)
    total = runnable()
    return float(max(0, total - max(before, running_threads(pids), 1)))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _nvml():
    """The pynvml module, or None where nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


NVML_MISSING = {"note": "install rnnexp[gpu] (nvidia-ml-py) to record clocks and throttling"}


def reads_nvml(device: torch.device) -> bool:
    """NVML describes NVIDIA GPUs only: not CPU jobs, not AMD GPUs (ROCm builds)."""
    import torch  # here: results, and the commands that read them, load without torch

    return device.type == "cuda" and not getattr(torch.version, "hip", None)


def pci_bus_id(props: Any) -> Optional[str]:
    """The "DDDD:BB:DD.0" string NVML looks GPUs up by, from torch's device properties, whose
    pci_domain_id/pci_bus_id/pci_device_id are ints (as torch/numa/binding.py formats them).
    nvidia-ml-py hands its argument to c_char_p, which takes an int as an address: passing
    the int itself makes NVML read memory at that address and crash the process."""
    ids = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return None
    domain, bus, dev = ids
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def nvml_handle(pynvml: Any, device: torch.device) -> Any:
    """NVML's handle of the job's GPU. NVML numbers GPUs without CUDA_VISIBLE_DEVICES: find
    ours by its PCI bus id, else by its UUID; the index only where nothing is hidden."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    bus_id = pci_bus_id(props)
    if bus_id:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-")
                                                else f"GPU-{uuid}")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _throttle_names(pynvml: Any) -> dict[int, str]:
    return {v: k.removeprefix("nvmlClocksThrottleReason")
            for k, v in vars(pynvml).items()
            if k.startswith("nvmlClocksThrottleReason") and isinstance(v, int)
            and k not in ("nvmlClocksThrottleReasonAll", "nvmlClocksThrottleReasonNone")}


def nvml_reading(pynvml: Any, handle: Any) -> dict[str, Any]:
    """One reading: SM/memory clocks, temperature, power and clock-throttle reasons."""
    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = reasons_fn(handle)
    return {
        "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "sm_max_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "throttle_reasons": sorted(n for bit, n in _throttle_names(pynvml).items()
                                   if mask & bit),
    }


def _nvml_error(err: Exception) -> dict[str, Any]:
    return {"error": f"{type(err).__name__}: {err}"[:200]}


def gpu_state(device: torch.device) -> dict[str, Any]:
    """One reading of an NVIDIA GPU's clocks, temperature, power and clock-throttle reasons,
    if nvidia-ml-py is installed; {} otherwise (CPU jobs, AMD GPUs)."""
    if not reads_nvml(device):
        return {}
    pynvml = _nvml()
    if pynvml is None:
        return dict(NVML_MISSING)
    try:
        pynvml.nvmlInit()
        return nvml_reading(pynvml, nvml_handle(pynvml, device))
    except Exception as err:  # NVML missing or refused: recorded, never fatal
        return _nvml_error(err)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# How often the sampler reads NVML while the timed rounds run. NVML calls release the GIL
# (ctypes), so a reading every quarter second costs the timing process nothing measurable.
GPU_SAMPLE_S = 0.25


class GpuSampler:
    """NVML read while the timed rounds run (`start()` before them, `stop()` right after):
    a reading taken after timing sees idle clocks and misses a throttle that slowed the
    samples. The record holds the lowest and highest SM clock read, the hottest and most
    power-hungry reading, and every throttle reason seen at any reading."""

    def __init__(self, device: torch.device, interval_s: float = GPU_SAMPLE_S):
        self.device = device
        self.interval_s = interval_s
        self._readings: list[dict[str, Any]] = []
        self._error: Optional[dict[str, Any]] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._pynvml: Any = None
        self._handle: Any = None
        self._record: Optional[dict[str, Any]] = None

    def start(self) -> GpuSampler:
        if not reads_nvml(self.device):
            return self
        self._pynvml = _nvml()
        if self._pynvml is None:
            return self
        try:
            self._pynvml.nvmlInit()
            self._handle = nvml_handle(self._pynvml, self.device)
            self._read()
        except Exception as err:  # NVML missing or refused: recorded, never fatal
            self._error = _nvml_error(err)
            return self
        self._thread = threading.Thread(target=self._run, name="rnnexp-nvml", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        self._readings.append(nvml_reading(self._pynvml, self._handle))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._read()
            except Exception as err:
                self._error = _nvml_error(err)
                return

    def stop(self) -> dict[str, Any]:
        """The record of the timed rounds ({} where NVML does not apply); a second call
        returns the same record."""
        if self._record is None:
            self._record = self._finish()
        return self._record

    def _finish(self) -> dict[str, Any]:
        if not reads_nvml(self.device):
            return {}
        if self._pynvml is None:
            return dict(NVML_MISSING)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._error is None:
                self._read()
        except Exception as err:
            self._error = _nvml_error(err)
        finally:
            try:
                self._pynvml.nvmlShutdown()
            except Exception:
                pass
        return summarise_readings(self._readings, self._error)


def summarise_readings(readings: Sequence[Mapping[str, Any]],
                       error: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The last reading's values, the lowest SM clock, the highest temperature and power, and
    every throttle reason any reading saw."""
    if not readings:
        return dict(error or {})
    out = dict(readings[-1])
    clocks = [r["sm_clock_mhz"] for r in readings]
    out.update(sm_clock_mhz=min(clocks), sm_clock_max_read_mhz=max(clocks),
               temperature_c=max(r["temperature_c"] for r in readings),
               power_w=max(r["power_w"] for r in readings),
               throttle_reasons=sorted({n for r in readings for n in r["throttle_reasons"]}),
               readings=len(readings), read="during the timed rounds")
    if error:
        out.update(error)
    return out


# Throttle reasons that lower clocks below what the work asks for (idle and an application
# clock setting are not a slowdown of the timed work).
SLOWDOWNS = ("HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "SwThermalSlowdown",
             "SwPowerCap")


def machine(cpu_model: str = "") -> Environment:
    """The static part: cores, threads, thread variables, CPU frequency policy."""
    import torch

    freq = None
    try:
        freq = psutil.cpu_freq()
    except (OSError, RuntimeError, NotImplementedError):
        pass
    return Environment(
        cores=usable_cores(), logical_cores=psutil.cpu_count() or 0,
        torch_threads=torch.get_num_threads(), interop_threads=torch.get_num_interop_threads(),
        thread_env={k: os.environ[k] for k in THREAD_VARS if k in os.environ},
        cpu_model=cpu_model, cpu_mhz=round(freq.current, 1) if freq and freq.current else None,
        cpu_max_mhz=round(freq.max, 1) if freq and freq.max else None,
        governor=_read(GOVERNOR), scheduler=scheduler.slurm_job())


def settle(mode: str, timeout_s: float, progress=None,
           looker: Callable[[], Look] = look, first: Optional[Look] = None
           ) -> tuple[Look, float]:
    """Look at the machine before timing (`first`, if already taken), under the `bench.quiet`
    policy: `warn` times anyway (the result is flagged), `wait` looks again until the machine
    is quiet, up to `timeout_s`, then declines, `refuse` declines at once. Returns the last
    look and the seconds waited."""
    cores = usable_cores()
    seen = first if first is not None else looker()
    waited = 0.0
    reason = busy_reason(seen, cores)
    if not reason or mode == "warn":
        return seen, waited
    if mode == "wait":
        if progress is not None:
            progress.phase("waiting for a quiet machine (s)", int(timeout_s))
        t0 = time.monotonic()
        while reason and time.monotonic() - t0 < timeout_s:
            time.sleep(max(0.0, 1.0 - LOOK_S))
            seen = looker()
            reason = busy_reason(seen, cores)
            if progress is not None:
                progress.advance()
        waited = time.monotonic() - t0
        if not reason:
            return seen, waited
        raise UnsupportedError(f"bench.quiet=wait: still busy after {waited:.0f} s — {reason}; "
                               "raise bench.quiet_timeout_s or use bench.quiet=warn")
    raise UnsupportedError(f"bench.quiet=refuse: {reason} — time on a quiet machine, or use "
                           "bench.quiet=wait or bench.quiet=warn")


def assess(env: Environment, spreads: Mapping[str, float], device: torch.device) -> None:
    """Flag what makes these timings doubtful: a busy machine before or while timing,
    more threads than cores free for them, a spread above torch.utils.benchmark's warning
    threshold (IQR/median, per phase), a median that drifts between runs, a
    throttled GPU."""
    for when, seen in (("before timing", env.before), ("while timing", env.after)):
        reason = busy_reason(seen, env.cores) if seen else ""
        if reason:
            env.flag(BUSY, f"{reason} {when}")
            break
    others = max((s.other_cores for s in (env.before, env.after) if s), default=0.0)
    if device.type == "cpu":
        if env.torch_threads > env.cores:
            env.flag(OVERSUBSCRIBED, f"{env.torch_threads} torch threads on {env.cores} cores")
        elif env.torch_threads + round(others) > env.cores:
            env.flag(OVERSUBSCRIBED, f"{env.torch_threads} torch threads + {others:.1f} cores "
                                     f"busy elsewhere > {env.cores} cores (set "
                                     "bench.num_threads lower)")
    high = {p: s for p, s in spreads.items() if s > IQR_WARN}
    if high:
        env.flag(HIGH_SPREAD, "spread high: " + ", ".join(
            f"{p} IQR {100 * s:.0f}% of median" for p, s in high.items())
                 + f" (torch.utils.benchmark warns above {100 * IQR_WARN:.0f}%)")
    if env.drift is not None and env.drift > DRIFT_WARN:
        whose = "this configuration's" if env.drift_from == "own" else \
            f"other configurations' ({env.drift_from})"
        env.flag(DRIFTING, f"medians move ±{100 * env.drift:.0f}% (1σ) between runs here "
                           f"({whose} {env.drift_runs} runs in {env.drift_hours:.1f} h): the "
                           "between-run interval includes it")
    slow = [r for r in env.gpu.get("throttle_reasons", ()) if r in SLOWDOWNS]
    if slow:
        env.flag(GPU_THROTTLED, f"GPU clocks throttled ({', '.join(slow)})")


# Fewer samples than this say nothing of the machine by their quartiles (bench=quick's 3
# samples would flag almost every job): their spread is not judged.
SPREAD_MIN_SAMPLES = 10


def spreads_of(phases: Mapping[str, Any], names: Sequence[str] = ("forward", "backward")
               ) -> dict[str, float]:
    """IQR/median of each timed phase with enough samples to have quartiles."""
    out = {}
    for name in names:
        p = phases.get(name)
        if p is not None and p.timed and p.median_ms and p.iqr_ms is not None \
                and p.n >= SPREAD_MIN_SAMPLES:
            out[name] = p.iqr_ms / p.median_ms
    return out
