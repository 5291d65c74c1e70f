"""Extraction: greedy DAG, ILP (both acyclicity formulations, both solvers), the loader and the CLI.

The hand-made e-graphs each pin one property: a shared subexpression the greedy misses and the ILP finds, a cycle
that is the cheapest choice and must be refused, a blacklist. A brute-force check on small random cyclic e-graphs
covers the rest (reductions, cuts, warm start). The TENSAT files check the time limit and ILP <= greedy.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import time

import numpy as np
import pytest

from tensat_tf import errors
from tensat_tf.cli import extract_cmd as cli
from tensat_tf.egraph.data import EGraphData, Fused
from tensat_tf.extract import NoExtraction, bound, dag, extract, greedy, ilp, serialized, solvers
from tensat_tf.extract.milp import Milp
from random_egraphs import egraph, random_egraph

DATA = "/work/shared/data/egraphs"
SOLVERS = ["cbc"] + (["highs"] if solvers.highs_available() else [])
needs_data = pytest.mark.skipif(not os.path.isdir(DATA), reason=f"{DATA} is absent")


# Classes: 0 = S (shared, costly), 1 = A, 2 = B, 3 = root add(A, B). Each of A, B alone is cheaper as a leaf (3.5)
# than through S (1 + 4), so greedy picks both leaves (1 + 3.5 + 3.5 = 8); sharing S costs 1 + 1 + 1 + 4 = 7.
SHARED = [("s", 0, (), 4.0), ("f", 1, (0,), 1.0), ("leafA", 1, (), 3.5), ("g", 2, (0,), 1.0), ("leafB", 2, (), 3.5),
          ("add", 3, (1, 2), 1.0)]

# Classes: 0 = input, 1 = X, 2 = Y, 3 = root r(X). x1 = h(Y) and y1 = k(X) are free but form a cycle X <-> Y (cost 1
# in all). Acyclic optimum: r, x1, y2 = 3 (x2 alone: 6).
CYCLIC = [("in", 0, (), 0.0), ("h", 1, (2,), 0.0), ("xleaf", 1, (0,), 5.0), ("k", 2, (1,), 0.0),
          ("yleaf", 2, (0,), 2.0), ("r", 3, (1,), 1.0)]


def brute_force(eg: EGraphData) -> float:
    """Cheapest valid (complete, acyclic, non-blacklisted) choice by enumeration; inf if none."""
    best = float("inf")
    for picks in itertools.product(*eg.classes):
        choice = dict(enumerate(picks))
        if dag.is_valid(eg, choice):
            best = min(best, dag.dag_cost(eg, choice))
    return best


def test_dag_cost_counts_shared_nodes_once():
    eg = egraph(SHARED, [3])
    choice = {3: 5, 1: 1, 2: 3, 0: 0}
    assert dag.dag_cost(eg, choice) == pytest.approx(7.0)
    assert dag.reachable_classes(eg, {3: 5, 1: 2, 2: 4, 0: 0}) == [3, 1, 2]


@pytest.mark.parametrize("solver", SOLVERS)
def test_ilp_finds_shared_subexpression_that_greedy_misses(solver):
    eg = egraph(SHARED, [3])
    g = extract(eg, method="greedy")
    r = extract(eg, method="ilp", ilp_seconds=10, solver=solver)
    assert g.dag_cost == pytest.approx(8.0)
    assert r.dag_cost == pytest.approx(7.0)
    assert r.choice == {0: 0, 1: 1, 2: 3, 3: 5}
    assert r.status == "optimal" and r.gap == pytest.approx(0.0) and r.solver == solver
    assert r.greedy_dag_cost == pytest.approx(8.0)


def test_no_time_for_the_ilp_falls_back_to_greedy():
    r = extract(egraph(SHARED, [3]), method="ilp", ilp_seconds=0.1)
    assert r.status == "fallback" and r.gap is None
    assert r.dag_cost == pytest.approx(8.0) and r.acyclic


# Each way of forbidding cycles alone: order rows, lazy cuts, and the up-front 2-/3-cycle rows (with lazy cuts).
FORMULATIONS = [("order", False), ("lazy", False), ("lazy", True)]


@pytest.mark.parametrize("acyclicity,short_cycles", FORMULATIONS)
@pytest.mark.parametrize("solver", SOLVERS)
def test_ilp_refuses_the_cheapest_choice_when_it_is_cyclic(solver, acyclicity, short_cycles):
    eg = egraph(CYCLIC, [3])
    assert dag.find_cycle(eg, {3: 5, 1: 1, 2: 3}) is not None      # the cost-1 choice is a cycle
    res = ilp.solve_ilp(eg, greedy.greedy_choice(eg), 10, solver, acyclicity=acyclicity, short_cycles=short_cycles)
    assert dag.is_acyclic(eg, res.choice)
    assert dag.dag_cost(eg, res.choice) == pytest.approx(3.0)
    assert res.choice == {0: 0, 1: 1, 2: 4, 3: 5}
    assert res.status == "optimal"


@pytest.mark.parametrize("method", ["greedy", "ilp"])
def test_blacklist_is_respected(method):
    eg = egraph(CYCLIC, [3], blacklist={4})                       # no y leaf: x1 = h(Y) now needs the cycle
    r = extract(eg, method=method, ilp_seconds=10)
    assert 4 not in r.choice.values()
    assert r.choice == {0: 0, 1: 2, 3: 5}
    assert r.dag_cost == pytest.approx(6.0)
    with pytest.raises(NoExtraction):
        extract(egraph(CYCLIC, [3], blacklist={2, 4}), method=method)


@pytest.mark.parametrize("acyclicity,short_cycles", FORMULATIONS + [("order", True)])
def test_ilp_matches_brute_force_on_random_cyclic_egraphs(acyclicity, short_cycles):
    rng = random.Random(7)
    checked = 0
    while checked < 40:
        eg = random_egraph(rng)
        best = brute_force(eg)
        try:
            start = greedy.greedy_choice(eg)
        except NoExtraction:
            assert best == float("inf")
            continue
        # rel_gap=0: the exact optimum, not one within the default 1 %.
        res = ilp.solve_ilp(eg, start, 10, SOLVERS[-1], acyclicity=acyclicity, short_cycles=short_cycles, rel_gap=0.0)
        assert dag.is_valid(eg, res.choice)
        assert res.status == "optimal", (eg, res)           # the ILP's own answer, not the greedy fallback
        assert dag.dag_cost(eg, res.choice) == pytest.approx(best), (eg, res)
        assert dag.dag_cost(eg, start) >= best - 1e-9
        checked += 1


# A convolution's bias fuses into it only when the bias is its one reader (cost/fusion.py). Classes: 0 = input,
# 1 = K conv, 2 = B bias(K), 3 = C: add3(B) or bias3(K) (a second bias of K, cheaper alone), 4 = root mul(B, C).
# Priced per node, bias3 wins (5+1+1+3 = 10); with the sole-reader extras (2 each) it costs 14, add3 12.
FANOUT = [("in", 0, (), 0.0), ("conv", 1, (0,), 5.0), ("bias", 2, (1,), 1.0), ("add3", 3, (2,), 3.0),
          ("bias3", 3, (1,), 1.0), ("mul", 4, (2, 3), 3.0)]


def _with_fused(eg: EGraphData, terms: dict) -> EGraphData:
    """terms: node -> (class read, extra[, producers[, partners[, consumers[, surcharge]]]]); producers default to
    every node of that class."""
    return eg.with_costs([n.cost for n in eg.nodes], {
        i: Fused(t[0], t[1], frozenset(t[2] if len(t) > 2 else eg.classes[t[0]]), frozenset(t[3] if len(t) > 3 else ()),
                 frozenset(t[4] if len(t) > 4 else ()), t[5] if len(t) > 5 else 0.0)
        for i, t in terms.items()})


@pytest.mark.parametrize("solver", SOLVERS)
def test_ilp_pays_for_a_second_reader_of_a_fused_contraction(solver):
    eg = egraph(FANOUT, [4])
    fan_out = {0: 0, 1: 1, 2: 2, 3: 4, 4: 5}
    assert dag.dag_cost(eg, fan_out) == 10.0
    priced = _with_fused(eg, {2: (1, 2.0), 4: (1, 2.0)})
    assert dag.dag_cost(priced, fan_out) == 14.0
    assert dag.dag_cost(priced, {**fan_out, 3: 3}) == 12.0
    res = ilp.solve_ilp(priced, fan_out, 10, solver, rel_gap=0.0)
    assert res.choice[3] == 3 and dag.dag_cost(priced, res.choice) == 12.0 and res.status == "optimal"
    # the fusion needs the conv itself: a K computed otherwise (say the Split of a merged conv) pays the extra
    split = _with_fused(egraph(FANOUT + [("split0", 1, (0,), 4.0)], [4]), {2: (1, 2.0, [1]), 4: (1, 2.0, [1])})
    assert dag.dag_cost(split, {**fan_out, 3: 3, 1: 6}) == 4 + 1 + 3 + 3 + 2
    res = ilp.solve_ilp(split, {**fan_out, 3: 3, 1: 6}, 10, solver, rel_gap=0.0)
    assert res.choice[1] == 1 and res.choice[3] == 3 and res.status == "optimal"   # split0 (4) is cheaper alone
    assert dag.dag_cost(split, res.choice) == 12.0 == brute_force(split)
    # a root counts as a reader: the bias of an output conv is never fused
    assert dag.dag_cost(_with_fused(eg, {1: (0, 7.0)}), fan_out) == 10.0     # "in" is read by conv only
    assert dag.dag_cost(_with_fused(egraph(FANOUT, [4, 1]), {2: (1, 2.0)}), fan_out) == 12.0


# An activation fuses only behind a bias that fuses itself (dag.unfused). Classes: 0 = input, 1 = K: conv(input) or
# split0(input) (a merged conv's Split output: cheaper alone), 2 = B = bias(K), 3 = root relu(B). With split0 the
# bias runs alone, and so does the relu: 2.5 + 3 + 3 = 8.5 against conv's 5 + 1 + 1 = 7. Priced without the chain,
# split0 looked cheaper (2.5 + 3 + 1 = 6.5): Inception-ResNet-v2's 42 conv merges measured 0.978x that way.
CHAIN = [("in", 0, (), 0.0), ("conv", 1, (0,), 5.0), ("split0", 1, (0,), 2.5), ("bias", 2, (1,), 1.0),
         ("relu", 3, (2,), 1.0)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_an_activation_runs_alone_behind_a_bias_that_runs_alone(solver):
    eg = _with_fused(egraph(CHAIN, [3]), {3: (1, 2.0, [1]), 4: (2, 2.0, [3])})
    conv, split = {0: 0, 1: 1, 2: 3, 3: 4}, {0: 0, 1: 2, 2: 3, 3: 4}
    assert dag.unfused(eg, conv) == set() and dag.unfused(eg, split) == {3, 4}
    assert dag.dag_cost(eg, conv) == 7.0 and dag.dag_cost(eg, split) == 8.5
    res = ilp.solve_ilp(eg, split, 10, solver, rel_gap=0.0)
    assert res.choice[1] == 1 and dag.dag_cost(eg, res.choice) == 7.0 == brute_force(eg) and res.status == "optimal"
    # the relu's own condition still holds alone: a second reader of B breaks it whatever K is
    two = _with_fused(egraph(CHAIN + [("pair", 4, (2, 3), 1.0)], [4]), {3: (1, 2.0, [1]), 4: (2, 2.0, [3])})
    assert dag.unfused(two, {**conv, 4: 5}) == {4}


# Classes: 0 = input, 1 = Y (conv + bias, or another form "alt"), 2 = S = sigmoid(Y), 3 = root mul(Y, S), or a
# costlier "whole" node reading Y alone. sigmoid and mul both read Y: as partners they keep each other's fusion.
SWISH = [("in", 0, (), 0.0), ("convbias", 1, (0,), 5.0), ("alt", 1, (0,), 4.0), ("sigmoid", 2, (1,), 1.0),
         ("mul", 3, (1, 2), 1.0), ("whole", 3, (1,), 3.5)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_partners_read_the_fused_class_without_breaking_the_fusion(solver):
    eg = egraph(SWISH, [3])
    swish = {0: 0, 1: 1, 2: 3, 3: 4}
    fused = _with_fused(eg, {3: (1, 2.0, [1], [4]), 4: (1, 2.0, [1], [3])})
    assert dag.dag_cost(fused, swish) == 7.0                # both fused: conv + bias computes Y, its readers partners
    assert dag.dag_cost(fused, {**swish, 1: 2}) == 10.0      # Y computed otherwise: both pay
    lonely = _with_fused(eg, {3: (1, 2.0, [1]), 4: (1, 2.0, [1])})
    assert dag.dag_cost(lonely, swish) == 11.0               # without partners each is the other's second reader
    for g, best in ((fused, 7.0), (lonely, 7.5)):       # lonely: whole(alt)
        res = ilp.solve_ilp(g, greedy.greedy_choice(g), 10, solver, rel_gap=0.0)
        assert dag.dag_cost(g, res.choice) == pytest.approx(best) == brute_force(g) and res.status == "optimal"
    assert ilp.solve_ilp(fused, greedy.greedy_choice(fused), 10, solver, rel_gap=0.0).choice[1] == 1


# A pattern that fuses whole or not at all (Fused.consumers; a hard swish, cost/fusion.py). Classes: 0 = input,
# 1 = Y (conv + bias), 2 = A = add(Y), 3 = R = relu6(A), 4 = M = m6(R), 5 = root: out(M, Y), or fold(R, Y) (the
# form with the scalar folded into the next conv: one op less, cheaper alone). add, relu6, m6 and out fuse as a chain
# (2 each when alone); without out, m6 is not computed and add and relu6 run alone.
HSWISH = [("in", 0, (), 0.0), ("convbias", 1, (0,), 5.0), ("add", 2, (1,), 1.0), ("relu6", 3, (2,), 1.0),
          ("m6", 4, (3,), 1.0), ("out", 5, (4, 1), 1.0), ("fold", 5, (3, 1), 1.5)]
HSWISH_TERMS = {2: (1, 2.0, [1], [5], [3]), 3: (2, 2.0, [2], [], [4]), 4: (3, 2.0, [3], [], [5]), 5: (4, 2.0, [4])}


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_pattern_fuses_only_whole(solver):
    eg = _with_fused(egraph(HSWISH, [5]), HSWISH_TERMS)
    whole, folded = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5}, {0: 0, 1: 1, 2: 2, 3: 3, 5: 6}
    assert dag.unfused(eg, whole) == set() and dag.dag_cost(eg, whole) == 9.0
    # fold reads R and Y: add has a reader of Y that is not its partner, relu6 a reader of R not its consumer
    assert dag.unfused(eg, folded) == {2, 3} and dag.dag_cost(eg, folded) == 8.5 + 4.0
    res = ilp.solve_ilp(eg, folded, 10, solver, rel_gap=0.0)
    assert res.choice[5] == 5 and dag.dag_cost(eg, res.choice) == 9.0 == brute_force(eg) and res.status == "optimal"
    # fold as add's partner too (it reads Y): without consumers nothing told relu6 and add that m6 and out are
    # missing, and the folded form looked cheaper (8.5); with them the chain runs alone
    partnered = {**HSWISH_TERMS, 2: (1, 2.0, [1], [5, 6], [3])}
    assert dag.dag_cost(_with_fused(egraph(HSWISH, [5]), {i: t[:4] for i, t in partnered.items()}), folded) == 8.5
    assert dag.dag_cost(_with_fused(egraph(HSWISH, [5]), partnered), folded) == 12.5
    # a consumer that runs alone takes its producers with it: a second reader of M breaks the whole chain
    two = _with_fused(egraph(HSWISH + [("pair", 6, (5, 4), 1.0)], [6]), HSWISH_TERMS)
    assert dag.unfused(two, {**whole, 6: 7}) == {2, 3, 4, 5}
    res = ilp.solve_ilp(two, {**whole, 6: 7}, 10, solver, rel_gap=0.0)
    assert dag.dag_cost(two, res.choice) == pytest.approx(brute_force(two)) and res.status == "optimal"


# A Dense layer without bias before a BatchNormalization (Fused.surcharge). Classes: 0 = input, 1 = M = mm(input),
# 2 = Y = scale(M) or folded(input) (F03: the scale folded into the weights), 3 = root bias(Y). The bias runs alone
# for 0.5; fused with a MatMul it costs 4 more (a few rows: cost/analytic.py fusion_terms). Priced always fused (4.5),
# the folded form looked cheaper (5 + 4.5 against 5 + 0.5 + 4.5) and ran slower: 5 + 4.5 against 5 + 0.5 + 0.5.
DENSE_BN = [("in", 0, (), 0.0), ("mm", 1, (0,), 5.0), ("scale", 2, (1,), 0.5), ("folded", 2, (0,), 5.0),
            ("bias", 3, (2,), 0.5), ("relu", 4, (2,), 0.3), ("pair", 5, (3, 4), 0.3)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_surcharge_keeps_a_bias_apart_from_a_matmul_where_the_fused_kernel_is_dearer(solver):
    eg = _with_fused(egraph(DENSE_BN, [3]), {4: (2, 0.0, [3], [], [], 4.0)})
    layer, folded = {0: 0, 1: 1, 2: 2, 3: 4}, {0: 0, 2: 3, 3: 4}
    assert dag.surcharged(eg, layer) == [] and dag.surcharged(eg, folded) == [4]
    assert dag.dag_cost(eg, layer) == 6.0 and dag.dag_cost(eg, folded) == 9.5
    res = ilp.solve_ilp(eg, folded, 10, solver, rel_gap=0.0)
    assert res.choice == layer and res.status == "optimal" and brute_force(eg) == 6.0
    # the surcharge holds whatever else reads Y: a second reader (where TF would not fuse) never makes the fused form
    # look cheaper, so choosing a node that nothing needs cannot avoid it
    two = _with_fused(egraph(DENSE_BN, [5]), {4: (2, 0.0, [3], [], [], 4.0)})
    assert dag.dag_cost(two, {**folded, 4: 5, 5: 6}) == pytest.approx(5 + 0.5 + 4 + 0.3 + 0.3)
    res = ilp.solve_ilp(two, {**folded, 4: 5, 5: 6}, 10, solver, rel_gap=0.0)
    assert res.choice[2] == 2 and dag.dag_cost(two, res.choice) == pytest.approx(brute_force(two)) == 6.6


def test_greedy_pays_a_surcharge_where_the_producer_it_settled_charges_it():
    """Two equal forms of a conv's bias; the AddV2 pays the remapper hazard where the conv computes its input
    (cost/analytic.py with_hazards). Greedy took the lower id, the AddV2, and paid it on each such bias."""
    nodes = [("in", 0, (), 0.0), ("conv", 1, (0,), 5.0), ("addv2", 2, (1,), 1.0), ("biasadd", 2, (1,), 1.0),
             ("relu", 3, (2,), 1.0)]
    eg = _with_fused(egraph(nodes, [3]), {2: (1, 0.0, [1], [], [], 0.5)})
    assert greedy.greedy_choice(eg) == {0: 0, 1: 1, 2: 3, 3: 4}
    assert greedy.greedy_choice(_with_fused(egraph(nodes, [3]), {})) == {0: 0, 1: 1, 2: 2, 3: 4}   # the tie: lower id


def _ilp_matches_brute_force(seed: int, count: int, terms_of) -> None:
    """On `count` random cyclic e-graphs (those with a greedy start) priced with fused terms_of(rng, egraph), the
    ILP proves the brute-force optimum."""
    rng = random.Random(seed)
    checked = 0
    while checked < count:
        eg = random_egraph(rng)
        eg = _with_fused(eg, terms_of(rng, eg))
        best = brute_force(eg)
        try:
            start = greedy.greedy_choice(eg)
        except NoExtraction:
            continue
        res = ilp.solve_ilp(eg, start, 10, SOLVERS[-1], rel_gap=0.0)
        assert dag.is_valid(eg, res.choice) and res.status == "optimal", (eg, res)
        assert dag.dag_cost(eg, res.choice) == pytest.approx(best), (eg, res)
        checked += 1


def test_ilp_matches_brute_force_with_fused_extras():
    """Random cyclic e-graphs where some nodes pay an extra when their first child class has another reader or is
    not computed by one of some random nodes of it."""
    _ilp_matches_brute_force(11, 60, lambda rng, eg: {
        i: (n.children[0], float(rng.randint(1, 4)), [j for j in eg.classes[n.children[0]] if rng.random() < 0.6])
        for i, n in enumerate(eg.nodes) if n.children and rng.random() < 0.4})


def _random_terms(rng, eg, p_partner: float, p_consumers: float = 0.0) -> dict:
    """Fused terms for half the nodes with children: random producers, partners among the other readers of the
    class read, and (with probability p_consumers) consumers among the readers of the node's own class."""
    readers: dict[int, set[int]] = {}
    for i, n in enumerate(eg.nodes):
        for k in n.children:
            readers.setdefault(k, set()).add(i)
    return {i: (n.children[0], float(rng.randint(1, 4)),
                [j for j in eg.classes[n.children[0]] if rng.random() < 0.6],
                [o for o in sorted(readers[n.children[0]]) if o != i and rng.random() < p_partner],
                [o for o in sorted(readers.get(n.eclass, ())) if rng.random() < 0.6]
                if rng.random() < p_consumers else [])
            for i, n in enumerate(eg.nodes) if n.children and rng.random() < 0.5}


