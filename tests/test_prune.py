"""Required classes (extract/required.py) and reduced-cost fixing (extract/prune.py, ilp._pruned_model): each is a
claim about every acyclic choice, so each is checked against enumeration on small random cyclic e-graphs, and on
TENSAT's bert.json, where together they prove the optimum in seconds."""
from __future__ import annotations

import itertools
import os
import random

import numpy as np
import pytest

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag, extract, greedy, ilp, serialized, solvers
from tensat_tf.extract.milp import Milp
from tensat_tf.extract.prune import excluded, lagrangian_bound
from tensat_tf.extract.reduce import reduce
from tensat_tf.extract.required import required_classes
from random_egraphs import egraph, random_egraph

DATA = "/work/shared/data/egraphs"
needs_highs = pytest.mark.skipif(not solvers.highs_available(), reason="HiGHS (highspy) is not installed")


def _valid_choices(eg: EGraphData):
    """Every valid (complete, acyclic, non-blacklisted) choice, pruned to what the roots need."""
    seen = set()
    for picks in itertools.product(*eg.classes):
        choice = dict(enumerate(picks))
        if dag.is_valid(eg, choice):
            pruned = dag.prune(eg, choice)
            key = tuple(sorted(pruned.items()))
            if key not in seen:
                seen.add(key)
                yield pruned


def _random_cases(seed: int, count: int):
    rng = random.Random(seed)
    made = 0
    while made < count:
        eg = random_egraph(rng, max_cost=9)
        choices = list(_valid_choices(eg))
        if choices:
            made += 1
            yield eg, choices


# Classes: 0 = in, 1 = A, 2 = B, 3 = root r(A). A is f(in) or g(B); B is h(in) or k(A) (a cycle A <-> B). Every
# acyclic choice computes in (f and h both read it), neither A's alternative needs B, and B is not needed at all
# when A is f(in).
SMALL = [("in", 0, (), 0.0), ("f", 1, (0,), 3.0), ("g", 1, (2,), 1.0), ("h", 2, (0,), 1.0), ("k", 2, (1,), 0.0),
         ("r", 3, (1,), 1.0)]


def test_required_classes_by_hand():
    eg = egraph(SMALL, [3])
    red = reduce(eg)
    assert required_classes(red.classes, red.kids, red.roots) == [0, 1, 3]


def test_required_classes_are_in_every_acyclic_choice():
    """Soundness (every valid choice computes them) on random cyclic e-graphs; and it is not vacuous: some class
    other than a root is found required."""
    beyond_roots = 0
    for eg, choices in _random_cases(5, 60):
        red = reduce(eg)
        req = required_classes(red.classes, red.kids, red.roots)
        assert set(red.roots) <= set(req)
        for choice in choices:
            assert set(req) <= set(choice), (eg, req, choice)
        beyond_roots += len(set(req) - set(red.roots))
    assert beyond_roots > 0


