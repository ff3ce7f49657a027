"""The noisy bisection's decisions on simulated probes: it finds the first slow environment,
stops when that is known to the confidence asked (and not before), never reads a failed
probe as a slowdown, and says so when the bad end is not slower."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnexp.analysis.bisect import Bisection, Probe, Z
from rnnexp.analysis.significance import Difference


def measured(index: int, slowdown: float, se: float) -> Probe:
    """A probe that measured `slowdown` (log) with standard error `se`."""
    return Probe(index, Difference(speedup=math.exp(-slowdown), low=math.exp(-slowdown - Z * se),
                                   high=math.exp(-slowdown + Z * se), p=0.01))


def search(n: int, culprit: int, step: float, se: float, rng, confidence: float = 0.95,
           failing: frozenset = frozenset(), limit: int = 60) -> Bisection:
    b = Bisection(n, confidence)
    while len(b.probes) < limit:
        m = b.next_probe()
        if m is None:
            break
        if m in failing:
            b.observe(Probe(m, failed="build: setup.py failed"))
        else:
            b.observe(measured(m, rng.normal(step if m >= culprit else 0.0, se), se))
    return b


def test_a_step_among_64_environments_is_found_in_few_probes():
    rng = np.random.default_rng(0)
    right = probes = 0
    for _ in range(40):
        culprit = int(rng.integers(1, 64))
        b = search(64, culprit, step=0.03, se=0.005, rng=rng)
        found, p = b.culprit()
        right += found == culprit and p >= 0.95
        probes = max(probes, len(b.probes))
    assert right >= 38 and probes <= 14


def test_it_stops_once_the_breakpoint_is_known_and_not_before():
    rng = np.random.default_rng(1)
    b = search(16, 9, step=0.1, se=0.02, rng=rng)
    assert b.known() and b.next_probe() is None and b.culprit()[0] == 9
    # Every shorter prefix of its probes left the breakpoint unknown.
    for k in range(len(b.probes)):
        partial = Bisection(16, 0.95, b.probes[:k])
        assert not partial.known()


def test_asking_more_confidence_takes_more_probes():
    counts = {}
    for confidence in (0.8, 0.99):
        rng = np.random.default_rng(2)
        counts[confidence] = np.mean([len(search(32, 20, 0.05, 0.02, rng, confidence).probes)
                                      for _ in range(8)])
    assert counts[0.99] > counts[0.8]


def test_the_bad_end_is_probed_first_and_a_bad_end_as_fast_as_the_good_one_ends_it():
    b = Bisection(10)
    assert b.next_probe() == 9
    b.observe(measured(9, 0.001, 0.002))
    assert b.effect_is_real() is False and b.next_probe() is None


def test_an_undecided_bad_end_is_probed_again():
    b = Bisection(10)
    b.observe(measured(9, 0.02, 0.02))  # +2% ± 4%: could be either
    assert b.effect_is_real() is None and b.next_probe() == 9


def test_a_failed_probe_is_no_slowdown_and_is_not_chosen_again():
    b = Bisection(8)
    b.observe(measured(7, 0.1, 0.01))
    before = b.posterior().copy()
    m = b.next_probe()
    b.observe(Probe(m, failed="verification_failed: outputs differ"))
    assert np.allclose(b.posterior(), before)  # the posterior did not move
    assert b.next_probe() != m


def test_a_breakpoint_beside_a_failed_environment_is_a_range():
    rng = np.random.default_rng(3)
    b = search(16, 6, step=0.1, se=0.01, rng=rng, failing=frozenset({5}))
    assert not b.known()  # 5 never measured: b = 5 and b = 6 cannot be told apart
    assert b.likely_range() == (5, 6)
    assert sum(p.failed != "" for p in b.probes) == 1


@pytest.mark.parametrize("culprit", [1, 15])
def test_a_breakpoint_at_either_end_is_found(culprit):
    b = search(16, culprit, step=0.08, se=0.01, rng=np.random.default_rng(culprit))
    assert b.culprit() == (culprit, pytest.approx(b.culprit()[1])) and b.known()


def test_the_search_ends_in_a_culprit_a_range_or_nothing_to_bisect():
    from rnnexp.analysis import bisect_probe

    rng = np.random.default_rng(4)

    def probe(step: float, culprit: int, se: float):
        return lambda m: measured(m, rng.normal(step if m >= culprit else 0.0, se), se)

    heard = []
    b = bisect_probe.search(Bisection(16), probe(0.05, 6, 0.005), 20,
                            lambda b, p: heard.append(p.index))
    end = bisect_probe.outcome(b)
    assert end.known and end.culprit == 6 and end.effect.index == 6
    assert heard == [p.index for p in b.probes] and heard[0] == 15
    assert [c for c, _ in bisect_probe.after_each(b)][-1] == 6
    # Too few probes to know: a range that holds the culprit.
    short = bisect_probe.outcome(bisect_probe.search(Bisection(16), probe(0.05, 6, 0.005), 3))
    assert short.real and not short.known and short.low <= 6 <= short.high
    # A bad end as fast as the good one: nothing to bisect, after one probe.
    none = bisect_probe.search(Bisection(16), probe(0.0, 6, 0.002), 20)
    assert len(none.probes) == 1 and not bisect_probe.outcome(none).real