def test_ilp_matches_brute_force_with_surcharges():
    """As above, some terms with a surcharge instead of an extra (a fused kernel dearer than the separate op), among
    fused terms with extras, partners and consumers."""
    def terms(rng, eg):
        out = _random_terms(rng, eg, 0.3, 0.3)
        return {i: (t if rng.random() < 0.5 else (t[0], 0.0, t[2], t[3], t[4], float(rng.randint(1, 4))))
                for i, t in out.items()}
    _ilp_matches_brute_force(14, 60, terms)


def test_ilp_matches_brute_force_with_fused_partners():
    """As above, each fused node with random partners among the other readers of the class it reads."""
    _ilp_matches_brute_force(12, 40, lambda rng, eg: _random_terms(rng, eg, 0.5))


def test_ilp_matches_brute_force_with_fused_consumers():
    """As above, with random consumers too (a pattern that fuses only whole)."""
    _ilp_matches_brute_force(13, 60, lambda rng, eg: _random_terms(rng, eg, 0.3, 0.6))


# Classes: 0 = input, 1 = X, 2 = S = split(M), 3 = M, 4 = root r(X). X is conv(input) (2) or split0(S); M is
# mconv(input) (3) or concat(X, X), free. The cheapest choice, r(split0(split(concat(X, X)))) = 1, is the identity
# cycle X -> S -> M -> X; the acyclic optimum is r(conv(input)) = 3, and the chain bound 1 + 2 proves it.
IDENTITY_CYCLE = [("in", 0, (), 0.0), ("conv", 1, (0,), 2.0), ("split0", 1, (2,), 0.0), ("split", 2, (3,), 0.0),
                  ("mconv", 3, (0,), 3.0), ("concat", 3, (1, 1), 0.0), ("r", 4, (1,), 1.0)]


