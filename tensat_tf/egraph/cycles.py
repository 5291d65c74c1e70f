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

After a drop only the component it was in can split, and _split finds its parts without rerunning networkx on it:
on Xception's e-graph (zoo:real_xception, 3,922 e-nodes) one 2,166-class component loses two or three classes per
drop, 658 drops in all, and recomputing the component after each took 9-20 s per filter (0.4 s now). The blacklist
is the same as recomputing gives (tests/test_engine.py checks both on random e-graphs). The cycle in a component is
found by find_cycle, networkx's walk written on the graph's own dicts (the same cycle; 2-3x less time on ResNet50's
and Xception's filters).

egglog's `subsume` could also keep such nodes out of later matches during saturation; we filter once, after
saturation, because the filtered nodes must be computed from the exported e-graph anyway and extraction is the only
consumer (documented in the issue note).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Collection

import networkx as nx

from tensat_tf.egraph.data import EGraphData


def _cyclic(dg: nx.DiGraph, nodes=None) -> list[list[int]]:
    """The strongly connected components of dg's subgraph on `nodes` (all of dg if None) that hold a cycle, as sorted
    lists."""
    sub = dg if nodes is None else dg.subgraph(nodes)
    return [sorted(c) for c in nx.strongly_connected_components(sub) if len(c) > 1 or sub.has_edge(min(c), min(c))]


def _reaches(adj, inside: set, src: int, targets: set) -> bool:
    """Does src reach every node of `targets` along adj, inside `inside`? (Along predecessors: does every target
    reach src?) Searches level by level, with set operations (C loops), and stops once every target is seen."""
    seen, frontier = {src}, {src}
    while frontier and not targets <= seen:
        nxt = set()
        for x in frontier:
            nxt.update(adj[x])
        nxt &= inside
        nxt -= seen
        seen |= nxt
        frontier = nxt
    return targets <= seen


def _split(dg: nx.DiGraph, nodes: set, touched: list[int]) -> list[list[int]]:
    """The cyclic strongly connected components of `nodes` (consumed), one component before the edges from
    touched[0] to touched[1:] went.

    A node left with no successor or no predecessor in the set is on no cycle: such nodes are peeled off, from the
    touched ones outwards. What is left is still one component when every way into what went (an edge into a peeled
    node, or the edge from u) reaches, through a hub, every way out of it (an edge out of a peeled node, or to a v):
    every old path then has a detour. The searches for that stop once they have seen those few nodes, which on
    Xception's e-graph are near each other; otherwise networkx splits what is left."""
    succ, pred = dg._succ, dg._pred             # the plain dicts behind dg.succ/dg.pred: their views cost 2x here
    u, gone = touched[0], touched[1:]
    todo, peeled = list(touched), []
    while todo:
        x = todo.pop()
        if x in nodes and not (any(w in nodes for w in succ[x]) and any(w in nodes for w in pred[x])):
            nodes.discard(x)
            peeled.append(x)
            todo.extend(succ[x])
            todo.extend(pred[x])
    if len(nodes) < 2:
        return _cyclic(dg, nodes) if nodes else []
    entries = {p for x in peeled for p in pred[x] if p in nodes} | ({u} & nodes)
    exits = {w for x in peeled for w in succ[x] if w in nodes} | (set(gone) & nodes)
    hub = min(exits, default=None)
    if hub is not None and _reaches(succ, nodes, hub, exits) and _reaches(pred, nodes, hub, entries):
        return [sorted(nodes)]
    return _cyclic(dg, nodes)


_END = object()         # find_cycle: a node's successors are used up


def find_cycle(succ, inside: set, source: int) -> list[tuple[int, int]]:
    """networkx's find_cycle(dg's subgraph on `inside`, source) with `succ` = dg._succ, edge for edge: the same
    depth-first walk (each node's successors in insertion order, those outside `inside` skipped; an edge taken once),
    the same path bookkeeping, the same cycle. The filter calls it hundreds of times per e-graph, where walking
    networkx's filtered views made the whole filter 2-3x slower (ResNet50 at 64 pixels: 0.89 s against 0.30 s for
    its three filters, of a 4.4 s pass). Raises nx.NetworkXNoCycle when no cycle is reachable from source."""
    its: dict = {}
    taken: set = set()
    stack = [source]
    path: list = []                     # the active path's edges
    active = {source}
    previous_head = None
    while stack:
        tail = stack[-1]
        if tail not in its:
            its[tail] = iter([w for w in succ[tail] if w in inside])
        head = next(its[tail], _END)
        if head is _END:
            stack.pop()
            continue
        if (tail, head) in taken:
            continue
        taken.add((tail, head))
        stack.append(head)
        if previous_head is not None and tail != previous_head:
            # backtracked: pop the path back to the edge that ends at tail
            while True:
                if not path:
                    active = {tail}
                    break
                active.remove(path.pop()[1])
                if path and path[-1][1] == tail:
                    break
        path.append((tail, head))
        if head in active:
            for i, (u, _) in enumerate(path):
                if u == head:
                    return path[i:]
        active.add(head)
        previous_head = head
    raise nx.NetworkXNoCycle("No cycle found.")


def cycle_blacklist(g: EGraphData, original: Collection[int]) -> frozenset[int]:
    """Node ids to blacklist so that no cycle remains among the non-blacklisted nodes (plus g.blacklist)."""
    original = set(original)
    black = set(g.blacklist)
    realisers: dict[tuple[int, int], list[int]] = defaultdict(list)     # class edge -> nodes that make it
    edges = []
    for i, n in enumerate(g.nodes):
        if i in black:
            continue
        for ch in set(n.children):
            realisers[(n.eclass, ch)].append(i)
            edges.append((n.eclass, ch))
    dg = nx.DiGraph(edges)          # in this order: find_cycle walks successors in insertion order

    def drop(i: int) -> list[int]:
        """Blacklists node i. -> the children whose class edge went with it."""
        black.add(i)
        n = g.nodes[i]
        gone = []
        for ch in set(n.children):
            lst = realisers[(n.eclass, ch)]
            lst.remove(i)
            if not lst:
                dg.remove_edge(n.eclass, ch)
                gone.append(ch)
        return gone

    # The result depends on each component's own drops only (a drop changes no edge inside another component, and
    # find_cycle starts at the component's smallest class), not on the order the stack takes them in.
    stack = _cyclic(dg)
    stack.sort()
    while stack:
        comp = stack.pop()
        inside = set(comp)
        try:
            cycle = find_cycle(dg._succ, inside, comp[0])
        except nx.NetworkXNoCycle:
            continue
        on_cycle = sorted({i for (u, v) in cycle for i in realisers[(u, v)]})
        newest = max(on_cycle, key=lambda i: (i not in original, i))
        u = g.nodes[newest].eclass
        gone = sorted(v for v in drop(newest) if v in inside and v != u)
        if len(comp) == 1 or not gone:         # unchanged but for a self-loop: the same component, if still cyclic
            if len(comp) > 1 or dg.has_edge(u, u):
                stack.append(comp)
            continue
        stack.extend(_split(dg, inside, [u, *gone]))
    return frozenset(black)
