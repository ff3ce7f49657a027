"""The timer on a synthetic workload driven by a fake clock: counts, units, phase separation."""

import gc

import numpy as np
import pytest

from rnnexp.measure.timing import PerfCounterClock, measure
from rnnexp.results import stats


class FakeClock:
    """Time advances only when the synthetic workload says so (milliseconds)."""

    name = "fake"

    def __init__(self):
        self.now_ms = 0.0
        self.syncs = 0

    def mark(self):
        return self.now_ms

    def sync(self):
        self.syncs += 1

    def elapsed_ms(self, start, end):
        return end - start


class Synthetic:
    """Forward costs 2 ms, backward set-up 100 ms, backward 5 ms, zero_grad 50 ms."""

    def __init__(self, clock, backward=True):
        self.clock = clock
        self.has_backward = backward
        self.calls = {"forward": 0, "setup": 0, "backward": 0, "zero_grad": 0}
        self.gc_enabled_in_forward = []
        self.backward_setup = self._setup if backward else None
        self.backward = self._backward if backward else None

    def run_forward(self):
        self.calls["forward"] += 1
        self.gc_enabled_in_forward.append(gc.isenabled())
        self.clock.now_ms += 2.0
        return "out"

    def _setup(self, out):
        assert out == "out"
        self.calls["setup"] += 1
        self.clock.now_ms += 100.0
        return ("grad",)

    def _backward(self, grad):
        assert grad == "grad"
        self.calls["backward"] += 1
        self.clock.now_ms += 5.0

    def zero_grad(self):
        self.calls["zero_grad"] += 1
        self.clock.now_ms += 50.0


def test_counts_units_and_separated_phases():
    clock = FakeClock()
    work = Synthetic(clock)
    samples = measure(work, warmup=3, iters=7, clock=clock)
    assert work.calls["forward"] == 10 and work.calls["backward"] == 10
    assert len(samples.forward_ms) == 7 and len(samples.backward_ms) == 7
    # set-up (100 ms) and zeroing (50 ms) never leak into the timed phases
    assert samples.forward_ms == [2.0] * 7
    assert samples.backward_ms == [5.0] * 7
    assert samples.total_ms == [7.0] * 7
    assert clock.syncs >= 10  # the device is drained every iteration


def test_forward_only_workload_times_no_backward():
    clock = FakeClock()
    work = Synthetic(clock, backward=False)
    samples = measure(work, warmup=1, iters=4, clock=clock)
    assert samples.backward_ms == [] and samples.forward_ms == [2.0] * 4


def test_backward_can_be_switched_off():
    clock = FakeClock()
    work = Synthetic(clock)
    samples = measure(work, warmup=0, iters=2, clock=clock, backward=False)
    assert work.calls["backward"] == 0 and samples.backward_ms == []


def test_gc_is_off_while_timing_and_restored():
    clock = FakeClock()
    work = Synthetic(clock)
    assert gc.isenabled()
    measure(work, warmup=1, iters=2, clock=clock)
    assert work.gc_enabled_in_forward == [False] * 3
    assert gc.isenabled()


def test_progress_reports_both_phases():
    events = []

    class Recorder:
        def phase(self, name, total):
            events.append((name, total))

        def advance(self):
            events.append("step")

    clock = FakeClock()
    measure(Synthetic(clock), warmup=2, iters=3, clock=clock, progress=Recorder())
    assert events[0] == ("warmup", 2)
    assert ("timed", 3) in events and events.count("step") == 5


def test_perf_counter_clock_is_in_milliseconds():
    clock = PerfCounterClock()
    assert clock.elapsed_ms(1.0, 1.5) == pytest.approx(500.0)


def test_statistics_and_rates():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_ms"] == 3.0 and s["n"] == 5 and s["min_ms"] == 1.0
    assert s["iqr_ms"] == pytest.approx(2.0)
    assert s["p10_ms"] < s["median_ms"] < s["p90_ms"]
    assert s["cv"] == pytest.approx(s["std_ms"] / s["mean_ms"])
    r = stats.rates(2.0, tokens=1000, flops=4e9, nbytes=2e9)
    assert r["tokens_per_s"] == pytest.approx(500_000)
    assert r["gflops"] == pytest.approx(2000) and r["gbps"] == pytest.approx(1000)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_median_confidence_interval():
    rng = np.random.default_rng(0)
    low, high = stats.median_ci(rng.normal(10.0, 1.0, 200))
    assert low < 10.0 < high and high - low < 0.6
    assert all(np.isnan(stats.median_ci([1.0, 2.0, 3.0])))  # too few for a 95% interval
    assert stats.precise_enough([5.0] * 20, 0.01)
    assert not stats.precise_enough(list(rng.uniform(1.0, 9.0, 20)), 0.01)


