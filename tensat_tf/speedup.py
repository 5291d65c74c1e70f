"""Is a candidate graph faster than the original? A decision from paired timing blocks that noise cannot fool.

Input: per block, the median latency of the original and of the candidate, measured in the same block (the profile
worker, tensat_tf/latency.py, runs them back to back and alternates which goes first). Each block gives one ratio
r = original_ms / candidate_ms (> 1: candidate faster); whatever slowed the machine during a block slows both sides
of it, so the ratio cancels load that lasts longer than a block.

Estimate: the median of the block ratios. Interval: the distribution-free order-statistic (sign-test) interval for
that median: with the n ratios sorted, [r_(k), r_(n+1-k)] covers the true median with probability
1 - 2 * P(Binomial(n, 1/2) <= k - 1), whatever the distribution of the ratios; k is the largest rank that reaches
the asked level. Why this interval and not a bootstrap or a t-interval:
  - it assumes only that blocks are independent with a common median, not normal noise: timing noise is skewed
    (a preempted call is slow, never fast) and comes with outliers;
  - one lucky block moves the bounds by at most one rank: the failure this module replaces compared the minimum of
    block medians, where a single fast block of the original decided the outcome;
  - it is exact for small n (a bootstrap of the median is poor with 10-50 blocks) and needs no random numbers, so the
    same blocks always give the same decision;
  - with too few blocks for the level it gives no interval at all (low 0, high inf: "no difference"), instead of a
    narrower one that claims more than the data holds.

Verdict: "faster" when the interval's low end is above 1 + margin; "slower" when its high end is below
1 / (1 + margin) (the same margin on a log scale); "no difference" otherwise (the interval straddles the margin, or
there are too few blocks). Several decisions taken for one choice (batch sizes x thread settings x sequential looks)
share one error budget: `per_test_level` splits it (Bonferroni), so that keeping a candidate on a false "faster"
anywhere stays below 1 - level overall. `keep(...)` is the rule for one candidate over several settings.

Pure Python + numpy (no TensorFlow): tools and the worker import it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Optional, Sequence

import numpy as np

LEVEL = 0.95            # two-sided level of one interval when compare() is called on its own
MARGIN = 0.01
FASTER, SLOWER, SAME = "faster", "slower", "no difference"


@dataclasses.dataclass
class Decision:
    ratio: float      # median of per-block ratios original_ms / candidate_ms (> 1: candidate faster)
    low: float        # order-statistic (sign-test) interval of that median at `level` (coverage >= level);
    high: float       #   0 and inf when there are too few blocks for the level
    blocks: int
    verdict: str      # "faster" | "slower" | "no difference" (interval straddles the margin)
    level: float = LEVEL
    margin: float = MARGIN

    def to_json(self) -> dict:
        def num(x):
            return None if math.isinf(x) else round(float(x), 5)
        return {"ratio": num(self.ratio), "low": num(self.low), "high": num(self.high), "blocks": self.blocks,
                "verdict": self.verdict, "level": round(self.level, 6), "margin": self.margin}

    @classmethod
    def from_json(cls, d: dict) -> "Decision":
        def num(x):
            return math.inf if x is None else float(x)
        return cls(num(d["ratio"]), num(d["low"]), num(d["high"]), int(d["blocks"]), d["verdict"],
                   float(d.get("level", LEVEL)), float(d.get("margin", MARGIN)))


def interval_rank(n: int, level: float) -> int:
    """The largest k >= 1 such that [r_(k), r_(n+1-k)] (1-based ranks of n sorted values) covers the median with
    probability >= level; 0 when even [min, max] does not (too few blocks)."""
    if n <= 0:
        return 0
    alpha_half = (1.0 - level) / 2.0
    tail, k = 0.0, 0
    # after step j, tail = P(Binomial(n, 1/2) <= j): the chance that r_(j+1) is already above the median
    for j in range(n // 2 + 1):
        tail += math.comb(n, j) / 2.0 ** n
        if tail > alpha_half:
            break
        k = j + 1
    return min(k, (n + 1) // 2)


def min_blocks(level: float) -> int:
    """The fewest blocks that give any interval at `level`: the sign test cannot decide with fewer."""
    n = 1
    while interval_rank(n, level) == 0:
        n += 1
    return n


def per_test_level(level: float, tests: int) -> float:
    """Bonferroni: the level of each of `tests` intervals so that all of them hold together with probability
    >= level."""
    return 1.0 - (1.0 - level) / max(1, tests)


def compare(original_block_ms: Sequence[float], candidate_block_ms: Sequence[float], margin: float = MARGIN,
            level: float = LEVEL) -> Decision:
    """Paired decision from per-block medians measured in the same blocks (original_block_ms[i] and
    candidate_block_ms[i] come from block i)."""
    a = np.asarray(original_block_ms, dtype=np.float64)
    b = np.asarray(candidate_block_ms, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired blocks needed: {a.shape} original vs {b.shape} candidate block medians")
    if not len(a):
        return Decision(1.0, 0.0, math.inf, 0, SAME, level, margin)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(a > 0) and np.all(b > 0)):
        raise ValueError("block medians must be positive and finite")
    r = np.sort(a / b)
    n = len(r)
    k = interval_rank(n, level)
    low, high = (float(r[k - 1]), float(r[n - k])) if k else (0.0, math.inf)
    if low > 1.0 + margin:
        verdict = FASTER
    elif high < 1.0 / (1.0 + margin):
        verdict = SLOWER
    else:
        verdict = SAME
    return Decision(float(np.median(r)), low, high, n, verdict, level, margin)


def keep(verdicts: Iterable[Optional[str]]) -> bool:
    """The rule for one candidate measured in several settings (batch sizes x thread settings): keep it only when it
    is "faster" in at least one setting and "slower" in none. A setting that was not measured (None) counts as
    doubt: the candidate is not kept."""
    verdicts = list(verdicts)
    return bool(verdicts) and None not in verdicts and FASTER in verdicts and SLOWER not in verdicts


def settled(verdicts: Iterable[Optional[str]]) -> bool:
    """More blocks cannot change keep(): some setting is already "slower", or every setting is "faster"."""
    verdicts = list(verdicts)
    return SLOWER in verdicts or (bool(verdicts) and all(v == FASTER for v in verdicts))
