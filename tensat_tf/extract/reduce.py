"""Shrink an e-graph before the ILP, keeping at least one optimal acyclic choice.

Each step removes only nodes that no optimal acyclic choice needs:
  1. Blacklisted nodes, and nodes that are their own child (a one-node cycle).
  2. Nodes with an ungroundable child class: a class is groundable when some node in it has only groundable children
     (the least fixpoint, computed bottom-up like the greedy). An acyclic choice is a bottom-up construction, so it
     can never use a class outside this set; iterated "empty child class" removal would miss classes that only feed
     themselves through a cycle.
  3. Dominated nodes: b dominates a (same class) when b's child classes are a subset of a's and b costs no more,
     counting b's fused extra (EGraphData.fused) as paid, with those of the fused nodes it produces for (their
     fusion needs b's: dag.unfused), and a's as not; b's surcharge, and those of the nodes b produces for that a
     does not, as paid too (choosing b may charge them: dag.surcharged). Swapping a for b in any
     acyclic choice keeps it acyclic (b's edges are a subset of a's, into classes already chosen) and costs no more
     (b reads fewer classes, so no other node's extra is added), provided b is a producer of every fused node a is
     one of (a conv that a bias fuses with is not dominated by a cheaper Split output), a partner of every one
     a is a partner of (a swish's Sigmoid is not dominated by another reader of its input) and a consumer of every
     one a is a consumer of (a hard swish's last Mul is not dominated by a Mul that ends no pattern). Equal pairs keep
     the lowest
     id, so the relation is a strict order and every removed node has a kept dominator.
  4. Classes unreachable from the roots through the remaining nodes, and their nodes.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract.greedy import NoExtraction, needed_classes


@dataclasses.dataclass
class Reduced:
    nodes: list[int]                     # kept node ids, ascending
    classes: dict[int, list[int]]        # kept class -> its kept nodes, ascending (every kept class has one)
    kids: dict[int, tuple[int, ...]]     # kept node -> distinct child classes, ascending
    roots: list[int]                     # distinct root classes


def reduce(egraph: EGraphData, keep: Iterable[int] = ()) -> Reduced:
    """`keep`: nodes never dropped as dominated (a known choice's, so that it stays a warm start); the other steps
    never drop a node of an acyclic choice avoiding the blacklist."""
    nodes = egraph.nodes
    kids = [tuple(sorted(set(n.children))) for n in nodes]
    alive = [i not in egraph.blacklist and nodes[i].eclass not in kids[i] for i in range(len(nodes))]

    _drop_ungroundable(egraph, kids, alive)
    roots = list(dict.fromkeys(egraph.roots))
    bad = [r for r in roots if not any(alive[i] for i in egraph.classes[r])]
    if bad:
        raise NoExtraction(f"root classes {bad} have no acyclic, non-blacklisted extraction")
    _drop_dominated(egraph, kids, alive, frozenset(keep))

    reach = needed_classes(egraph, alive)
    classes = {c: [i for i in members if alive[i]] for c, members in enumerate(egraph.classes) if reach[c]}
    classes = {c: m for c, m in classes.items() if m}
    kept = sorted(i for m in classes.values() for i in m)
    return Reduced(kept, classes, {i: kids[i] for i in kept}, roots)


def _drop_ungroundable(egraph: EGraphData, kids: list[tuple[int, ...]], alive: list[bool]) -> None:
    parents: list[list[int]] = [[] for _ in range(egraph.num_classes)]
    pending = [len(k) for k in kids]
    ready = []
    for i, k in enumerate(kids):
        if not alive[i]:
            continue
        for c in k:
            parents[c].append(i)
        if not k:
            ready.append(i)
    grounded = [False] * egraph.num_classes
    while ready:
        c = egraph.nodes[ready.pop()].eclass
        if grounded[c]:
            continue
        grounded[c] = True
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0:
                ready.append(p)
    for i, k in enumerate(kids):
        if alive[i] and not all(grounded[c] for c in k):
            alive[i] = False


def _chain_extra(egraph: EGraphData, i: int, produces: dict[int, set[int]], memo: dict[int, float]) -> float:
    """The most that choosing fused node i can add in extras: its own, and, as a producer that may run alone, those of
    the fused nodes it produces for, down the chain (dag.unfused). 0 for a node that is not fused."""
    if i not in egraph.fused:
        return 0.0
    if i not in memo:
        memo[i] = egraph.fused[i].extra
        memo[i] += sum(_chain_extra(egraph, j, produces, memo) for j in sorted(produces.get(i, ())))
    return memo[i]


def _pattern_extra(egraph: EGraphData, i: int, linked: dict[int, set[int]]) -> float:
    """What choosing node i can add in extras of the fused nodes that run alone when it does, through consumers as
    well as producers (Fused.consumers: a pattern fuses whole), each counted once. 0 for a node that is not fused."""
    if i not in egraph.fused:
        return 0.0
    seen, work = {i}, [i]
    while work:
        for j in linked.get(work.pop(), ()):
            if j not in seen:
                seen.add(j)
                work.append(j)
    return sum(egraph.fused[j].extra for j in seen)


def _drop_dominated(egraph: EGraphData, kids: list[tuple[int, ...]], alive: list[bool], keep: frozenset[int]) -> None:
    cost = [n.cost for n in egraph.nodes]
    produces: dict[int, set[int]] = {}          # node -> the fused nodes it is a producer for
    partner: dict[int, set[int]] = {}           # node -> the fused nodes it is a partner of
    consumes: dict[int, set[int]] = {}          # node -> the fused nodes it is a consumer of
    linked: dict[int, set[int]] = {}            # node -> the fused nodes that run alone when it does
    for f_node, f in egraph.fused.items():
        for j in f.producers:
            produces.setdefault(j, set()).add(f_node)
            linked.setdefault(j, set()).add(f_node)
        for j in f.partners:
            partner.setdefault(j, set()).add(f_node)
        for j in f.consumers:
            consumes.setdefault(j, set()).add(f_node)
            linked.setdefault(j, set()).add(f_node)
    memo: dict[int, float] = {}
    worst = [c + _chain_extra(egraph, i, produces, memo) for i, c in enumerate(cost)]
    for i, f in egraph.fused.items():
        worst[i] += f.surcharge
    charged = {i: f.surcharge for i, f in egraph.fused.items() if f.surcharge}
    if consumes:
        # a pattern's nodes also make their producers run alone: an upper bound on top of the chain's (graphs
        # without such patterns keep exactly the bound they had, and so the same reductions)
        worst = [w + _pattern_extra(egraph, i, linked) for i, w in enumerate(worst)]
    none: set[int] = set()
    for members in egraph.classes:
        live = [i for i in members if alive[i]]
        if len(live) < 2:
            continue
        sets = {i: frozenset(kids[i]) for i in live}
        for a in live:
            if a in keep:
                continue
            for b in live:
                if b == a or not (sets[b] <= sets[a] and worst[b] <= cost[a]
                                  and produces.get(a, none) <= produces.get(b, none)
                                  and partner.get(a, none) <= partner.get(b, none)
                                  and consumes.get(a, none) <= consumes.get(b, none)):
                    continue
                # the surcharges b's choice may add that a's does not: only for a pair that passed the rest
                added = sum(charged.get(j, 0.0) for j in produces.get(b, none) - produces.get(a, none))
                if worst[b] + added > cost[a]:
                    continue
                if sets[b] != sets[a] or worst[b] + added < cost[a] or b < a:
                    alive[a] = False
                    break
