"""The exported e-graph: the one data structure shared by export, cost and extraction.

Both sources produce it: the egglog export of our own e-graph (tensat_tf.egraph.export) and egraph-serialize JSON
files such as TENSAT's benchmark e-graphs (tensat_tf.extract.serialized). Extraction only ever sees this type, so it
can be tested and benchmarked on its own.

Ids are dense integers so that the ILP and the greedy pass can use lists, and so that iteration order (and with it
every tie-break) is deterministic: nodes are numbered in export order, classes in order of first appearance.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class ENode:
    op: str                       # operator name (egglog function name, or the text before '(' in serialized JSON)
    eclass: int                   # the class this node belongs to
    children: tuple[int, ...]     # child CLASS ids, in argument order (duplicates allowed)
    cost: float = 0.0             # self cost; the cost model may fill it in after export
    payload: Any = None           # literal arguments and anything the emitter needs (never read by extraction)


@dataclasses.dataclass(frozen=True)
class Fused:
    """A node priced as the epilogue of the kernel that computes class `reads` (a bias on a convolution, an
    activation on that bias). TF fuses it only when the node chosen for `reads` is one of `producers` and this node
    is its only reader, `partners` aside (a root counts as a reader); otherwise the node costs `extra` more.
    `partners`: the other nodes of an epilogue that reads `reads` twice (swish: Sigmoid(y) and Mul(y, Sigmoid(y))).
    `consumers`: when not empty, the node is the inner part of a pattern that fuses only whole: it fuses only when its
    own class is read by one of these nodes and by nothing else (no root either), and that reader fuses too (a hard
    swish's AddV2, Relu6 and first Mul; without its last Mul the rest runs as separate ops, cost/fusion.py).
    `surcharge`: for a node whose fused kernel is dearer than the separate op it is priced as (a MatMul's bias on a
    few rows: cost/analytic.py fusion_terms), what it costs more wherever the node chosen for `reads` is one of
    `producers`. It is charged then even when another reader keeps TF from fusing, which overprices that rare program
    but keeps the cost monotone: a program is never cheaper for computing more, so an extractor cannot make a fusion
    fail by choosing a node that nothing needs (extract/reduce.py's dominance relies on it)."""
    reads: int
    extra: float
    producers: frozenset[int]
    partners: frozenset[int] = frozenset()
    consumers: frozenset[int] = frozenset()
    surcharge: float = 0.0

    def charged(self, choice: dict) -> bool:
        """Whether the program `choice` (class -> node) pays this node's surcharge: one of `producers` computes
        `reads` (extract/dag.py surcharged, extract/greedy.py)."""
        return bool(self.surcharge) and choice.get(self.reads) in self.producers


@dataclasses.dataclass
class EGraphData:
    nodes: list[ENode]
    classes: list[list[int]]      # class id -> node ids, ascending
    roots: list[int]              # class ids that must be computed (graph outputs)
    blacklist: frozenset[int] = frozenset()   # node ids that may never be chosen (cycle filter)
    # node id -> Fused: the node is priced as part of a kernel it runs fused into, which depends on the program
    # extracted, not on the node (cost/fusion.py); extraction adds back what the fusion saved when it does not hold
    fused: Mapping[int, "Fused"] = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, nodes: Sequence[ENode], roots: Sequence[int], blacklist=()) -> "EGraphData":
        n_classes = 1 + max([n.eclass for n in nodes] + [c for n in nodes for c in n.children] + list(roots), default=-1)
        classes: list[list[int]] = [[] for _ in range(n_classes)]
        for i, n in enumerate(nodes):
            classes[n.eclass].append(i)
        return cls(list(nodes), classes, list(roots), frozenset(blacklist))

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def with_costs(self, costs: Sequence[float], fused: Optional[Mapping[int, Fused]] = None,
                   blacklist: Optional[frozenset[int]] = None) -> "EGraphData":
        """This e-graph with new node costs (and, when given, new fused terms and blacklist)."""
        nodes = [dataclasses.replace(n, cost=float(c)) for n, c in zip(self.nodes, costs, strict=True)]
        return EGraphData(nodes, self.classes, self.roots, self.blacklist if blacklist is None else blacklist,
                          self.fused if fused is None else dict(fused))
