"""Extraction split at cut classes (tensat_tf/extract/decompose.py): which classes are cuts, that the parts' costs add
up to the whole's, and that the split extraction finds the brute-force optimum of small random chained e-graphs with
fused terms."""
from __future__ import annotations

import dataclasses
import random

import pytest

import tensat_tf.extract as extract_mod
from tensat_tf.extract import dag, decompose, extract, greedy, ilp, solvers
from random_egraphs import egraph
from test_extract import _random_terms, _with_fused, brute_force

SOLVER = "highs" if solvers.highs_available() else "cbc"


@pytest.fixture(autouse=True)
def every_cut(monkeypatch):
    """Parts of any size: these e-graphs are far smaller than decompose.MIN_PART_NODES."""
    monkeypatch.setattr(decompose, "MIN_PART_NODES", 1)

# Classes: 0 = input, 1 = a weight (free), 2 = conv(in, w) or conv2(in), 3 = block output relu(2) or fused(in, w),
# 4 = conv(3, w) or conv2(3), 5 = root relu(4). Class 3 is computed by every choice and only class 3 reaches below
# it: the cut.
TWO_BLOCKS = [("in", 0, (), 0.0), ("w", 1, (), 0.0), ("conv", 2, (0, 1), 3.0), ("conv2", 2, (0,), 4.0),
              ("relu", 3, (2,), 1.0), ("fused", 3, (0, 1), 5.0), ("conv", 4, (3, 1), 2.0), ("conv2", 4, (3,), 3.0),
              ("relu", 5, (4,), 1.0)]


def _owners(parts):
    """The class each part computes for the part above it (None for the roots' part)."""
    return [None if p is parts[-1] else p.classes[p.egraph.roots[0]] for p in parts]


def test_a_block_output_every_choice_computes_is_a_cut():
    # 4 is a cut too; parts of at least 3 e-nodes keep only 3
    parts = decompose.split(egraph(TWO_BLOCKS, [5]), min_nodes=3)
    assert _owners(parts) == [3, None]
    below, above = parts
    assert sorted(below.classes) == [0, 1, 2, 3]          # the input is free: it costs nothing and reads nothing
    # above: its own classes 4 and 5, the cut 3 as a leaf of cost 0, the shared weight
    assert sorted(above.classes) == [1, 3, 4, 5]
    assert _owners(decompose.split(egraph(TWO_BLOCKS, [5]))) == [3, 4, None]
    leaf = [n for n, whole in enumerate(above.nodes) if whole is None]
    assert len(leaf) == 1 and above.egraph.nodes[leaf[0]].cost == 0.0 and not above.egraph.nodes[leaf[0]].children


def test_no_cut_where_a_node_above_reads_below_it():
    # the root may also read class 2 directly: class 2 is then shared by both sides of class 3
    spec = TWO_BLOCKS + [("relu2", 5, (4, 2), 0.5)]
    assert decompose.split(egraph(spec, [5])) == []


def test_no_cut_where_a_fused_node_reads_it():
    # conv2 of class 4 fuses into class 3's producer only when it is class 3's only reader: class 3's price depends on
    # what is above it
    eg = _with_fused(egraph(TWO_BLOCKS, [5]), {7: (3, 1.0)})
    assert 3 not in _owners(decompose.split(eg))


def test_no_cut_where_a_choice_can_avoid_the_class():
    spec = TWO_BLOCKS + [("skip", 4, (0,), 9.0)]            # class 4 straight from the input: class 3 not required
    assert 3 not in _owners(decompose.split(egraph(spec, [5])))


def _chained(rng: random.Random, blocks: int = 3, cross: float = 0.0):
    """Random blocks of three classes in a chain (each reads the block before's last class, the input or a free weight;
    cycles inside a block are common), and with probability `cross` a node that reads the middle of the block before."""
    spec = [("in", 0, (), 0.0), ("w", 1, (), 0.0)]
    prev, first = 0, 2
    for _ in range(blocks):
        block = list(range(first, first + 3))
        for c in block:
            for _ in range(rng.randint(1, 2)):
                pool = [prev, 1] + [k for k in block if k != c]
                spec.append(("op", c, tuple(rng.sample(pool, rng.choice([1, 2]))), float(rng.randint(0, 5))))
        if prev != 0 and rng.random() < cross:
            spec.append(("cross", block[-1], (prev - 1,), float(rng.randint(0, 5))))
        prev, first = block[-1], first + 3
    return egraph(spec, [prev])


