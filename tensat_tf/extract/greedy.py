"""Greedy DAG extraction: each class picks the node whose own cost plus the cost of the UNION of the classes it needs
below is smallest (extraction-gym's "greedy-dag"), so a subgraph shared by two children is paid once, unlike egg's
tree-cost extractor.

The classes are settled in Dijkstra order: a node becomes a candidate only once every one of its child classes is
settled, and the cheapest candidate overall settles its class next. A class's choice therefore depends only on classes
settled before it, which makes the result acyclic by construction on cyclic e-graphs, with no repair pass. With
non-negative costs a node's union cost is at least each child's, so a class settled now could not get a cheaper node
from children settled later: each class gets the cheapest node given its children's choices, without iterating.

The set of classes below a choice is an int used as a bitset (bit = class id): union is one C-level OR. Classes whose
chosen node costs nothing are left out of the sets, as they add nothing to any sum.

A node with a surcharge (EGraphData.fused: a fused kernel dearer than the separate op) costs it on top where the
node settled for the class it reads is one of its producers, as dag.dag_cost counts it: that child is settled before
the node is priced. Without it the greedy choice took a conv's AddV2 bias and its BiasAdd as equal and paid the
remapper hazard's surcharge on each (MobileNetV2: 42 of them, 0.8 % over the greedy choice that avoids them, inside
the 1 % the path bound then proved).

Ties break on the lowest node id, so the result is deterministic.
"""
from __future__ import annotations

import heapq
from typing import Optional, Sequence

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag


class NoExtraction(ValueError):
    """Some root cannot be computed without a blacklisted node or a cycle."""


def _bits(x: int):
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def needed_classes(egraph: EGraphData, allowed: Optional[Sequence[bool]] = None) -> list[bool]:
    """Classes reachable from the roots through any allowed node (an over-approximation of what a choice needs)."""
    reach = [False] * egraph.num_classes
    stack = list(egraph.roots)
    while stack:
        c = stack.pop()
        if reach[c]:
            continue
        reach[c] = True
        for i in egraph.classes[c]:
            if allowed is None or allowed[i]:
                stack.extend(ch for ch in egraph.nodes[i].children if not reach[ch])
    return reach


def greedy_choice(egraph: EGraphData) -> dict[int, int]:
    """Acyclic choice {class: node} for the classes the roots need; blacklisted nodes are never chosen.
    Raises NoExtraction if a root cannot be computed."""
    nodes = egraph.nodes
    cost = [n.cost for n in nodes]
    allowed = [i not in egraph.blacklist for i in range(len(nodes))]
    reach = needed_classes(egraph, allowed)

    # parents[c]: allowed nodes with c among their (distinct) child classes; pending[i]: unsettled child classes.
    parents: list[list[int]] = [[] for _ in range(egraph.num_classes)]
    pending = [0] * len(nodes)
    heap: list[tuple[float, int]] = []
    for c, members in enumerate(egraph.classes):
        if not reach[c]:
            continue
        for i in members:
            if not allowed[i]:
                continue
            kids = set(nodes[i].children)
            pending[i] = len(kids)
            for k in kids:
                parents[k].append(i)
            if not kids:
                heap.append((cost[i], i))
    heapq.heapify(heap)

    chosen: dict[int, int] = {}
    below = [0] * egraph.num_classes          # bitset of costly classes under the choice, the class itself included
    total = [0.0] * egraph.num_classes        # sum of own costs over that set
    own = [0.0] * egraph.num_classes          # cost of the class's chosen node

    def own_cost(i: int) -> float:
        """i's cost with its surcharge where its children's choices charge it (they are settled)."""
        f = egraph.fused.get(i)
        return cost[i] + f.surcharge if f is not None and f.charged(chosen) else cost[i]

    while heap:
        c_i, i = heapq.heappop(heap)
        c = nodes[i].eclass
        if c in chosen:
            continue
        chosen[c] = i
        # The heap key was computed when i was pushed, from children settled (hence frozen) by then: it is exact.
        own[c] = own_cost(i)
        below[c] = _union(nodes[i].children, below, total, own)[0] | ((1 << c) if own[c] != 0 else 0)
        total[c] = c_i
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and nodes[p].eclass not in chosen:
                heapq.heappush(heap, (own_cost(p) + _union(nodes[p].children, below, total, own)[1], p))

    missing = [r for r in egraph.roots if r not in chosen]
    if missing:
        raise NoExtraction(f"root classes {missing} have no acyclic, non-blacklisted extraction")
    return dag.prune(egraph, chosen)


def _union(children: Sequence[int], below: list[int], total: list[float], own: list[float]) -> tuple[int, float]:
    """(bitset, cost) of the union of the children's sets: start from the costliest child and add only what the
    others bring that it lacks, which is usually little, so the sum stays cheap."""
    if not children:
        return 0, 0.0
    base = max(children, key=lambda k: (total[k], -k))
    acc, s = below[base], total[base]
    for k in children:
        extra = below[k] & ~acc
        if extra:
            acc |= extra
            s += sum(own[b] for b in _bits(extra))
    return acc, s
