"""Shape-plumbing nodes of a GraphDef: what tools/bench_rules.py counts, in a module of its own (no absl flags), so
that tests can import it next to the CLI's flags."""
from __future__ import annotations

# Ops that compute on shape vectors once their data comes from a Shape-like op (all non-constant inputs do).
_SHAPE_SOURCES = {"Shape", "ShapeN", "Size", "Rank"}
_SHAPE_OPS = {"StridedSlice", "Pack", "Unpack", "Prod", "GatherV2", "ConcatV2", "Cast", "Mul", "AddV2", "Add", "Sub",
              "FloorDiv", "RealDiv", "Maximum", "Minimum", "ExpandDims", "Squeeze", "Identity", "Slice", "Reshape",
              "Fill"}
# Ops whose second input is a target shape: they count as plumbing when that shape is computed, not constant.
_SHAPED_BY_INPUT_1 = {"Reshape", "BroadcastTo", "Fill", "Tile"}


def plumbing(graph_def) -> int:
    """Shape-plumbing nodes: Shape/ShapeN/Size/Rank, the arithmetic on their results (StridedSlice, Pack, Prod,
    GatherV2, ConcatV2, ... whose every non-constant input is such a shape vector), and Reshape/BroadcastTo/Fill/Tile
    whose target shape is computed by them."""
    nodes = {n.name: n for n in graph_def.node}

    def src(inp):
        return inp.lstrip("^").split(":")[0]

    shape_valued = set()
    changed = True
    while changed:  # fixpoint: graph_def node order is not topological in general
        changed = False
        for n in graph_def.node:
            if n.name in shape_valued:
                continue
            data = [src(i) for i in n.input if not i.startswith("^")]
            if n.op in _SHAPE_SOURCES:
                hit = True
            elif n.op in _SHAPE_OPS:
                live = [d for d in data if d in nodes and nodes[d].op != "Const"]
                hit = bool(live) and all(d in shape_valued for d in live)
            else:
                hit = False
            if hit:
                shape_valued.add(n.name)
                changed = True
    computed_target = {n.name for n in graph_def.node if n.op in _SHAPED_BY_INPUT_1 and n.name not in shape_valued
                       and len(n.input) > 1 and src(n.input[1]) in shape_valued}
    return len(shape_valued) + len(computed_target)