@pytest.fixture
def parts_solved(monkeypatch):
    """The parts alone, without a try of the whole first (which proves these small e-graphs at once), and the number
    of times they were solved."""
    monkeypatch.setattr(extract_mod, "WHOLE_FIRST_WORK", 0)
    calls = []
    solve = extract_mod._solve_parts
    monkeypatch.setattr(extract_mod, "_solve_parts", lambda *a: calls.append(1) or solve(*a))
    return calls


@pytest.fixture
def ilp_calls(monkeypatch):
    """Every ilp.solve_ilp call from then on (extract()'s whole ILP and each part's), as (args, kwargs)."""
    calls = []
    solve = ilp.solve_ilp
    monkeypatch.setattr(ilp, "solve_ilp", lambda *a, **k: calls.append((a, k)) or solve(*a, **k))
    return calls


@pytest.mark.parametrize("fused", [False, True])
def test_split_extraction_matches_brute_force_on_random_chains(fused, parts_solved):
    rng = random.Random(21 + fused)
    checked = 0
    while checked < 40:
        eg = _chained(rng, cross=0.3)
        if fused:       # fewer than _random_terms gives: a fused node reading a block's output keeps it whole
            terms = _random_terms(rng, eg, 0.3, 0.3)
            eg = _with_fused(eg, {i: t for i, t in terms.items() if rng.random() < 0.4})
        best = brute_force(eg)
        if best == float("inf"):
            continue
        res = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0)
        assert dag.is_valid(eg, res.choice) and res.status == "optimal", (eg, res)
        assert dag.dag_cost(eg, res.choice) == pytest.approx(best), (eg, res)
        assert res.bound <= best + 1e-9
        checked += 1
    assert len(parts_solved) >= 5       # the parts were solved (15 and 8 of 40)


def test_parts_costs_add_up_to_the_merged_choice():
    rng = random.Random(5)
    seen = 0
    while seen < 30:
        eg = _with_fused(_chained(rng, blocks=4), {})
        eg = _with_fused(eg, _random_terms(rng, eg, 0.3, 0.3))
        try:
            parts = decompose.split(eg)
        except greedy.NoExtraction:
            continue
        if not parts:
            continue
        choices = [greedy.greedy_choice(p.egraph) for p in parts]
        merged = dag.prune(eg, decompose.merge(eg, parts, choices))
        assert dag.is_valid(eg, merged)
        assert dag.dag_cost(eg, merged) == pytest.approx(sum(dag.dag_cost(p.egraph, c)
                                                             for p, c in zip(parts, choices)))
        seen += 1


def test_the_split_finds_what_the_whole_ilp_finds(parts_solved):
    rng = random.Random(8)
    for _ in range(20):
        eg = _chained(rng, blocks=5)
        try:
            start = greedy.greedy_choice(eg)
        except greedy.NoExtraction:
            continue
        whole = ilp.solve_ilp(eg, start, 10, SOLVER, rel_gap=0.0)
        res = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0)
        assert res.status == whole.status == "optimal"
        assert res.dag_cost == pytest.approx(dag.dag_cost(eg, whole.choice))


def _three_parts_or_more():
    """The first random chain of six blocks (seed 3) that splits into more than two parts."""
    rng = random.Random(3)
    while True:
        eg = _chained(rng, blocks=6)
        try:
            if len(decompose.split(eg)) > 2:
                return eg
        except greedy.NoExtraction:
            pass


