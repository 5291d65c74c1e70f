"""What a choice (e-class -> e-node) means as a program: the classes it needs, its DAG cost, and whether it is acyclic.

These are the checks every extractor's result goes through, so they are written once, plainly, and do not trust the
extractor: a choice is read only from the roots down.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Optional

import networkx as nx

from tensat_tf.egraph.data import EGraphData

Choice = Mapping[int, int]   # class id -> chosen node id


def reachable_classes(egraph: EGraphData, choice: Choice) -> list[int]:
    """Classes the roots need under `choice`, in depth-first discovery order. KeyError if one has no choice."""
    seen: set[int] = set()
    order: list[int] = []
    stack = list(reversed(egraph.roots))
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        node = egraph.nodes[choice[c]]
        stack.extend(reversed(node.children))
    return order


def prune(egraph: EGraphData, choice: Choice) -> dict[int, int]:
    """Only the entries of `choice` the roots need (solvers may set extra, unused nodes)."""
    return {c: choice[c] for c in sorted(reachable_classes(egraph, choice))}


def dag_cost(egraph: EGraphData, choice: Choice) -> float:
    """Sum of self costs of the chosen nodes reachable from the roots, each counted once (shared subgraphs once),
    plus the extra of every chosen fused node whose fusion the program does not allow (EGraphData.fused, unfused)
    and the surcharge of every one whose producer is chosen (surcharged)."""
    needed = reachable_classes(egraph, choice)
    cost = sum(egraph.nodes[choice[c]].cost for c in sorted(needed))
    cost += sum(egraph.fused[i].surcharge for i in surcharged(egraph, choice, needed))
    return cost + sum(egraph.fused[i].extra for i in unfused(egraph, choice, needed))


def surcharged(egraph: EGraphData, choice: Choice, needed: Optional[list[int]] = None) -> list[int]:
    """The chosen fused nodes with a surcharge (EGraphData.fused) whose `reads` is computed by one of their
    producers, ascending. `needed`: reachable_classes(egraph, choice), when the caller has it."""
    if not any(f.surcharge for f in egraph.fused.values()):
        return []
    if needed is None:
        needed = reachable_classes(egraph, choice)
    out = []
    for c in needed:
        f = egraph.fused.get(choice[c])
        if f is not None and f.charged(choice):
            out.append(choice[c])
    return sorted(out)


def unfused(egraph: EGraphData, choice: Choice, needed: Optional[list[int]] = None) -> set[int]:
    """The chosen fused nodes (EGraphData.fused) that run as separate ops in the program `choice` describes: the node
    chosen for their `reads` is not one of their producers, or another node reads it (partners aside; a root counts
    as a reader), or their `consumers` are not their class's only readers, or a fused node they depend on runs
    separately: their producer (an activation on a bias that did not fuse into its convolution runs alone too) or the
    consumer that reads them (a pattern fuses whole or not at all). `needed`: reachable_classes(egraph, choice), when
    the caller has it."""
    if not egraph.fused:
        return set()
    if needed is None:
        needed = reachable_classes(egraph, choice)
    readers: dict[int, set[int]] = defaultdict(set)     # class -> the chosen nodes reading it (-1: a root)
    for r in egraph.roots:
        readers[r].add(-1)
    for c in needed:
        for k in egraph.nodes[choice[c]].children:
            readers[k].add(choice[c])
    chosen = [choice[c] for c in needed if choice[c] in egraph.fused]
    alone: set[int] = set()
    for i in chosen:
        f = egraph.fused[i]
        own = readers[egraph.nodes[i].eclass]
        if (readers[f.reads] - {i} - f.partners or choice.get(f.reads) not in f.producers
                or (f.consumers and (not own or own - f.consumers))):
            alone.add(i)
    # what runs alone spreads to the fused nodes that depend on it, both ways, to a fixpoint
    depends: dict[int, list[int]] = defaultdict(list)   # node -> the chosen fused nodes that run alone if it does
    for i in chosen:
        f = egraph.fused[i]
        depends[choice[f.reads]].append(i)
        for k in readers[egraph.nodes[i].eclass] & f.consumers:
            depends[k].append(i)
    work = sorted(alone)
    while work:
        for i in depends.get(work.pop(), ()):
            if i not in alone:
                alone.add(i)
                work.append(i)
    return alone


def class_graph(egraph: EGraphData, choice: Choice) -> nx.DiGraph:
    """Edge parent class -> child class for every chosen node reachable from the roots."""
    g = nx.DiGraph()
    for c in reachable_classes(egraph, choice):
        g.add_node(c)
        g.add_edges_from((c, child) for child in egraph.nodes[choice[c]].children)
    return g


def find_cycle(egraph: EGraphData, choice: Choice) -> Optional[list[int]]:
    """A cycle of classes [c0, c1, ..., ck-1] (ci's chosen node has child ci+1, ck-1's has c0), or None."""
    try:
        edges = nx.find_cycle(class_graph(egraph, choice))
    except nx.NetworkXNoCycle:
        return None
    return [u for u, _ in edges]


def is_acyclic(egraph: EGraphData, choice: Choice) -> bool:
    return find_cycle(egraph, choice) is None


def is_valid(egraph: EGraphData, choice: Choice) -> bool:
    """Complete (every needed class chosen), consistent (node in its class, not blacklisted) and acyclic."""
    try:
        needed = reachable_classes(egraph, choice)
    except KeyError:
        return False
    for c in needed:
        n = choice[c]
        if egraph.nodes[n].eclass != c or n in egraph.blacklist:
            return False
    return is_acyclic(egraph, choice)
