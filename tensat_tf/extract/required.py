"""The classes every acyclic choice computes: the roots, and whatever every way of computing them needs.

    Req(c) = {c} + the intersection, over the nodes n of c, of the union of Req(k) over n's child classes k

Any fixpoint of these equations is sound: in an acyclic choice, by induction on the depth of a class's derivation,
its chosen node's children are derived first, so Req(k) of each of them is computed, and Req(c) lies within c's
derivation. The greatest fixpoint (start from "everything", iterate down) is the strongest, and is what this computes.

Why the ILP wants them (ilp.py): "sum of the nodes of c >= 1" for each required class is valid for every acyclic
choice, while the LP relaxation otherwise lets a required class be computed a fraction of a time, the rest of it fed
through a cycle of free nodes (Split(Concat(a, b)) = a). On TENSAT's bert.json that row alone lifts the LP bound
from 0.372 to 0.586 (the optimum is 0.7047; BENCHMARKS.md).

Sets are Python ints used as bitsets (bit k = the k-th class in ascending order): unions and intersections of
thousands of classes are then single machine-level operations. The classes are visited in a depth-first postorder
(each after the classes its nodes read, where no cycle forbids it), so one sweep settles every class on no cycle and
only cycles need more: 2 sweeps on Inception-ResNet-v2's e-graph (0.01 s; in ascending id order it took 0.4-0.7 s, a
tenth of that model's tensat pass), 4 on TENSAT's bert.json.
"""
from __future__ import annotations

from typing import Mapping, Sequence


def required_classes(classes: Mapping[int, Sequence[int]], kids: Mapping[int, Sequence[int]],
                     roots: Sequence[int]) -> list[int]:
    """The classes (ascending) that every acyclic choice computing `roots` computes. `classes`: class -> its
    nodes; `kids`: node -> its child classes, each of which must be a key of `classes` (a Reduced e-graph's)."""
    order = sorted(classes)
    bit = {c: 1 << k for k, c in enumerate(order)}
    everything = (1 << len(order)) - 1
    req = {c: everything for c in order}
    sweep = _postorder(classes, kids)
    changed = True
    while changed:
        changed = False
        for c in sweep:
            common = everything
            for i in classes[c]:
                union = 0
                for k in kids[i]:
                    union |= req[k]
                common &= union
                if not common:
                    break
            new = common | bit[c]
            if new != req[c]:
                req[c] = new
                changed = True
    need = 0
    for r in roots:
        need |= req[r]
    return [c for c in order if need & bit[c]]


def _postorder(classes: Mapping[int, Sequence[int]], kids: Mapping[int, Sequence[int]]) -> list[int]:
    """Every class once, after the classes its nodes read unless a cycle passes through both (iterative DFS from the
    classes in ascending order, children in node order: deterministic)."""
    def reads(c: int):
        return iter([k for i in classes[c] for k in kids[i]])

    seen: set[int] = set()
    out: list[int] = []
    for root in sorted(classes):
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, reads(root))]
        while stack:
            c, pending = stack[-1]
            for k in pending:
                if k not in seen:
                    seen.add(k)
                    stack.append((k, reads(k)))
                    break
            else:
                stack.pop()
                out.append(c)
    return out