def test_path_bound_proves_the_greedy_optimal_through_an_identity_cycle():
    eg = egraph(IDENTITY_CYCLE, [4])
    assert dag.dag_cost(eg, {4: 6, 1: 2, 2: 3, 3: 5}) == pytest.approx(1.0)      # the cyclic choice
    assert bound.class_lower_bounds(eg) == {0: 0.0, 1: 2.0, 2: 2.0, 3: 2.0, 4: 3.0}
    assert bound.path_lower_bound(eg) == pytest.approx(3.0)
    res = ilp.solve_ilp(eg, greedy.greedy_choice(eg), 10, SOLVERS[-1])
    assert res.iterations == 0 and res.status == "optimal"           # proven without any solver call
    assert res.bound == pytest.approx(3.0) and res.gap == pytest.approx(0.0)
    assert res.choice == {0: 0, 1: 1, 4: 6}
    r = extract(eg, method="ilp", ilp_seconds=10)
    assert r.bound == pytest.approx(3.0) and r.dag_cost == pytest.approx(3.0) and r.status == "optimal"
    assert extract(eg, method="greedy").bound is None


def test_path_bound_is_none_when_a_root_cannot_be_computed():
    assert bound.path_lower_bound(egraph(CYCLIC, [3], blacklist={2, 4})) is None


