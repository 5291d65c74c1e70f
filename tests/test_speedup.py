"""The paired speedup decision (tensat_tf/speedup.py) on synthetic blocks, and the adaptive block loop of the profile
worker (tensat_tf/latency.py _decide) on real timings of plain Python functions (no TensorFlow: fast)."""
import math

import numpy as np
import pytest

from tensat_tf import latency, speedup


def _noisy(rng, n, ms, spread=0.05, outliers=0.1):
    """Block medians around `ms`: lognormal noise plus some blocks slowed 1.5-3x (another process took the core)."""
    x = ms * np.exp(rng.normal(0.0, spread, n))
    hit = rng.random(n) < outliers
    return np.where(hit, x * rng.uniform(1.5, 3.0, n), x)


def test_interval_ranks_and_coverage():
    assert speedup.interval_rank(10, 0.95) == 2          # [r_(2), r_(9)] covers with 97.85 %
    assert speedup.interval_rank(5, 0.95) == 0           # even [min, max] covers only 93.75 %
    assert speedup.min_blocks(0.95) == 6
    for n in range(1, 80):
        for level in (0.9, 0.95, 0.99, 0.999):
            k = speedup.interval_rank(n, level)
            coverage = lambda k: 1 - 2 * sum(math.comb(n, j) for j in range(k)) / 2 ** n  # noqa: E731
            if k:
                assert coverage(k) >= level and 2 * k <= n + 1
            if 2 * (k + 1) <= n + 1:
                assert coverage(k + 1) < level           # k is the largest rank that reaches the level
    assert speedup.per_test_level(0.99, 4) == pytest.approx(0.9975)


def test_clearly_faster_and_clearly_slower():
    rng = np.random.default_rng(0)
    a = _noisy(rng, 20, 1.0)
    b = a / 1.25 * np.exp(rng.normal(0, 0.02, 20))
    d = speedup.compare(a, b)
    assert d.verdict == "faster" and d.low > 1.01 and d.low <= d.ratio <= d.high and d.blocks == 20
    assert d.ratio == pytest.approx(1.25, rel=0.03)
    d = speedup.compare(b, a)
    assert d.verdict == "slower" and d.high < 1 / 1.01
    # a gain smaller than the margin is no gain
    assert speedup.compare(a, a / 1.005).verdict == "no difference"
    assert speedup.compare(a, a / 1.005, margin=0.0).verdict == "faster"


def test_one_lucky_block_decides_nothing():
    # the candidate wins 9 of 10 blocks by 10 %; in one block the original ran at half its time
    # (the old rule compared the minimum of block medians: 0.5 against 0.91, and reverted the candidate)
    a = np.array([1.0, 1.02, 0.99, 1.01, 0.5, 1.0, 1.03, 0.98, 1.0, 1.01])
    b = np.array([0.91, 0.92, 0.9, 0.91, 0.92, 0.9, 0.93, 0.89, 0.9, 0.92])
    d = speedup.compare(a, b)
    assert d.verdict == "faster" and d.ratio == pytest.approx(1.1, rel=0.02)
    # and a candidate that equals the original except for one lucky block of its own is not faster
    c = a.copy()
    c[3] = 0.4
    assert speedup.compare(a, c).verdict == "no difference"


@pytest.mark.parametrize("spread", [0.02, 0.05, 0.15])
def test_aa_noise_with_outliers_is_never_faster(spread):
    """Two samples of one distribution (noise of ±spread, 10 % outlier blocks up to 3x): a thousand A/A comparisons
    at the level convert uses (Bonferroni over 4 settings x 3 looks) and 24 blocks give no "faster" at all, and
    at 95 % with margin 0 the false "faster" rate stays within the one-sided 2.5 % the interval promises."""
    rng = np.random.default_rng(42)
    level = speedup.per_test_level(latency.LEVEL, 4 * latency.LOOKS)
    strict, loose = 0, 0
    for _ in range(1000):
        a, b = _noisy(rng, 24, 1.0, spread), _noisy(rng, 24, 1.0, spread)
        strict += speedup.compare(a, b, 0.01, level).verdict == "faster"
        loose += speedup.compare(a, b, 0.0, 0.95).verdict == "faster"
    assert strict == 0
    assert loose <= 25 + 3 * math.sqrt(25)


def test_too_few_blocks_and_bad_input():
    d = speedup.compare([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
    assert d.verdict == "no difference" and d.low == 0.0 and math.isinf(d.high) and d.ratio == 2.0
    assert d.to_json()["high"] is None and speedup.Decision.from_json(d.to_json()) == d
    assert speedup.compare([], []).verdict == "no difference"
    with pytest.raises(ValueError):
        speedup.compare([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        speedup.compare([1.0, 0.0], [1.0, 1.0])


def test_keep_rule():
    F, S, N = speedup.FASTER, speedup.SLOWER, speedup.SAME
    assert speedup.keep([F, N, N, F])
    assert not speedup.keep([F, F, S, F])          # slower anywhere: not kept
    assert not speedup.keep([N, N])                # faster nowhere
    assert not speedup.keep([F, None])             # a setting not measured: doubt
    assert not speedup.keep([])
    assert speedup.settled([F, F]) and speedup.settled([N, S]) and not speedup.settled([F, N])


# -- the worker's adaptive loop, on plain Python functions -------------------------------------------------------------
def _work(n):
    return lambda: sum(i * i for i in range(n))


class _InProcess:
    """decide()'s worker protocol without a process: the orders go straight to latency.Blocks."""

    def __init__(self, blocks):
        self.blocks, self.replies = blocks, []

    def send(self, message):
        self.replies.append(self.blocks.run(message["to"], message["seconds"]))

    def receive(self, deadline):
        return self.replies.pop(0)


def _run_decide(fns, seconds=5.0, batches=(1, 4)):
    """One thread setting of latency.decide (its looks and stops, latency._looks) on one in-process worker."""
    blocks = latency.Blocks({"batch_sizes": list(batches), "warmup": 2, "runs": 10}, lambda b: b, lambda feeds: fns)
    return latency._looks([_InProcess(blocks)], [2, 0], [12, 24, 48], seconds, 0.01,
                          speedup.per_test_level(0.99, 6), float("inf"))


def test_adaptive_loop_aa_is_not_faster():
    r = _run_decide([_work(2000), _work(2000)])
    verdicts = [s["decisions"][0]["verdict"] for s in r["settings"]]
    assert "faster" not in verdicts and not speedup.keep(verdicts)
    assert r["blocks"] in (12, 24, 48) or r["stopped"] == "budget"


def test_adaptive_loop_stops_when_settled():
    r = _run_decide([_work(6000), _work(2000)])
    assert [s["decisions"][0]["verdict"] for s in r["settings"]] == ["faster", "faster"]
    assert r["stopped"] == "settled" and r["blocks"] in (12, 24, 48)
    assert all(s["latency"][0]["ms"] > s["latency"][1]["ms"] for s in r["settings"])
    r = _run_decide([_work(2000), _work(6000)], batches=(1,))
    assert r["settings"][0]["decisions"][0]["verdict"] == "slower" and r["stopped"] == "settled"


def test_adaptive_loop_keeps_to_its_budget():
    # the first look (12 blocks) runs whatever the budget (latency.decide); the budget stops the second
    r = _run_decide([_work(20000), _work(20000)], seconds=0.05)
    assert r["stopped"] == "budget" and r["blocks"] == 12
    assert all(s["decisions"][0]["verdict"] == "no difference" for s in r["settings"])