def test_a_later_extraction_of_the_same_egraph_takes_the_parts_proven_before(parts_solved, ilp_calls):
    eg = _three_parts_or_more()
    first = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0)
    assert first.parts == len(first.part_results) > 1 and first.status == "optimal"
    ilp_calls.clear()
    again = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0, previous=first)
    assert ilp_calls == [] and again.choice == first.choice and again.bound == first.bound and again.work == 0
    # a part the previous extraction did not prove is searched again
    unproven = dataclasses.replace(first.part_results[0], status="work_limit")
    extract(eg, "ilp", 10, SOLVER, rel_gap=0.0,
            previous=dataclasses.replace(first, part_results=(unproven,) + first.part_results[1:]))
    assert len(ilp_calls) == 1


def _five_equal_blocks():
    """Class A = conv(prev, w) or conv2(prev), block output B = relu(A) or fused(prev, w), five times."""
    spec, prev = [("in", 0, (), 0.0), ("w", 1, (), 0.0)], 0
    for k in range(5):
        a, b = 2 + 2 * k, 3 + 2 * k
        spec += [("conv", a, (prev, 1), 3.0), ("conv2", a, (prev,), 4.0), ("relu", b, (a,), 1.0),
                 ("fused", b, (prev, 1), 5.0)]
        prev = b
    return egraph(spec, [prev])


def test_a_repeated_block_is_solved_once(parts_solved, ilp_calls):
    eg = _five_equal_blocks()
    parts = decompose.split(eg)
    keys = [p.key() for p in parts]
    assert len(parts) == 5 and len(set(keys)) == 2 and keys[1:] == [keys[1]] * 4   # the first reads the input
    res = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0)
    assert len(ilp_calls) == 2 and res.parts == 5 and res.status == "optimal"
    assert res.dag_cost == pytest.approx(brute_force(eg)) == pytest.approx(5 * 4.0)
    assert [r.work for r in res.part_results[2:]] == [0, 0, 0]


def test_only_an_egraph_that_splits_gives_its_whole_ilp_up_early(ilp_calls):
    extract(egraph(TWO_BLOCKS, [5]), "ilp", 10, SOLVER)
    assert [k.get("give_up") for _, k in ilp_calls] == [extract_mod.WHOLE_GIVE_UP]
    ilp_calls.clear()
    extract(egraph(TWO_BLOCKS[:4], [2]), "ilp", 10, SOLVER)     # one block: no cut
    assert [k.get("give_up") for _, k in ilp_calls] == [None]


def test_a_part_searched_again_goes_on_from_its_choice_and_needs_only_the_gap_the_others_leave(parts_solved,
                                                                                              ilp_calls):
    eg = _three_parts_or_more()
    first = extract(eg, "ilp", 10, SOLVER, rel_gap=0.0)
    costs = [dag.dag_cost(p.egraph, r.choice) for p, r in zip(decompose.split(eg), first.part_results)]
    assert all(r.status == "optimal" and r.bound == pytest.approx(c) for r, c in zip(first.part_results, costs))
    ilp_calls.clear()
    # part 0 unproven, with no bound: the distance to prove is all its cost; the others are at their optima
    unproven = dataclasses.replace(first.part_results[0], status="work_limit", bound=None)
    again = extract(eg, "ilp", 10, SOLVER, rel_gap=0.2,
                    previous=dataclasses.replace(first, part_results=(unproven,) + first.part_results[1:]))
    assert [(a[1], k["rel_gap"]) for a, k in ilp_calls] == [(unproven.choice,
                                                             pytest.approx(max(0.2, 0.2 * sum(costs) / costs[0])))]
    assert again.status == "optimal" and again.dag_cost <= first.dag_cost + 1e-9


def test_parts_that_repeat_are_solved_without_the_whole_first(ilp_calls):
    eg = _five_equal_blocks()
    assert decompose.find(eg).repeats()
    res = extract(eg, "ilp", 10, SOLVER)
    solved = [a[0] for a, _ in ilp_calls]
    assert res.parts == 5 and len(solved) == 2 and eg not in solved       # two parts, not the whole
    assert not decompose.find(egraph(TWO_BLOCKS, [5])).repeats()       # two parts, both different
