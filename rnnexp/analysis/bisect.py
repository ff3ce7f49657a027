"""Noisy bisection: which of an ordered list of environments (commits, torch builds) is the
first slow one, from paired A/B probes against the good end, each chosen by the information it
is expected to bring, until the breakpoint is known to a stated confidence.

Environments 0 … n−1: 0 is good, n−1 is bad. The breakpoint b ∈ 1 … n−1 is the first bad
one; the prior is uniform. A probe of environment m is an interleaved A/B of m against 0
(rnnexp.analysis.significance.paired): its log slowdown x with the standard error its 95%
interval implies. Given b, x ~ N(δ, se² + se_δ²) when m ≥ b (slow, by the effect δ the bad
end showed) and N(0, se²) when m < b, each mixed with a small chance `OUTLIER` that the probe
says nothing (a burst the interval missed): one misleading probe moves the posterior, it
does not end the search at the wrong place.

Why hand-written: the update is a dozen lines of Bayes' rule over n−1 hypotheses, and no
maintained library (git bayesect is a tool around git, not an importable one; scipy and
numpy do the densities) offers a noisy bisection over an abstract probe.

The next probe maximises the mutual information between its outcome and the breakpoint,
I(X; B) = I(X; m ≥ b) — computed on a grid from the predictive mixture, with the standard
error of a probe taken as the median of those so far. Probing one environment again is
allowed (when its side is the most uncertain). A probe that fails to build or to verify is
recorded as such and never read as a slowdown: the posterior is not touched, and that
environment is not chosen again; a breakpoint next to one cannot be resolved closer than it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy import stats as sps

from rnnexp.analysis.significance import CONFIDENCE as INTERVAL
from rnnexp.analysis.significance import Difference

CONFIDENCE = 0.95
OUTLIER = 0.02
GRID = 801
# The bad end is "not slower" when its slowdown's interval lies below this (log, ≈ 1%) …
NEGLIGIBLE = 0.01
# … or when this many probes of it could not tell.
END_PROBES = 3
Z = float(sps.norm.ppf((1 + INTERVAL) / 2))


@dataclass
class Probe:
    """One probe: environment `index` against the good end."""

    index: int
    difference: Optional[Difference] = None
    failed: str = ""  # why it did not measure (build, verification); "" when it did

    @property
    def slowdown(self) -> float:
        """log(candidate ÷ good): > 0 slower."""
        return -math.log(self.difference.speedup)

    @property
    def se(self) -> float:
        d = self.difference
        return (math.log(d.high) - math.log(d.low)) / (2 * Z)

    @property
    def usable(self) -> bool:
        d = self.difference
        return (not self.failed and d is not None and d.speedup > 0
                and math.isfinite(d.low) and math.isfinite(d.high) and d.high > d.low > 0)


@dataclass
class Bisection:
    """The evidence so far over environments 0 (good) … n−1 (bad)."""

    n: int
    confidence: float = CONFIDENCE
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError("a bisection needs a good and a bad environment")

    # The evidence -----------------------------------------------------------------------

    @property
    def failed(self) -> set[int]:
        return {p.index for p in self.probes if p.failed}

    def effect(self) -> tuple[float, float]:
        """δ and its standard error: the bad end's probes pooled (inverse variance)."""
        ends = [p for p in self.probes if p.index == self.n - 1 and p.usable]
        if not ends:
            return math.nan, math.nan
        w = np.array([1 / p.se ** 2 for p in ends])
        x = np.array([p.slowdown for p in ends])
        return float((w * x).sum() / w.sum()), float(1 / math.sqrt(w.sum()))

    def posterior(self) -> np.ndarray:
        """P(b) for b = 1 … n−1 (index 0 of the array is b = 1)."""
        logp = np.zeros(self.n - 1)
        delta, se_delta = self.effect()
        if not math.isfinite(delta):
            return np.full(self.n - 1, 1 / (self.n - 1))
        b = np.arange(1, self.n)
        for p in self.probes:
            if not p.usable or p.index == self.n - 1:
                continue
            slow = _density(p.slowdown, delta, math.hypot(p.se, se_delta), delta)
            same = _density(p.slowdown, 0.0, p.se, delta)
            logp += np.log(np.where(p.index >= b, slow, same))
        post = np.exp(logp - logp.max())
        return post / post.sum()

    # Deciding ---------------------------------------------------------------------------

    def effect_is_real(self) -> Optional[bool]:
        """Whether the bad end is slower than the good end: True when its interval lies
        above 0, False when it lies below `NEGLIGIBLE` (or `END_PROBES` probes could not
        tell), None while undecided (probe the bad end again)."""
        ends = [p for p in self.probes if p.index == self.n - 1 and p.usable]
        if not ends:
            return None
        delta, se = self.effect()
        if delta - Z * se > 0:
            return True
        if delta + Z * se < NEGLIGIBLE or len(ends) >= END_PROBES:
            return False
        return None

    def culprit(self) -> tuple[int, float]:
        """The most probable first bad environment and its probability."""
        post = self.posterior()
        b = int(np.argmax(post))
        return b + 1, float(post[b])

    def likely_range(self) -> tuple[int, int]:
        """The shortest run of consecutive breakpoints holding `confidence` of the mass."""
        post = self.posterior()
        best = (1, self.n - 1)
        for lo in range(len(post)):
            mass = 0.0
            for hi in range(lo, len(post)):
                mass += post[hi]
                if mass >= self.confidence:
                    if hi - lo < best[1] - best[0]:
                        best = (lo + 1, hi + 1)
                    break
        return best

    def known(self) -> bool:
        return self.culprit()[1] >= self.confidence

    def information(self, ms: Sequence[int]) -> np.ndarray:
        """Expected information (nats) about b from probing each environment of `ms`."""
        delta, se_delta = self.effect()
        ses = [p.se for p in self.probes if p.usable]
        if not math.isfinite(delta) or not ses:
            return np.zeros(len(ms))
        se = float(np.median(ses))
        below = np.concatenate([[0.0], np.cumsum(self.posterior())])
        q = below[np.asarray(ms)][:, None]  # P(m ≥ b) for each m
        spread = max(abs(delta), 1e-6)
        x = np.linspace(-3 * spread - 6 * se, 4 * spread + 6 * se, GRID)
        slow = _density(x, delta, math.hypot(se, se_delta), delta)
        same = _density(x, 0.0, se, delta)
        dx = x[1] - x[0]

        def entropy(f: np.ndarray) -> np.ndarray:
            f = np.maximum(f, 1e-300)
            return -(f * np.log(f)).sum(axis=-1) * dx

        mix = q * slow + (1 - q) * same
        gain = entropy(mix) - q[:, 0] * entropy(slow) - (1 - q[:, 0]) * entropy(same)
        return np.maximum(gain, 0.0)

    def next_probe(self) -> Optional[int]:
        """The environment to probe next; None when done: the breakpoint is known, the bad
        end is not slower, or no probe can tell more."""
        real = self.effect_is_real()
        if real is None:
            return self.n - 1  # first, how much slower the bad end is: δ
        if not real or self.known():
            return None
        options = [m for m in range(1, self.n - 1) if m not in self.failed]
        if not options:
            return None
        gains = self.information(options)
        best = int(np.argmax(gains))
        return options[best] if gains[best] > 1e-4 else None

    def observe(self, probe: Probe) -> None:
        self.probes.append(probe)


def _density(x, mean: float, sd: float, delta: float):
    """N(mean, sd²) mixed with OUTLIER of a flat density over the plausible range."""
    width = 6 * max(abs(delta), 1e-6) + 12 * sd
    return (1 - OUTLIER) * sps.norm.pdf(x, mean, sd) + OUTLIER / width


def probes_at(bisection: Bisection, index: int) -> Sequence[Probe]:
    return [p for p in bisection.probes if p.index == index]
