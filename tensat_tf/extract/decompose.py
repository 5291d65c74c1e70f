"""Split one extraction into independent ones at the classes every choice computes and nothing above reaches below.

A class R is a cut when
  1. every acyclic choice computes it (required.py);
  2. nothing reaches below it from elsewhere: the nodes of the classes R dominates (every path from the roots to them
     passes through R) read only such classes, R itself, and free classes (below);
  3. its price does not depend on what is above it: no fused node reads R (a bias fuses into R's producer or not
     depending on R's other readers, EGraphData.fused), no node of R is the inner part of a fused pattern (whose
     consumers read R), and R is on no cycle of the class graph.
A free class is one whose live nodes all cost 0, belong to no fused pattern and read only free classes (a least
fixpoint from the leaves: weights, constants and their reshapes), and which no fused node reads. Reading one adds
nothing to a program's cost and can close no cycle, so parts may share them.

Every acyclic choice is then a choice of the classes below R (rooted at R) and one of the rest (R a leaf of cost 0),
which share only free classes: their costs add, and so do their optima and their lower bounds. Splitting at every cut
gives parts (one per cut, and the part of the roots) that the ILP solves one by one.

Why: a branch and bound over independent parts adds their search trees, one over the whole multiplies them. On
keras.applications ResNet50 at 224 pixels the whole ILP's LP bound is 7.62 against an optimum of 75.4 (a class's
demand splits over equal forms of conv + bias + batch norm that later reconverge, and a class read by two of them is
paid as the larger demand, not the sum), and HiGHS took 6.7 s to prove the whole; its 19 parts (each a residual block
of at most 250 e-nodes, as weak an LP) are proven one by one in 1.0-1.4 s together (BENCHMARKS.md).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Optional

import networkx as nx

from tensat_tf.egraph.data import EGraphData, ENode, Fused
from tensat_tf.extract.reduce import Reduced, reduce
from tensat_tf.extract.required import required_classes

_TOP = -1     # the dominator tree's root: a class above every root
# Parts smaller than this many e-nodes join the part above: each part costs a greedy choice, a bound and often a
# model (20-30 ms on ResNet50's). Not more: a part's LP weakens fast with its size. On ResNet50 at 224 pixels, parts of
# at least 40 e-nodes make one of 291 that takes 1,650 units of work to prove, where at 10 its two halves take 67 and
# a few (1.4 s for all 19 parts against 3.7 s; BENCHMARKS.md).
MIN_PART_NODES = 10


@dataclasses.dataclass
class Part:
    egraph: EGraphData        # the part's classes, the cuts below it as leaves of cost 0, the free classes it reads
    nodes: list[Optional[int]]    # part node -> whole node (None: a cut's leaf)
    classes: list[int]            # part class -> whole class

    def key(self) -> tuple:
        """Everything extraction reads of the part (payloads aside): two parts with equal keys are the same ILP,
        whose solution is the same part-node choice. The repeated blocks of a network give equal keys when their
        nodes are numbered alike (ResNet152 at 224 pixels: 53 parts, 14-16 distinct; DenseNet-121's 60 all differ,
        their channel counts grow)."""
        g = self.egraph
        return (tuple((n.op, n.eclass, n.children, n.cost) for n in g.nodes), tuple(sorted(g.fused.items())),
                tuple(g.roots), tuple(sorted(g.blacklist)))


@dataclasses.dataclass
class Split:
    """Where an e-graph splits: its cuts, and the classes of each part (by the cut it hangs from; _TOP: the roots').
    The parts themselves are built only when asked for: an extraction that the whole ILP proves needs none."""
    egraph: EGraphData
    red: Reduced
    members: dict[int, list[int]]
    cuts: frozenset[int]
    free: frozenset[int]
    _built: Optional[list[Part]] = dataclasses.field(default=None, repr=False)

    def parts(self) -> list[Part]:
        """The parts, the roots' part last; [] if one reads what it should not (cannot happen: a last check)."""
        if self._built is None:
            out = [_part(self.egraph, self.red, self.members[o], [o] if o != _TOP else list(self.red.roots),
                         self.cuts, self.free) for o in sorted(self.cuts) + [_TOP]]
            self._built = [] if any(p is None for p in out) else out
        return self._built

    def repeats(self) -> bool:
        """Whether at most half of the parts differ (Part.key): solved one by one, they are then fewer ILPs than
        parts, a repetition the whole ILP cannot use (ConvNeXt-Small at 224 pixels: 33-40 parts, 14-19 distinct,
        proven in 1.0-2.2 s against 1.2-4.5 s for the whole; BENCHMARKS.md). The parts are built only where their
        sizes (classes, e-nodes) already repeat that much."""
        sizes = [(len(m), sum(len(self.red.classes[c]) for c in m)) for m in self.members.values()]
        if 2 * len(set(sizes)) > len(sizes):
            return False
        parts = self.parts()
        return bool(parts) and 2 * len({p.key() for p in parts}) <= len(parts)


def split(egraph: EGraphData, red: Optional[Reduced] = None, min_nodes: Optional[int] = None) -> list[Part]:
    """The parts of `egraph` (find, then Split.parts); [] when it has no cut."""
    where = find(egraph, red, min_nodes)
    return where.parts() if where is not None else []


def find(egraph: EGraphData, red: Optional[Reduced] = None, min_nodes: Optional[int] = None) -> Optional[Split]:
    """Where `egraph` (reduced first: reduce.py) splits; None when it has no cut. A cut whose part would have fewer
    than `min_nodes` e-nodes (default MIN_PART_NODES) is not used: its classes join the part above."""
    red = reduce(egraph) if red is None else red
    min_nodes = MIN_PART_NODES if min_nodes is None else min_nodes
    free = _free_classes(egraph, red)
    graph = nx.DiGraph()
    graph.add_node(_TOP)
    for r in red.roots:
        graph.add_edge(_TOP, r)
    for c in sorted(red.classes):
        if c not in free:
            graph.add_node(c)
            for i in red.classes[c]:
                graph.add_edges_from((c, k) for k in red.kids[i] if k not in free)
    idom = nx.immediate_dominators(graph, _TOP)
    postorder = _postorder(idom)
    cuts = set(_cuts(egraph, red, graph, idom, postorder))
    if not cuts:
        return None
    size = {c: len(red.classes[c]) for c in idom if c != _TOP}
    for c in postorder:                      # children first: a small part joins the one above before it is sized
        if c == _TOP:
            continue
        up = idom[c]
        while up not in cuts and up != _TOP:
            up = idom[up]
        if c in cuts and size[c] < min_nodes:
            cuts.discard(c)
        if c not in cuts and up != _TOP:
            size[up] += size[c]
    if not cuts:
        return None
    owner: dict[int, int] = {}
    for c in sorted(idom):
        w = c
        while w not in cuts and w != _TOP:
            w = idom[w]
        owner[c] = w
    members: dict[int, list[int]] = defaultdict(list)
    for c in sorted(owner):
        if c != _TOP:
            members[owner[c]].append(c)
    return Split(egraph, red, dict(members), frozenset(cuts), free)


def merge(egraph: EGraphData, parts: list[Part], choices: list[dict[int, int]]) -> dict[int, int]:
    """One choice of the whole from one choice per part: each class as the first part that chose it (only free classes
    are chosen by several; each part's choice reads only classes it chose, so no cycle can close across them)."""
    out: dict[int, int] = {}
    for part, choice in zip(parts, choices):
        for c, i in sorted(choice.items()):
            whole = part.nodes[i]
            if whole is not None:
                out.setdefault(part.classes[c], whole)
    return out


def _free_classes(egraph: EGraphData, red: Reduced) -> frozenset[int]:
    """The free classes of the module doc."""
    fused_reads = {f.reads for f in egraph.fused.values()}
    in_pattern = set(egraph.fused)
    for f in egraph.fused.values():
        in_pattern |= f.producers | f.partners | f.consumers
    pending: dict[int, set[int]] = {}
    ready = []
    for c, nodes in red.classes.items():
        if c in fused_reads or any(egraph.nodes[i].cost != 0 or i in in_pattern for i in nodes):
            continue
        pending[c] = {k for i in nodes for k in red.kids[i]}
        if not pending[c]:
            ready.append(c)
    readers: dict[int, list[int]] = defaultdict(list)
    for c, need in pending.items():
        for k in need:
            readers[k].append(c)
    free: set[int] = set()
    while ready:
        c = ready.pop()
        free.add(c)
        for r in readers[c]:
            pending[r].discard(c)
            if not pending[r]:
                ready.append(r)
    return frozenset(free)


def _postorder(idom: dict[int, int]) -> list[int]:
    """The dominator tree's classes, each after those it dominates (children in ascending order)."""
    tree: dict[int, list[int]] = defaultdict(list)
    for v, d in sorted(idom.items()):
        if v != _TOP:
            tree[d].append(v)
    out = []
    stack = [(_TOP, False)]
    while stack:
        v, done = stack.pop()
        if done:
            out.append(v)
        else:
            stack.append((v, True))
            stack.extend((w, False) for w in reversed(tree[v]))
    return out


def _cuts(egraph: EGraphData, red: Reduced, graph: nx.DiGraph, idom: dict[int, int],
          postorder: list[int]) -> frozenset[int]:
    """The classes of conditions 1-3 (module doc). An edge u -> v leaves the part of every class that dominates u and
    not v: those on the dominator tree's path up from u to the first dominator of v."""
    last = {v: n for n, v in enumerate(postorder)}
    # v's subtree is the postorder interval (last[v] - size + 1 .. last[v])
    size: dict[int, int] = defaultdict(lambda: 1)
    for v in postorder:
        if v != _TOP:
            size[idom[v]] += size[v]

    def dominates(a: int, b: int) -> bool:
        return last[a] - size[a] < last[b] <= last[a]
    bad = {_TOP} | set(red.roots) | {f.reads for f in egraph.fused.values()}      # a root's part: the roots' part
    bad |= {egraph.nodes[i].eclass for i, f in egraph.fused.items() if f.consumers}
    bad |= {c for s in nx.strongly_connected_components(graph) if len(s) > 1 for c in s}
    for u, v in graph.edges:
        w = u
        while not dominates(w, v):
            bad.add(w)
            w = idom[w]
    return frozenset(set(required_classes(red.classes, red.kids, red.roots)) & set(idom) - bad)


def _part(egraph: EGraphData, red: Reduced, own: list[int], roots: list[int], cuts: frozenset[int],
          free: frozenset[int]) -> Optional[Part]:
    """The part made of classes `own`; None if it reads a class that is neither its own, a cut, nor free (cannot
    happen for cuts found by _cuts: a last check)."""
    mine = set(own)
    leaves: set[int] = set()
    shared: set[int] = set()
    work = [k for c in own for i in red.classes[c] for k in red.kids[i]] + roots
    while work:
        k = work.pop()
        if k in mine or k in leaves or k in shared:
            continue
        if k in free:
            shared.add(k)
            work.extend(j for i in red.classes[k] for j in red.kids[i])
        elif k in cuts:
            leaves.add(k)
        else:
            return None
    classes = sorted(mine | leaves | shared)
    cid = {c: n for n, c in enumerate(classes)}
    nodes: list[Optional[int]] = []
    enodes: list[ENode] = []
    for c in classes:
        if c in leaves and c not in mine:
            nodes.append(None)
            enodes.append(ENode("Cut", cid[c], (), 0.0))
            continue
        for i in red.classes[c]:
            n = egraph.nodes[i]
            nodes.append(i)
            enodes.append(dataclasses.replace(n, eclass=cid[c], children=tuple(cid[k] for k in n.children)))
    nid = {i: n for n, i in enumerate(nodes) if i is not None}
    # A pattern's consumers the part does not have (reduce.py dropped them) can never be chosen, like its missing
    # producers and partners; but an empty set of consumers means "no pattern" (EGraphData.fused), so a pattern left
    # with none keeps one that is no node: it still never fuses.
    nobody = frozenset({len(nodes)})
    fused: dict[int, Fused] = {}
    for i, n in nid.items():
        f = egraph.fused.get(i)
        if f is not None:
            if f.reads not in cid:
                return None
            consumers = frozenset(nid[j] for j in f.consumers if j in nid)
            fused[n] = dataclasses.replace(
                f, reads=cid[f.reads], producers=frozenset(nid[j] for j in f.producers if j in nid),
                partners=frozenset(nid[j] for j in f.partners if j in nid),
                consumers=consumers or (nobody if f.consumers else frozenset()))
    part = EGraphData.build(enodes, [cid[r] for r in roots])
    return Part(dataclasses.replace(part, fused=fused), nodes, classes)