def test_bounds_never_exceed_the_true_optimum_on_random_cyclic_egraphs():
    """Soundness: the path bound and the ILP's reported bound are lower bounds of the acyclic problem."""
    rng = random.Random(11)
    checked = 0
    while checked < 40:
        eg = random_egraph(rng)
        best = brute_force(eg)
        if best == float("inf"):
            assert bound.path_lower_bound(eg) is None
            continue
        assert bound.path_lower_bound(eg) <= best + 1e-9
        for acyclicity in ("order", "lazy"):
            res = ilp.solve_ilp(eg, greedy.greedy_choice(eg), 10, SOLVERS[-1], acyclicity=acyclicity)
            assert res.bound is not None and res.bound <= best + 1e-9, (eg, res)
            assert dag.dag_cost(eg, res.choice) <= (best + 1e-9) / (1 - ilp.REL_GAP)
            assert res.gap == pytest.approx((dag.dag_cost(eg, res.choice) - res.bound) / dag.dag_cost(eg, res.choice)
                                            if dag.dag_cost(eg, res.choice) > 0 else 0.0)
        checked += 1


def test_loader_numbers_classes_naturally_and_maps_children(tmp_path):
    data = {"nodes": {
        "10__0": {"op": "Relu(9)", "cost": 0.5, "eclass": "10", "children": ["9__1"]},
        "9__1": {"op": "Conv2d([1; 2])", "cost": 2.0, "eclass": "9", "children": ["2__0", "2__0"]},
        "9__0": {"op": "Var(\"w\")", "cost": 0.0, "eclass": "9", "children": []},
        "2__0": {"op": "Input([1; 3])", "cost": 0.0, "eclass": "2", "children": []}},
        "root_eclasses": ["10"]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    eg = serialized.load(str(path))
    assert [n.payload for n in eg.nodes] == ["Input([1; 3])", 'Var("w")', "Conv2d([1; 2])", "Relu(9)"]
    assert [n.op for n in eg.nodes] == ["Input", "Var", "Conv2d", "Relu"]
    assert [n.eclass for n in eg.nodes] == [0, 1, 1, 2]       # "2" < "9" < "10"
    assert eg.nodes[2].children == (0, 0) and eg.nodes[3].children == (1,)
    assert eg.roots == [2] and eg.classes == [[0], [1, 2], [3]]


def test_cli_prints_one_json_line_and_rejects_bad_files(tmp_path, capsys):
    good = tmp_path / "g.json"
    good.write_text(json.dumps({"nodes": {"0": {"op": "x", "cost": 1.0, "eclass": "0", "children": []}},
                                "root_eclasses": ["0"]}))
    assert cli.run(str(good), "ilp", 5.0, "auto") == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    row = json.loads(out[0])
    assert set(row) == {"file", "enodes", "eclasses", "dag_cost", "greedy_dag_cost", "method", "status", "seconds",
                        "acyclic", "gap", "bound", "solver", "work", "clocked", "parts"}
    assert row["dag_cost"] == 1.0 and row["acyclic"] is True and row["status"] == "optimal"
    assert row["clocked"] is False

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path, error in ((str(bad), errors.BadEGraph), (str(tmp_path / "missing.json"), errors.MissingPath)):
        with pytest.raises(error, match=r"bad\.json|missing\.json"):
            cli.run(path, "ilp", 5.0, "auto")
        assert capsys.readouterr().out == ""
    with pytest.raises(errors.BadInput, match="method"):
        cli.run(str(good), "exhaustive", 5.0, "auto")
    with pytest.raises(errors.BadInput, match="--ilp_work must be >= 1"):
        cli.run(str(good), "ilp", 5.0, "auto", 0)


def test_cli_extract_failures_are_one_line_with_their_exit_codes(tmp_path):
    """Through the dispatcher: each failure is one stderr line and its tensat_tf.errors code, nothing on stdout."""
    assert (errors.BadEGraph.exit_code, errors.NoAcyclicExtraction.exit_code) == (50, 51)    # the README lists them
    import subprocess
    import sys
    cyclic = {"nodes": {"a": {"op": "f", "cost": 1.0, "eclass": "x", "children": ["b"]},
                        "b": {"op": "g", "cost": 1.0, "eclass": "y", "children": ["a"]}}, "root_eclasses": ["x"]}
    (tmp_path / "cyclic.json").write_text(json.dumps(cyclic))       # x needs y needs x: no acyclic choice
    (tmp_path / "bad.json").write_text("{not json")
    cases = [("cyclic.json", errors.NoAcyclicExtraction, "no acyclic"), ("bad.json", errors.BadEGraph, "bad.json"),
             ("missing.json", errors.MissingPath, "no such file")]
    for name, error, fragment in cases:
        proc = subprocess.run([sys.executable, "-m", "tensat_tf.cli.main", "extract", str(tmp_path / name)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == error.exit_code, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tensat_tf: error:") and fragment in lines[0], proc.stderr
        assert proc.stdout == ""


@needs_data
@pytest.mark.parametrize("solver", SOLVERS)
def test_time_limit_is_honoured_on_bert(solver):
    eg = serialized.load(os.path.join(DATA, "bert.json"))
    t0 = time.monotonic()
    r = extract(eg, method="ilp", ilp_seconds=3.0, solver=solver)
    assert time.monotonic() - t0 <= 3.0 + 2.0
    assert r.acyclic and dag.is_valid(eg, r.choice)
    assert r.dag_cost <= r.greedy_dag_cost + 1e-12
    assert r.status in ("time_limit", "fallback") and r.clocked


@needs_data
@pytest.mark.parametrize("name", sorted(f for f in os.listdir(DATA) if f.endswith(".json")) if os.path.isdir(DATA)
                         else [])
def test_every_tensat_egraph_gives_acyclic_ilp_no_worse_than_greedy(name):
    eg = serialized.load(os.path.join(DATA, name))
    r = extract(eg, method="ilp", ilp_seconds=2.0)
    assert r.acyclic and dag.is_valid(eg, r.choice)
    assert r.dag_cost <= r.greedy_dag_cost + 1e-12
    assert set(r.choice) == set(dag.reachable_classes(eg, r.choice))


def _set_cover(seed: int, n: int = 120, m: int = 90) -> Milp:
    """A random weighted set cover (each of m rows covered by 6 of n binary columns), all columns chosen as the warm
    start: HiGHS 1.16 needs 118 limit checks (branch and bound) to prove seed 1's optimum."""
    rng = np.random.default_rng(seed)
    milp = Milp()
    for j in range(n):
        milp.add_col(f"x{j:03d}", float(rng.integers(1, 20)), 0, 1, True)
    for _ in range(m):
        milp.add_row(sorted(rng.choice(n, size=6, replace=False).tolist()), [1.0] * 6, lo=1)
    milp.start = np.ones(n)
    return milp


@pytest.fixture
def busy_machine():
    """Both cores of this machine kept busy by two other processes while the test runs: a slower machine."""
    import subprocess
    import sys
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for h in hogs:
        h.kill()
        h.wait()


@pytest.mark.skipif(not solvers.highs_available(), reason="highspy is not installed")
def test_a_work_limit_stops_highs_where_it_stops_on_a_busy_machine(busy_machine):
    full = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0)
    assert full.status == "optimal" and full.limit is None and full.work > 10
    limits = (3, full.work // 3, full.work // 2)             # stops before the proof, whatever HiGHS's version needs
    for work in limits:
        quiet = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0, work=work)
        assert quiet.limit == "work" and quiet.work >= work and quiet.status == "feasible"
    # the same limits with the cores taken by two other processes: the same solutions and bounds
    for work, quiet in [(w, solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0, work=w)) for w in limits]:
        busy = solvers.solve(_set_cover(1), "highs", 30, rel_gap=0.0, work=work)
        assert (busy.limit, busy.work, busy.bound, busy.objective) == (quiet.limit, quiet.work, quiet.bound,
                                                                         quiet.objective)
        assert np.array_equal(busy.values, quiet.values)


@pytest.mark.skipif(not solvers.highs_available(), reason="highspy is not installed")
def test_highs_gives_up_at_a_check_only_while_its_gap_is_wider_than_asked():
    full = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0)
    at4 = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0, work=4)
    gap = (at4.objective - at4.bound) / at4.objective          # the gap it has at its 4th check
    assert full.work > 8 and gap > 0.01
    for share, stops in ((0.9 * gap, True), (1.1 * gap, False)):
        res = solvers.Session(_set_cover(1), "highs", rel_gap=0.0).solve(60, None, solvers.GiveUp(4, share))
        if stops:        # as the work limit stops it: the same answer
            assert (res.limit, res.work, res.objective, res.bound) == ("work", 4, at4.objective, at4.bound)
        else:
            assert res.limit is None and res.status == "optimal" and res.work == full.work
            assert res.objective == pytest.approx(full.objective)


