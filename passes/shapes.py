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

import numpy as np
import tensorflow as tf

from tensat_tf import symbolic as S
from tensat_tf.item import GrapplerItem, node_name

name = "shapes"

# ops whose integer output is a shape value worth replacing by its shared materialization (never the data path)
PLUMBING = frozenset("""Shape StridedSlice Slice GatherV2 Pack ConcatV2 Prod Sum Mul FloorDiv Div AddV2 Sub Cast
ExpandDims Identity Size Squeeze Reshape""".split())


def _const_node(nm: str, values, dtype: tf.DType, scalar: bool = False):
    arr = np.array(values[0] if scalar else list(values), dtype=dtype.as_numpy_dtype)
    n = tf.compat.v1.NodeDef(name=nm, op="Const")
    n.attr["dtype"].type = dtype.as_datatype_enum
    n.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(arr, dtype=dtype))
    return n


def _unique(base: str, taken: set) -> str:
    nm, k = base, 0
    while nm in taken:
        k += 1
        nm = f"{base}_{k}"
    taken.add(nm)
    return nm


class _Builder:
    """New nodes, named deterministically, shared by value; the graph's own Shape(placeholder) nodes are reused."""

    def __init__(self, graph_def, analysis: S.Analysis, dtype_of: dict):
        self.a, self.dtype_of = analysis, dtype_of
        self.taken = {n.name for n in graph_def.node}
        self.new: list = []
        self.memo: dict = {}
        for n in graph_def.node:
            if n.op == "Shape" and len(n.input) == 1 and node_name(n.input[0]) in dtype_of and \
                    S.tensor_ref(n.input[0]).endswith(":0"):
                out_type = tf.dtypes.as_dtype(n.attr["out_type"].type) if "out_type" in n.attr else tf.int32
                self.memo.setdefault(("shape", node_name(n.input[0]), out_type), n.name)

    def const(self, values, dtype, scalar: bool = False) -> str:
        key = ("const", tuple(values), dtype, scalar)
        if key not in self.memo:
            nm = _unique(f"shapes_folded/const_{len(self.memo)}", self.taken)
            self.new.append(_const_node(nm, values, dtype, scalar))
            self.memo[key] = nm
        return self.memo[key]

    def shape_of(self, placeholder: str, dtype) -> str:
        key = ("shape", placeholder, dtype)
        if key not in self.memo:
            nm = _unique(f"{placeholder}/shapes_folded/shape_{dtype.name}", self.taken)
            n = tf.compat.v1.NodeDef(name=nm, op="Shape", input=[placeholder])
            n.attr["T"].type = self.dtype_of[placeholder].as_datatype_enum
            n.attr["out_type"].type = dtype.as_datatype_enum
            self.new.append(n)
            self.memo[key] = nm
        return self.memo[key]

    def slice(self, placeholder: str, lo: int, hi: int, dtype, shrink: bool = False) -> str:
        key = ("slice", placeholder, lo, hi, dtype, shrink)
        if key not in self.memo:
            src = self.shape_of(placeholder, dtype)
            nm = _unique(f"{placeholder}/shapes_folded/dim_{lo}" if shrink else
                         f"{placeholder}/shapes_folded/dims_{lo}_{hi}", self.taken)
            b, e, s = (self.const([v], tf.int32) for v in (lo, hi, 1))
            n = tf.compat.v1.NodeDef(name=nm, op="StridedSlice", input=[src, b, e, s])
            n.attr["T"].type = dtype.as_datatype_enum
            n.attr["Index"].type = tf.int32.as_datatype_enum
            for m in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
                n.attr[m].i = 0
            n.attr["shrink_axis_mask"].i = int(shrink)
            self.new.append(n)
            self.memo[key] = nm
        return self.memo[key]

    def concat(self, parts: list[str], dtype) -> str:
        key = ("concat", tuple(parts), dtype)
        if key not in self.memo:
            nm = _unique(f"shapes_folded/concat_{len(self.memo)}", self.taken)
            axis = self.const([0], tf.int32, scalar=True)
            n = tf.compat.v1.NodeDef(name=nm, op="ConcatV2", input=list(parts) + [axis])
            n.attr["N"].i = len(parts)
            n.attr["T"].type = dtype.as_datatype_enum
            n.attr["Tidx"].type = tf.int32.as_datatype_enum
            self.new.append(n)
            self.memo[key] = nm
        return self.memo[key]

    @staticmethod
    def _materializable(d) -> bool:
        return isinstance(d, int) or (isinstance(d, S.Sym) and d.is_base)

    def value(self, elems, dtype, scalar: bool):
        """A tensor computing a value whose elements are ints or base symbols (None otherwise): a Const when all are
        ints, else slices of Shape(input) and constants, concatenated."""
        if not all(self._materializable(d) for d in elems):
            return None
        if scalar:
            d = elems[0]
            if isinstance(d, int):
                return self.const([d], dtype, scalar=True)
            ph, i = self.a.base_origin[d.bases[0]]
            return self.slice(ph, i, i + 1, dtype, shrink=True)
        if all(isinstance(d, int) for d in elems):
            return self.const(elems, dtype)
        runs: list = []                      # ["c", [ints]] or ["s", placeholder, lo, hi]
        for d in elems:
            if isinstance(d, int):
                if runs and runs[-1][0] == "c":
                    runs[-1][1].append(d)
                else:
                    runs.append(["c", [d]])
                continue
            ph, i = self.a.base_origin[d.bases[0]]
            if runs and runs[-1][0] == "s" and runs[-1][1] == ph and runs[-1][3] == i:
                runs[-1][3] = i + 1
            else:
                runs.append(["s", ph, i, i + 1])
        parts = []
        for r in runs:
            if r[0] == "c":
                parts.append(self.const(r[1], dtype))
            elif r[2] == 0 and r[3] == len(self.a.shapes[f"{r[1]}:0"]):
                parts.append(self.shape_of(r[1], dtype))
            else:
                parts.append(self.slice(r[1], r[2], r[3], dtype))
        return parts[0] if len(parts) == 1 else self.concat(parts, dtype)

    def target(self, dims, dtype):
        """A Reshape target for output dims `dims` (each concrete, a Sym or None), or None: at most one dim that is
        not materializable becomes -1."""
        loose = [i for i, d in enumerate(dims) if not self._materializable(d)]
        if len(loose) > 1:
            return None
        if not loose and sum(not isinstance(d, int) for d in dims) == 1:
            loose = [i for i, d in enumerate(dims) if not isinstance(d, int)]   # one symbol: -1, no Shape needed
        if loose and any(isinstance(d, int) and d == 0 for d in dims):
            return None                      # TF cannot infer -1 for an empty tensor: leave the original target
        return self.value([-1 if i in loose else d for i, d in enumerate(dims)], dtype, scalar=False)


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
    b = _Builder(out, a, {n: dtypes[n][0] for n, nd in nodes.items() if nd.op == "Placeholder"})
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
            folded = _const_node(n.name, v, dtypes[n.name][0], scalar=a.scalar[t])
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
