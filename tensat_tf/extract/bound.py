"""A lower bound on the DAG cost of every acyclic choice that needs no solver: the costliest chain ("critical path").

For an acyclic choice let D(c) be the chosen nodes reachable from class c (its sub-DAG, c's own node included). If c's
chosen node i has child classes k, then D(c) = {i} + union of the D(k), and i is in no D(k): a child reaching i again
would be a cycle. So cost(D(c)) >= cost_i + max_k cost(D(k)), and by induction on the height of c in the choice,
cost(D(c)) >= L(c), where L is the least solution of

    L(c) = min over nodes i of c (not blacklisted) of  cost_i + max over child classes k of L(k)   (L(leaf node) = cost)

The DAG cost of a choice is cost(union of D(root)) >= max over roots r of L(r). The bound ignores every cycle by
construction (a class gets a value only from children that already have one), so unlike the ILP's relaxation it
cannot be fooled by e-graph cycles that "compute" a class from itself. That is what makes it strong on chain-shaped
programs whose e-graph is full of identity cycles (Split(Concat(a, b)) = a): on TENSAT's vgg.json it equals the greedy
cost, which proves the greedy choice optimal, where the ILP's relaxation, order rows or cycle cuts included, stays
at 1.43 against 4.85 (BENCHMARKS.md). On graphs with much parallel work (bert.json) it is weak, as it counts one chain.

Computed like Dijkstra's algorithm (Knuth's generalisation: cost_i + max(...) is monotone and never below a child's
value, so the first value settled for a class is its least one). Costs must be non-negative.
"""
from __future__ import annotations

import heapq
from typing import Optional

from tensat_tf.egraph.data import EGraphData


def class_lower_bounds(egraph: EGraphData) -> dict[int, float]:
    """L(c) for every class with an acyclic, non-blacklisted derivation (classes without one are absent)."""
    nodes = egraph.nodes
    kids = [tuple(set(n.children)) for n in nodes]
    parents: list[list[int]] = [[] for _ in range(egraph.num_classes)]
    pending = [len(k) for k in kids]
    heap: list[tuple[float, int]] = []
    for i, k in enumerate(kids):
        if i in egraph.blacklist:
            continue
        for c in k:
            parents[c].append(i)
        if not k:
            heap.append((nodes[i].cost, i))
    heapq.heapify(heap)
    low: dict[int, float] = {}
    while heap:
        v, i = heapq.heappop(heap)
        c = nodes[i].eclass
        if c in low:
            continue
        low[c] = v
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and nodes[p].eclass not in low:
                heapq.heappush(heap, (nodes[p].cost + max(low[k] for k in kids[p]), p))
    return low


def path_lower_bound(egraph: EGraphData) -> Optional[float]:
    """max over roots of L(root): no acyclic choice costs less. None if some root has no acyclic derivation."""
    if any(n.cost < 0 for n in egraph.nodes):
        raise ValueError("the path bound needs non-negative node costs")
    low = class_lower_bounds(egraph)
    if any(r not in low for r in egraph.roots):
        return None
    return max(low[r] for r in egraph.roots)