@pytest.mark.skipif(not solvers.highs_available(), reason="highspy is not installed")
def test_highs_takes_the_start_as_its_cutoff_and_hands_it_back_when_nothing_beats_it():
    """The start is HiGHS's objective cutoff, not its incumbent (HiGHS 1.16 can misprice a start it is given): a solve
    that finds nothing below start - rel_gap * start proves the start within rel_gap; one that finds something cheaper
    returns it; one stopped before either hands the start back unproven."""
    free = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0)
    assert free.status == "optimal" and free.values is not None
    best = _set_cover(1)
    best.start = free.values.copy()                         # the optimum as the start: nothing beats it
    again = solvers.solve(best, "highs", 60, rel_gap=0.0)
    assert again.status == "optimal" and np.array_equal(again.values, free.values)
    assert again.objective == pytest.approx(free.objective) and again.bound == pytest.approx(free.objective)
    loose = _set_cover(1)                                   # every column: far above the optimum
    found = solvers.solve(loose, "highs", 60, rel_gap=0.0)
    assert found.status == "optimal" and found.objective == pytest.approx(free.objective)
    assert found.objective < loose.objective(loose.start)
    cut = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0, work=1)    # stopped at its first check
    assert cut.limit == "work" and cut.values is not None and cut.status == "feasible"
    assert cut.objective <= loose.objective(loose.start) and (cut.bound is None or cut.bound <= free.objective)


