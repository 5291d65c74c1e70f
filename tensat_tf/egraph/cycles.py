"""TENSAT's cycle filter, as a post-pass over the exported e-graph.

Sound rewrites can make an e-class reach itself (merging matmul(x, w1) and matmul(x, w2) where w2 is computed from
the first one), and a cyclic choice is not a graph. TENSAT's efficient filter blacklists, in every cycle, the most
recently added e-node, and repeats until no cycle is left; blacklisted nodes are never extracted.

Here the cycles are found on the class graph (an edge c -> d for every non-blacklisted e-node of c with child d),
strongly connected component by component (networkx), so the work is proportional to the cyclic part only. The
node blacklisted in a cycle is a rewrite-created node when there is one (original nodes keep the input graph
extractable), the one with the highest export index among those (export order is table order, our deterministic
stand-in for insertion order). Original nodes are blacklisted only in a cycle made of original nodes alone, which
an identity rewrite can create (Relu(Relu(x)) = Relu(x) puts the outer Relu in its own class).

egglog's `subsume` could also keep such nodes out of later matches during saturation; we filter once, after
saturation, because the filtered nodes must be computed from the exported e-graph anyway and extraction is the only
consumer (documented in the issue note).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Collection

import networkx as nx

from tensat_tf.egraph.data import EGraphData


def cycle_blacklist(g: EGraphData, original: Collection[int]) -> frozenset[int]:
    """Node ids to blacklist so that no cycle remains among the non-blacklisted nodes (plus g.blacklist)."""
    original = set(original)
    black = set(g.blacklist)
    realisers: dict[tuple[int, int], list[int]] = defaultdict(list)     # class edge -> nodes that make it
    dg = nx.DiGraph()
    for i, n in enumerate(g.nodes):
        if i in black:
            continue
        for ch in set(n.children):
            realisers[(n.eclass, ch)].append(i)
            dg.add_edge(n.eclass, ch)

    def drop(i: int) -> None:
        black.add(i)
        n = g.nodes[i]
        for ch in set(n.children):
            lst = realisers[(n.eclass, ch)]
            lst.remove(i)
            if not lst:
                dg.remove_edge(n.eclass, ch)

    stack = [sorted(c) for c in nx.strongly_connected_components(dg) if len(c) > 1 or dg.has_edge(min(c), min(c))]
    stack.sort()
    while stack:
        comp = stack.pop()
        sub = dg.subgraph(comp)
        try:
            cycle = nx.find_cycle(sub, source=comp[0])
        except nx.NetworkXNoCycle:
            continue
        on_cycle = sorted({i for (u, v) in cycle for i in realisers[(u, v)]})
        newest = max(on_cycle, key=lambda i: (i not in original, i))
        drop(newest)
        rest = dg.subgraph(comp)
        stack.extend(sorted(c) for c in nx.strongly_connected_components(rest)
                     if len(c) > 1 or rest.has_edge(min(c), min(c)))
    return frozenset(black)