def test_lagrangian_bound_with_any_multipliers_is_below_every_feasible_point():
    """Weak duality on random small 0/1 programs, for the LP's duals and for random (even wrong-signed)
    multipliers: the bound never exceeds the best feasible point found by enumeration, and no optimum uses a column
    excluded with the optimum's cost as the ceiling."""
    rng = np.random.default_rng(3)
    tried = excluded_any = 0
    while tried < 30:
        n = int(rng.integers(3, 7))
        m = Milp()
        for j in range(n):
            m.add_col(f"x{j}", float(rng.integers(0, 6)), 0, 1, True)
        for _ in range(int(rng.integers(2, 6))):
            cols = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
            vals = rng.choice([-1.0, 1.0, 2.0], size=len(cols)).tolist()
            kind = rng.integers(0, 3)
            m.add_row(cols, vals, lo=1.0 if kind != 1 else -np.inf, hi=2.0 if kind != 0 else np.inf)
        m._freeze()
        feasible = []
        for x in itertools.product((0.0, 1.0), repeat=n):
            xv = np.array(x)
            if all(lo - 1e-9 <= float(val @ xv[idx]) <= hi + 1e-9 for lo, hi, idx, val in m.rows):
                feasible.append(m.objective(xv))
        if not feasible:
            continue
        tried += 1
        for y in [rng.normal(size=len(m.rows)) for _ in range(5)]:
            low, reduced = lagrangian_bound(m, y)
            assert low <= min(feasible) + 1e-9
            # every point with x_j = 1 costs at least low + max(d_j, 0), so no optimum sets an excluded column
            out = excluded(list(range(n)), m, low, reduced, min(feasible))
            for x in itertools.product((0.0, 1.0), repeat=n):
                xv = np.array(x)
                if all(lo - 1e-9 <= float(val @ xv[idx]) <= hi + 1e-9 for lo, hi, idx, val in m.rows):
                    for j in np.flatnonzero(xv):
                        assert m.objective(xv) >= low + max(reduced[j], 0.0) - 1e-9
                    if m.objective(xv) <= min(feasible) + 1e-12:
                        assert not any(xv[j] for j in out)
            excluded_any += len(out)
        if solvers.highs_available():
            lp = solvers.solve_lp(m, 10)
            assert lp is not None
            low, _ = lagrangian_bound(m, lp.row_duals)
            assert low == pytest.approx(lp.objective, abs=1e-7)         # the LP's own duals give its optimum
    assert excluded_any > 0


@needs_highs
def test_pruning_keeps_every_choice_cheaper_than_the_start():
    """On random cyclic e-graphs, the nodes reduced-cost fixing drops (given the greedy choice) are in no choice
    cheaper than it, its bound is below the optimum, and the start survives; across the cases it drops something."""
    dropped = integral = 0
    for eg, choices in _random_cases(9, 60):
        start = greedy.greedy_choice(eg)
        ceiling = dag.dag_cost(eg, start)
        model, low, lp_choice = ilp._pruned_model(eg, start, ceiling, "order", True,
                                                  ilp._Spend(ilp.WORK, float("inf")), 0.0)
        gone = model.egraph.blacklist - eg.blacklist
        dropped += len(gone)
        best = min(dag.dag_cost(eg, c) for c in choices)
        assert low is None or low <= best + 1e-9, (eg, low, best)
        # an integral LP solution is an optimum: nothing acyclic is cheaper
        assert lp_choice is None or (dag.is_valid(eg, lp_choice) and dag.dag_cost(eg, lp_choice) <= best + 1e-9)
        integral += lp_choice is not None
        assert not gone & set(start.values())
        for choice in choices:
            if dag.dag_cost(eg, choice) < ceiling - 1e-9:
                assert not gone & set(choice.values()), (eg, gone, choice)
    assert dropped > 0 and integral > 0


@needs_highs
def test_pruned_ilp_matches_enumeration_with_and_without_pruning():
    for eg, choices in _random_cases(13, 40):
        best = min(dag.dag_cost(eg, c) for c in choices)
        for prune in (True, False):
            res = ilp.solve_ilp(eg, greedy.greedy_choice(eg), 10, "highs", rel_gap=0.0, prune=prune)
            assert dag.is_valid(eg, res.choice) and res.status == "optimal"
            assert dag.dag_cost(eg, res.choice) == pytest.approx(best)
            assert res.bound is not None and res.bound <= best + 1e-9


@pytest.mark.slow
@needs_highs
@pytest.mark.skipif(not os.path.isdir(DATA), reason=f"{DATA} is absent")
@pytest.mark.parametrize("name,optimum", [("bert.json", 0.704720), ("bert_acyclic.json", 0.708439)])
def test_bert_bound_never_passes_its_optimum(name, optimum):
    """The optima were proven by 300 s HiGHS runs without pruning (BENCHMARKS.md, gap tolerance 1e-4): the
    pruned bound must stay below them, however good the answer."""
    eg = serialized.load(os.path.join(DATA, name))
    r = extract(eg, method="ilp", ilp_seconds=30)
    assert r.bound is not None and r.bound <= optimum * (1 + 1e-4) + 1e-9
    assert r.dag_cost >= optimum * (1 - 1e-4)