@pytest.mark.skipif(not solvers.highs_available(), reason="highspy is not installed")
def test_a_start_within_the_gap_comes_back_proven_with_a_valid_bound():
    """With rel_gap, a start within it of the optimum is proven (by HiGHS finding nothing below the cutoff, or
    something cheaper): the answer is never dearer than the start, and its bound is never above the optimum."""
    free = solvers.solve(_set_cover(1), "highs", 60, rel_gap=0.0)
    near = _set_cover(1)
    near.start = free.values.round()
    near.start[np.argmax(near.cost * (1 - near.start))] = 1.0    # one more column: still a cover, a little dearer
    gap = (near.objective(near.start) - free.objective) / near.objective(near.start)
    res = solvers.solve(near, "highs", 60, rel_gap=1.5 * gap)
    assert res.status == "optimal" and res.objective <= near.objective(near.start)
    assert res.bound <= free.objective + 1e-9 and res.objective - res.bound <= 1.5 * gap * res.objective + 1e-9


def test_cbc_takes_the_work_limit_as_its_node_limit():
    full = solvers.solve(_set_cover(1, 300, 250), "cbc", 60, rel_gap=0.0)
    cut = solvers.solve(_set_cover(1, 300, 250), "cbc", 60, rel_gap=0.0, work=2)
    assert full.status == "optimal" and full.limit is None and full.work > 2
    assert cut.status == "feasible" and cut.limit == "work" and cut.work == 2
    assert cut.objective >= full.objective and cut.bound <= full.objective + 1e-9


