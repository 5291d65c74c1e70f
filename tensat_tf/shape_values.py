"""Shape values computed at run time from the graph inputs' Shape: a tensor whose elements are sizes and input
symbols (tensat_tf/symbolic.py: an unknown dim of a graph input), built from `Shape(input placeholder)` sliced and
concatenated with constants, every piece shared by value. Used by the shape-plumbing pass (passes/shapes.py), which
replaces Keras' per-layer Shape/StridedSlice/Pack plumbing with these, and by the emitter (tensat_tf/egraph/emit.py),
which builds the run-time target of a rule's reshape to a shape that holds symbols (ReshapeS, tensat_tf/ops.py).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tensat_tf import symbolic as S
from tensat_tf.item import node_name


def const_node(nm: str, values, dtype: tf.DType, scalar: bool = False):
    arr = np.array(values[0] if scalar else list(values), dtype=dtype.as_numpy_dtype)
    n = tf.compat.v1.NodeDef(name=nm, op="Const")
    n.attr["dtype"].type = dtype.as_datatype_enum
    n.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(arr, dtype=dtype))
    return n


def unique(base: str, taken: set) -> str:
    nm, k = base, 0
    while nm in taken:
        k += 1
        nm = f"{base}_{k}"
    taken.add(nm)
    return nm


class Builder:
    """New nodes, named deterministically (apart from every name of `graph_def`), shared by value; the graph's own
    Shape(placeholder) nodes are reused unless `reuse` is False (the emitter, which writes a new graph where those
    nodes may not be)."""

    def __init__(self, graph_def, analysis: S.Analysis, dtype_of: dict, reuse: bool = True):
        self.a, self.dtype_of = analysis, dtype_of
        self.taken = {n.name for n in graph_def.node}
        self.new: list = []
        self.memo: dict = {}
        for n in graph_def.node if reuse else ():
            if n.op == "Shape" and len(n.input) == 1 and node_name(n.input[0]) in dtype_of and \
                    S.tensor_ref(n.input[0]).endswith(":0"):
                out_type = tf.dtypes.as_dtype(n.attr["out_type"].type) if "out_type" in n.attr else tf.int32
                self.memo.setdefault(("shape", node_name(n.input[0]), out_type), n.name)

    def const(self, values, dtype, scalar: bool = False) -> str:
        key = ("const", tuple(values), dtype, scalar)
        if key not in self.memo:
            nm = unique(f"shapes_folded/const_{len(self.memo)}", self.taken)
            self.new.append(const_node(nm, values, dtype, scalar))
            self.memo[key] = nm
        return self.memo[key]

    def shape_of(self, placeholder: str, dtype) -> str:
        key = ("shape", placeholder, dtype)
        if key not in self.memo:
            nm = unique(f"{placeholder}/shapes_folded/shape_{dtype.name}", self.taken)
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
            nm = unique(f"{placeholder}/shapes_folded/dim_{lo}" if shrink else
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
            nm = unique(f"shapes_folded/concat_{len(self.memo)}", self.taken)
            axis = self.const([0], tf.int32, scalar=True)
            n = tf.compat.v1.NodeDef(name=nm, op="ConcatV2", input=list(parts) + [axis])
            n.attr["N"].i = len(parts)
            n.attr["T"].type = dtype.as_datatype_enum
            n.attr["Tidx"].type = tf.int32.as_datatype_enum
            self.new.append(n)
            self.memo[key] = nm
        return self.memo[key]

    def mul(self, x: str, c: int, dtype, scalar: bool) -> str:
        key = ("mul", x, c, dtype, scalar)
        if key not in self.memo:
            nm = unique(f"shapes_folded/mul_{len(self.memo)}", self.taken)
            n = tf.compat.v1.NodeDef(name=nm, op="Mul", input=[x, self.const([c], dtype, scalar=scalar)])
            n.attr["T"].type = dtype.as_datatype_enum
            self.new.append(n)
            self.memo[key] = nm
        return self.memo[key]

    @staticmethod
    def _materializable(d, scaled: bool = False) -> bool:
        """An int or a base symbol; with `scaled`, also a multiple of one (a Mul of its dim)."""
        return isinstance(d, int) or (isinstance(d, S.Sym) and (d.is_base or (scaled and len(d.bases) == 1)))

    def value(self, elems, dtype, scalar: bool, scaled: bool = False):
        """A tensor computing a value whose elements are ints or base symbols (with `scaled`, multiples of one too;
        None otherwise): a Const when all are ints, else slices of Shape(input) (times a constant for a multiple)
        and constants, concatenated."""
        if not all(self._materializable(d, scaled) for d in elems):
            return None
        if scalar:
            d = elems[0]
            if isinstance(d, int):
                return self.const([d], dtype, scalar=True)
            ph, i = self.a.base_origin[d.bases[0]]
            dim = self.slice(ph, i, i + 1, dtype, shrink=True)
            return dim if d.coef == 1 else self.mul(dim, d.coef, dtype, scalar=True)
        if all(isinstance(d, int) for d in elems):
            return self.const(elems, dtype)
        runs: list = []          # ["c", [ints]], ["s", placeholder, lo, hi] or ["m", placeholder, i, coef]
        for d in elems:
            if isinstance(d, int):
                if runs and runs[-1][0] == "c":
                    runs[-1][1].append(d)
                else:
                    runs.append(["c", [d]])
                continue
            ph, i = self.a.base_origin[d.bases[0]]
            if d.coef != 1:
                runs.append(["m", ph, i, d.coef])
            elif runs and runs[-1][0] == "s" and runs[-1][1] == ph and runs[-1][3] == i:
                runs[-1][3] = i + 1
            else:
                runs.append(["s", ph, i, i + 1])
        parts = []
        for r in runs:
            if r[0] == "c":
                parts.append(self.const(r[1], dtype))
            elif r[0] == "m":
                parts.append(self.mul(self.slice(r[1], r[2], r[2] + 1, dtype), r[3], dtype, scalar=False))
            elif r[2] == 0 and r[3] == len(self.a.shapes[f"{r[1]}:0"]):
                parts.append(self.shape_of(r[1], dtype))
            else:
                parts.append(self.slice(r[1], r[2], r[3], dtype))
        return parts[0] if len(parts) == 1 else self.concat(parts, dtype)

    def target(self, dims, dtype, scaled: bool = False):
        """A Reshape target for output dims `dims` (each concrete, a Sym or None), or None: at most one dim that is
        not materializable becomes -1; with `scaled` (the emitter's ReshapeS, whose dims the e-graph proved), where
        more than one is and all but the first are multiples of one symbol, those are computed."""
        loose = [i for i, d in enumerate(dims) if not self._materializable(d)]
        if len(loose) > 1:
            if not scaled or not all(self._materializable(dims[i], scaled=True) for i in loose[1:]):
                return None
            loose = loose[:1]                # the others are computed by value(scaled=True)
        elif not loose and sum(not isinstance(d, int) for d in dims) == 1:
            loose = [i for i, d in enumerate(dims) if not isinstance(d, int)]   # one symbol: -1, no Shape needed
        if loose and any(isinstance(d, int) and d == 0 for d in dims):
            return None                      # TF cannot infer -1 for an empty tensor: leave the original target
        return self.value([-1 if i in loose else d for i, d in enumerate(dims)], dtype, scalar=False, scaled=scaled)
