"""Node names that keep TF's runtime fusion of an exact GELU (cost/fusion.py, "gelu"; rules F19, F24, F31).

TF's remapper fuses MatMul + BiasAdd + exact GELU into one _FusedMatMul only in the grouping
Mul(Mul(h, Erfc(Mul(Neg(y), c))), y) (any operand order). Grappler's arithmetic optimizer runs before it and
regroups a product of factors (MinimizeBroadcasts), and whether it regroups this one depends on node names: measured
on a Dense layer on a rank-2 input, converted, then run through TF's default Grappler as a served call runs it
(grappler.runtime_graph), it kept the grouping, and the GELU fused, exactly when the inner Mul's name sorted before
y's. Of 22 names tried for the inner Mul against y = 'tensat/BiasAdd_0', 'tensat/BiasAdd_', 'tensat/Ba' and
'.../Gelu/foo' fused, 'tensat/BiasAdd_00', 'tensat/Bj', 'tensat/C' and 'tensat/Mul_0' (the emitter's own name) did
not; renaming the product itself changed nothing, and with the inner name first either outer operand order fused (a
reviewer's check).

The emitter names every new node `tensat/<Op>_<k>`, and 'Mul' sorts after 'BiasAdd'; so the inner Mul of each such
GELU is renamed into y's scope with a '.' first, which sorts before a name there that starts with a letter, a digit
or '_' ('scope/.BiasAdd_0_gelu' < 'scope/BiasAdd_0'). Only the emitter's new nodes are renamed: the input's names,
which the signature's outputs and the user's tools may refer to, stay.
"""
from __future__ import annotations

from collections import Counter

NEW_PREFIX = "tensat/"


def _node(name: str) -> str:
    return name.split(":")[0].lstrip("^")


def keep_gelu_fusions(graph_def) -> int:
    """Rename, in place, the inner Mul of every exact GELU in the remapper's grouping (a new node of the emitter's)
    whose name does not sort before its input y's; -> how many were renamed."""
    by = {n.name: n for n in graph_def.node}
    consumers = Counter(_node(i) for n in graph_def.node for i in n.input)

    def op(name: str) -> str:
        n = by.get(_node(name))
        return n.op if n is not None else ""

    def scalar_const(name: str) -> bool:
        n = by.get(_node(name))
        return n is not None and n.op == "Const" and not n.attr["value"].tensor.tensor_shape.dim

    renames: dict[str, str] = {}
    for root in graph_def.node:
        if root.op != "Mul" or len(root.input) != 2:
            continue
        for inner_name, y in ((root.input[0], root.input[1]), (root.input[1], root.input[0])):
            inner, y = by.get(_node(inner_name)), _node(y)
            if (inner is None or inner.op != "Mul" or op(y) != "BiasAdd" or not inner.name.startswith(NEW_PREFIX)
                    or consumers[inner.name] != 1 or len(inner.input) != 2 or inner.name < y):
                continue
            erfc = [i for i in inner.input if op(i) == "Erfc"]
            if len(erfc) != 1 or not scalar_const([i for i in inner.input if i != erfc[0]][0]):
                continue
            scaled = by.get(_node(by[_node(erfc[0])].input[0]))
            negs = [by[_node(i)] for i in scaled.input if op(i) == "Neg"] if scaled is not None and scaled.op == "Mul" \
                else []
            if len(negs) != 1 or _node(negs[0].input[0]) != y:
                continue
            scope, _, base = y.rpartition("/")
            new = f"{scope}/.{base}_gelu" if scope else f".{base}_gelu"
            k = 0
            while new in by or new in renames.values():
                k += 1
                new = f"{scope}/.{base}_gelu_{k}" if scope else f".{base}_gelu_{k}"
            if new < y:                      # not where y's own name starts with '-' (TF allows it after a '/')
                renames[inner.name] = new
    if not renames:
        return 0
    for n in graph_def.node:
        n.name = renames.get(n.name, n.name)
        for k, i in enumerate(n.input):
            base = _node(i)
            if base in renames:
                n.input[k] = i.replace(base, renames[base], 1)
    return len(renames)