@needs_data
@pytest.mark.slow
@pytest.mark.skipif(not solvers.highs_available(), reason="highspy is not installed")
def test_an_extraction_its_work_limit_stops_is_the_same_on_a_busy_machine(busy_machine):
    """bert.json under 12 work units (its pruning LPs, then 12 of the whole model's limit checks: about 5 s here), once
    with both cores taken: the same choice, stopped by the work limit, not the clock."""
    eg = serialized.load(os.path.join(DATA, "bert.json"))
    a = extract(eg, method="ilp", ilp_seconds=120, work=12)
    b = extract(eg, method="ilp", ilp_seconds=60, work=12)
    assert a.status == b.status == "work_limit" and not a.clocked and not b.clocked
    assert a.choice == b.choice and a.work == b.work >= 12 and a.bound == b.bound
    assert a.dag_cost < a.greedy_dag_cost


@needs_data
def test_results_are_deterministic():
    path = os.path.join(DATA, "resnet50_acyclic.json")
    a, b = serialized.load(path), serialized.load(path)
    assert a == b
    assert greedy.greedy_choice(a) == greedy.greedy_choice(b)
    for solver in SOLVERS:                     # solved to optimality, so no time-dependent stop (a generous limit:
        # on a loaded machine a 10 s limit once ran out, and a fallback is not what this test is about)
        ra = extract(a, method="ilp", ilp_seconds=60, solver=solver)
        rb = extract(b, method="ilp", ilp_seconds=60, solver=solver)
        assert ra.status == rb.status == "optimal"
        assert ra.choice == rb.choice
    big = serialized.load(os.path.join(DATA, "bert.json"))
    assert greedy.greedy_choice(big) == greedy.greedy_choice(serialized.load(os.path.join(DATA, "bert.json")))


