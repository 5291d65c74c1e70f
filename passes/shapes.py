"""Shape plumbing folds: shape-valued subgraphs that the symbolic shapes determine are replaced (a Grappler-style pass,
run before the e-graph pass).

Keras exports with a dynamic batch or sequence compute every Reshape target at run time: `Shape -> GatherV2 -> Prod ->
Pack` for a Dense layer's flatten, `Shape -> StridedSlice -> Pack` for a split into heads, 30-60 nodes in a 250-node
transformer, each paying TF's per-node overhead (at batch 1 most of a small transformer's time). With symbolic shapes
(tensat_tf/symbolic.py) their values are known up to the input's unknown dims, and:

  1. an integer tensor whose value is fully concrete becomes a Const (Grappler's constfold misses the ones that go
     through a Shape of an unknown-shaped tensor, e.g. `Prod(GatherV2(Shape(x), [2]))` = 16);
  2. a Reshape whose output shape has at most one dim that is not a size (a symbol, a product of symbols, or
     unknown) gets a constant target with -1 there. Sound: the original Reshape, when it succeeds, produces exactly that shape, and
     -1 infers the one remaining size from the element count (never done when another target size is 0, where TF
     cannot infer -1);
  3. a Reshape whose output needs two or more symbols (batch and sequence: [s1, s2, 4, 8]) gets a target built from
     `Shape(input placeholder)` sliced and concatenated with constants: one Shape per graph input, one slice per run of
     dims, one ConcatV2 per distinct target, shared by every Reshape of the graph (all Dense layers of one width share
     their target); at most one element that is not a base symbol becomes -1; any other integer shape value (a
     Fill's dims, a Range's limit, a BroadcastTo's target, a StridedSlice of a Shape) whose elements are sizes and
     input symbols is computed the same way, so one Shape(input) feeds them all;
  4. a Reshape of a Reshape reads the inner one's input (row-major order is kept), and a Reshape to the shape its
     input already has is removed (its consumers read the input);
and the plumbing left without consumers is deleted (only nodes this pass made dead: anything else is untouched).

This lives in a pass rather than in the e-graph because the values flow through ops the term language keeps opaque
(Shape, StridedSlice, GatherV2, Pack, Prod), which would otherwise need a value analysis over opaque nodes in egglog;
here it is one topological walk, and the e-graph then sees Reshapes with constant targets (typed terms its rules
understand: F13/F14 in rules/tf_fold.rules).
"""
from __future__ import annotations

import tensorflow as tf

from tensat_tf import symbolic as S
from tensat_tf.item import GrapplerItem, node_name
from tensat_tf.shape_values import Builder, const_node

name = "shapes"

# ops whose integer output is a shape value worth replacing by its shared materialization (never the data path)
PLUMBING = frozenset("""Shape StridedSlice Slice GatherV2 Pack ConcatV2 Prod Sum Mul FloorDiv Div AddV2 Sub Cast
ExpandDims Identity Size Squeeze Reshape""".split())


def _same_shape(x, y) -> bool:
    return x is not None and y is not None and len(x) == len(y) and all(S.same(p, q) for p, q in zip(x, y))


def _reachable(nodes: dict, roots) -> set:
    seen, todo = set(), [r for r in roots if r in nodes]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(node_name(i) for i in nodes[n].input if node_name(i) in nodes)
    return seen