@pytest.mark.parametrize("n", [1, 5, 6, 9, 17, 20, 51, 100, 1001])
def test_median_interval_and_t_quantile_match_scipy_stats(n):
    from scipy import stats as sps

    a = np.random.default_rng(n).lognormal(0.0, 0.3, n)
    ci = sps.quantile_test(a, q=float(np.median(a)), p=0.5).confidence_interval(0.95)
    assert np.allclose(stats.median_ci(a), (ci.low, ci.high), equal_nan=True)
    assert stats.t_quantile(0.975, n) == pytest.approx(sps.t.ppf(0.975, n))


class Jittery(Synthetic):
    """Forward time spread uniformly over 0-30 ms extra: 60 samples cannot pin its median
    to ±2%."""

    rng = np.random.default_rng(1)

    def run_forward(self):
        out = super().run_forward()
        self.clock.now_ms += float(self.rng.uniform(0.0, 30.0))
        return out


@pytest.mark.parametrize("cls, expected, stopped", [(Synthetic, 10, "precision"),
                                                    (Jittery, 60, "iters")])
def test_one_process_stops_once_its_median_is_known_well_enough(cls, expected, stopped):
    """The scheduler's rule for a lone process (bench.processes=1 with a precision target),
    asked after every sample as a round of one would."""
    from rnnexp.config.schema import BenchConfig
    from rnnexp.measure.records import Samples
    from rnnexp.measure.timing import Timer
    from rnnexp.run import schedule

    bench = BenchConfig(iters=60, min_iters=10, precision=0.02, processes=1, max_processes=1)
    clock = FakeClock()
    timer, samples = Timer(cls(clock), clock), Samples()
    while not (reason := schedule.stop_reason(bench, [samples], 0.0)):
        timer.run(1, samples=samples)
    # Identical samples stop at min_iters; spread ones run to the most allowed.
    assert (len(samples.forward_ms), reason) == (expected, stopped)


def test_blocked_samples_are_per_iteration_means_of_back_to_back_iterations():
    clock = FakeClock()
    work = Synthetic(clock)
    progress = []

    class Recorder:
        def phase(self, name, total):
            progress.append(name)

        def advance(self):
            progress.append("step")

    samples = measure(work, warmup=2, iters=4, clock=clock, block_ms=20.0, progress=Recorder())
    # The block is sized from the warm-up's real wall time (the fake clock only moves inside
    # the workload), so check what holds for any block: every sample is a per-iteration
    # mean, and set-up never leaks in.
    block = samples.block
    assert block >= 1 and work.calls["forward"] == 2 + 4 * block
    assert samples.forward_ms == [2.0] * 4 and samples.backward_ms == [5.0] * 4
    assert progress.count("step") == 2 + 4  # one step per sample, not per iteration
    assert work.calls["zero_grad"] >= 4 * block  # gradients cleared every iteration


def test_block_size_reaches_the_block_length():
    from rnnexp.measure.timing import block_for

    assert block_for(0.01, 1.0) == 100  # 10 µs iterations: 100 per ≥1 ms sample
    assert block_for(3.0, 1.0) == 1 and block_for(0.01, 0.0) == 1
    assert block_for(0.0, 1.0) == 1  # nothing to size from
    assert block_for(1e-9, 1.0) == 10_000  # capped


def test_a_timer_continues_across_rounds_with_one_block_size():
    from rnnexp.measure.timing import Timer

    clock = FakeClock()
    work = Synthetic(clock)
    timer = Timer(work, clock)
    timer.warmup(1)
    samples = timer.run(3, block=5)
    timer.run(2, block=5, samples=samples)
    assert len(samples.forward_ms) == 5 and samples.block == 5
    assert work.calls["forward"] == 1 + 25 and samples.total_ms == [7.0] * 5


class Marked(Synthetic):
    """A workload whose backend replays CUDA graphs: it wants a step mark before each
    iteration's forward. Step marks cost 1000 ms on the fake clock, so a mark inside a
    timed region would show in the samples."""

    def __init__(self, clock, backward=True):
        super().__init__(clock, backward)
        self.log = []

    def step_begin(self):
        self.log.append("step")
        self.clock.now_ms += 1000.0

    def run_forward(self):
        self.log.append("forward")
        return super().run_forward()


@pytest.mark.parametrize("backward", [True, False])
@pytest.mark.parametrize("block_ms", [0.0, 20.0])
def test_cuda_graph_step_marks_come_before_every_forward_outside_the_timed_region(
        backward, block_ms):
    clock = FakeClock()
    steps = Marked(clock, backward)
    samples = measure(steps, warmup=2, iters=3, clock=clock, backward=backward,
                      block_ms=block_ms)
    assert steps.log == ["step", "forward"] * steps.calls["forward"]
    assert set(samples.forward_ms) == {2.0}
    assert set(samples.backward_ms) == ({5.0} if backward else set())


def test_workloads_without_cuda_graphs_get_no_step_marks():
    clock = FakeClock()
    steps = Synthetic(clock)  # no step_begin attribute at all
    measure(steps, warmup=1, iters=2, clock=clock)
    assert steps.calls["forward"] == 3