# Issue 11's target: every TENSAT e-graph within 1 % of a proven lower bound under the default 10 s limit. The two
# berts need the required-class rows and reduced-cost fixing (extract/required.py, extract/prune.py): without them
# the bound stalls near 0.59 against the optimum 0.7047. Wall time is not asserted here, only in the benchmark
# (tools/bench_extract.py): bert.json needs 5-9 s of its 10 on the machines measured so far (BENCHMARKS.md), and CI
# once ended it at 13.7 % after 9.4 s on a slower one, where the re-pruning after the SCC search found a choice 1 %
# cheaper had no time left. The test gives every search three times the default, so it checks what the search
# reaches, not how fast this machine is.
@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("name", ["bert.json", "bert_acyclic.json", "resnet50.json", "resnet50_acyclic.json",
                                  "vgg.json", "vgg_acyclic.json"])
def test_default_ilp_is_within_one_percent_of_its_bound(name):
    eg = serialized.load(os.path.join(DATA, name))
    r = extract(eg, method="ilp", ilp_seconds=30)
    assert r.acyclic and dag.is_valid(eg, r.choice)
    assert r.bound is not None and r.bound <= r.dag_cost + 1e-12
    assert r.dag_cost <= r.greedy_dag_cost + 1e-12
    assert r.gap is not None and r.gap <= 0.01, (name, r.dag_cost, r.bound, r.gap, r.seconds)


# CBC's log when it stops within -ratioGap (TENSAT's resnet50.json): PuLP calls that "optimal", and reporting the
# objective as the bound claimed 4.396867 where a choice of 4.385795 exists.
CBC_GAP_STOP = """Cbc0011I Exiting as integer gap of 0.023056003 less than 1e-10 or 1%
Result - Optimal solution found (within gap tolerance)
Objective value:                4.39686696
Lower bound:                    4.374
Gap:                            0.01
"""


def test_cbc_bound_is_read_from_its_log_and_never_rounded_up():
    assert solvers.cbc_bound(CBC_GAP_STOP, 4.396866964176297) == pytest.approx(4.396866964176297 - 0.023056003,
                                                                                 abs=1e-7)
    assert solvers.cbc_bound(CBC_GAP_STOP, 4.396866964176297) < 4.396866964176297 - 0.023056003
    no_gap = CBC_GAP_STOP.replace(CBC_GAP_STOP.splitlines()[0] + "\n", "")
    assert solvers.cbc_bound(no_gap, 4.39) == pytest.approx(4.3735)      # "4.374" printed: the bound is >= 4.3735
    assert solvers.cbc_bound("Lower bound: 1.2e-05\n", None) == pytest.approx(1.15e-05)
    assert solvers.cbc_bound("Partial search - best objective 3 (best possible 2.75), took 9 iterations\n",
                             3.0) == 2.75
    assert solvers.cbc_bound("nothing here", 1.0) is None


@pytest.mark.slow
@needs_data
def test_cbc_bound_stays_below_a_known_choice_on_resnet50():
    """4.385795 is the cost of an acyclic choice HiGHS finds (BENCHMARKS.md): no proven bound may exceed it."""
    eg = serialized.load(os.path.join(DATA, "resnet50.json"))
    r = extract(eg, method="ilp", solver="cbc")
    assert r.bound is not None and r.bound <= 4.385795 + 1e-6