def optimize(graph_def, item: GrapplerItem, stats: dict | None = None):
    """stats (optional dict) receives what was done: folded_consts, values_shared, reshape_chains, reshapes_const,
    reshapes_built, reshapes_removed, nodes_removed."""
    by_name = {n.name: n for n in graph_def.node}
    if any(by_name.get(node_name(f)) is None or by_name[node_name(f)].op != "Placeholder" for f in item.feeds):
        return graph_def                        # a fed tensor that is computed in the graph: its shape is the feed's
    dtypes, tf_shapes = S.tf_inferred(graph_def)
    a = S.infer(graph_def, tf_shapes)
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    nodes = {n.name: n for n in out.node}
    original = {n.name: n for n in graph_def.node}      # chains are read before this pass rewires them
    keep = item.keep_nodes
    before = _reachable(nodes, keep)
    b = Builder(out, a, {n: dtypes[n][0] for n, nd in nodes.items() if nd.op == "Placeholder"})
    st = dict(folded_consts=0, values_shared=0, reshape_chains=0, reshapes_const=0, reshapes_built=0,
              reshapes_removed=0, nodes_removed=0)
    ctrl_sources = {node_name(i) for n in out.node for i in n.input if i.startswith("^")}
    rename: dict[str, str] = {}                 # tensor "a:0" -> replacement tensor

    for n in out.node:
        if n.name in keep or n.name not in before or any(i.startswith("^") for i in n.input):
            continue                            # (a node with control inputs keeps them: left as it is)
        # 1. a concrete integer value computed at run time
        t = f"{n.name}:0"
        v = a.values.get(t)
        if (n.op not in ("Const", "Placeholder") and len(dtypes[n.name]) == 1 and v is not None
                and all(isinstance(x, int) for x in v) and dtypes[n.name][0] in (tf.int32, tf.int64)):
            folded = const_node(n.name, v, dtypes[n.name][0], scalar=a.scalar[t])
            n.Clear()
            n.CopyFrom(folded)
            st["folded_consts"] += 1
            continue
        # 3. any other shape value that the inputs' symbols determine: computed once, from Shape(input)
        if (n.op in PLUMBING and v is not None and len(dtypes[n.name]) == 1
                and dtypes[n.name][0] in (tf.int32, tf.int64) and n.name not in ctrl_sources):
            m = b.value(v, dtypes[n.name][0], a.scalar[t])
            if m is not None and m != n.name:
                rename[t] = m
                st["values_shared"] += 1
                continue
        if n.op != "Reshape":
            continue
        data_pos = [k for k, x in enumerate(n.input) if not x.startswith("^")]
        dims = a.shapes.get(t)
        if dims is None:
            continue
        # the chain of reshapes feeding this one: a reshape of a reshape is one reshape (row-major order is kept)
        chain = [n.input[data_pos[0]]]
        while True:
            inner = original.get(node_name(chain[-1]))
            if (inner is None or inner.op != "Reshape" or inner.name in keep
                    or S.tensor_ref(chain[-1]) in rename):
                break
            chain.append(inner.input[0])
        # 4. a reshape to a shape that its input (or an input up the chain) already has does nothing
        same = [c for c in chain if _same_shape(a.shapes.get(S.tensor_ref(c)), dims)]
        if same and n.name not in ctrl_sources:
            rename[t] = same[-1]
            st["reshapes_removed"] += 1
            continue
        if len(chain) > 1:
            n.input[data_pos[0]] = chain[-1]
            st["reshape_chains"] += 1
        data = [n.input[k] for k in data_pos]
        tgt = nodes.get(node_name(data[1]))
        if tgt is None or tgt.op == "Const":
            continue
        tshape = tf.dtypes.as_dtype(n.attr["Tshape"].type) if "Tshape" in n.attr else tf.int32
        new = b.target(dims, tshape)
        if new is None:
            continue
        n.input[data_pos[1]] = new
        st["reshapes_const" if sum(not isinstance(d, int) for d in dims) <= 1 else "reshapes_built"] += 1

    if rename:
        def resolve(ref: str) -> str:
            seen = 0
            while S.tensor_ref(ref) in rename and seen < 1000:
                ref, seen = rename[S.tensor_ref(ref)], seen + 1
            return ref
        for n in out.node:
            for k, i in enumerate(n.input):
                if not i.startswith("^") and S.tensor_ref(i) in rename:
                    n.input[k] = resolve(i)
    out.node.extend(b.new)
    nodes = {n.name: n for n in out.node}
    after = _reachable(nodes, keep)
    dead = {n for n in before if n not in after}
    fresh_dead = {nd.name for nd in b.new if nd.name not in after}
    if dead or fresh_dead:
        kept = [nd for nd in out.node if nd.name not in dead and nd.name not in fresh_dead]
        del out.node[:]
        out.node.extend(kept)
    st["nodes_removed"] = len(dead)
    if stats is not None:
        stats.update(st)
    return out
