"""Node names that keep a fusion of TF's runtime: the emitter's new nodes renamed to sort before another node's.

Grappler's arithmetic optimizer runs before the remapper and regroups a product of factors (MinimizeBroadcasts);
whether it regroups an exact GELU's Mul(Mul(h, Erfc(Mul(Neg(y), c))), y), the one grouping the remapper fuses
(cost/fusion.py, "gelu"), depends on node names. Measured on a Dense layer on a rank-2 input, converted, then run
through TF's default Grappler as a served call runs it (grappler.runtime_graph): it kept the grouping, and the GELU
fused, exactly when the inner Mul's name sorted before y's. Of 22 names tried for the inner Mul against
y = 'tensat/BiasAdd_0', 'tensat/BiasAdd_', 'tensat/Ba' and '.../Gelu/foo' fused, 'tensat/BiasAdd_00', 'tensat/Bj',
'tensat/C' and 'tensat/Mul_0' (the emitter's own name) did not; renaming the product itself changed nothing, and with
the inner name first either outer operand order fused (a reviewer's check).

The fusion patterns say which nodes need such an order (cost/fusion.py Site.precedes) and the emitter passes those
that run fused in the extracted program (egraph/emit.py Emitter.precedences). The emitter names
every new node `tensat/<Op>_<k>`, and 'Mul' sorts after 'BiasAdd'; so such a node is renamed into the other node's
scope with a '.' first, which sorts before a name there that starts with a letter, a digit or '_'
('scope/.BiasAdd_0_gelu' < 'scope/BiasAdd_0'). Only the emitter's new nodes are renamed: the input's names, which
the signature's outputs and the user's tools may refer to, stay.
"""
from __future__ import annotations

from typing import Iterable

from tensat_tf.item import node_name

NEW_PREFIX = "tensat/"


def precede(graph_def, orders: Iterable[tuple[str, str, str]]) -> int:
    """Rename, in place, each new node `a` of (a, b, tag) in `orders` whose name does not sort before b's to
    `<b's scope>/.<b's base>_<tag>` (with `_1`, `_2`, ... after it where that name is taken); -> how many were
    renamed."""
    names = {n.name for n in graph_def.node}
    renames: dict[str, str] = {}
    for a, b, tag in orders:
        if a not in names or b not in names or not a.startswith(NEW_PREFIX) or a < b or a in renames:
            continue
        scope, _, base = b.rpartition("/")
        stem = f"{scope}/.{base}_{tag}" if scope else f".{base}_{tag}"
        new, k = stem, 0
        while new in names or new in renames.values():
            k += 1
            new = f"{stem}_{k}"
        if new < b:                          # not where b's own name starts with '-' (TF allows it after a '/')
            renames[a] = new
    if not renames:
        return 0
    for n in graph_def.node:
        n.name = renames.get(n.name, n.name)
        for k, i in enumerate(n.input):
            base = node_name(i)
            if base in renames:
                n.input[k] = i.replace(base, renames[base], 1)
    return len(renames)
