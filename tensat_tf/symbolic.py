"""Symbolic shapes and shape-vector values over a GraphDef.

Every unknown dimension of a graph input (Placeholder) is a named symbol; the rules below propagate symbols through
the ops that transformers and CNNs use, so two dims are equal exactly when the analysis proves it. Products of
symbols (a Reshape that flattens batch and sequence, `Prod` of a shape slice) are kept as monomials, so a later
division (the -1 of a Reshape, a floor-div of a shape scalar) cancels exactly. Integer tensors of rank 0 or 1 (shape
vectors and their pieces) also get a *value*: a list whose elements are a concrete int, a symbol, or unknown.

A dimension is an `int` >= 0, a `Sym`, or None (unknown: nothing is known about it). A value element is an `int`
(any sign: -1 in a Reshape target is a literal), a `Sym`, or None. Anything this module is unsure of is None, and
`infer` combines the result with TF's own shape inference: TF's concrete dims always win (a disagreement means this
module is wrong, and the whole tensor falls back to TF's shape), TF's unknown dims take the symbol found here.

The egglog encoding of dims (tensat_tf.ops) is an i64: concrete >= 0, -1 unknown, <= -2 a multiple of one symbol;
`encode` maps a `Sym` to its integer (base symbols are numbered in the graph's topological order, deterministic for
one graph), `decode` back.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from tensat_tf import ops


@dataclasses.dataclass(frozen=True, order=True)
class Sym:
    """coef * product(base symbols): a base symbol is Sym(1, (k,)); `bases` is sorted (a multiset)."""
    coef: int
    bases: tuple[int, ...]

    @property
    def is_base(self) -> bool:
        return self.coef == 1 and len(self.bases) == 1

    def __repr__(self) -> str:
        s = "*".join(f"s{b}" for b in self.bases)
        return s if self.coef == 1 else f"{self.coef}*{s}"


Dim = Union[int, Sym, None]
Shape = Optional[tuple]          # tuple of Dim, or None (unknown rank)


def mul(a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(a, int) or isinstance(b, int):
        c, s = (a, b) if isinstance(a, int) else (b, a)
        if c < 0:
            return None
        return 0 if c == 0 else Sym(s.coef * c, s.bases)
    return Sym(a.coef * b.coef, tuple(sorted(a.bases + b.bases)))


def div(a: Dim, b: Dim) -> Dim:
    """Exact division (a / b when b divides a as monomials), else None."""
    if a is None or b is None:
        return None
    if isinstance(b, int):
        if b <= 0:
            return None
        if isinstance(a, int):
            return a // b if a >= 0 and a % b == 0 else None
        return Sym(a.coef // b, a.bases) if a.coef % b == 0 else None
    if isinstance(a, int):
        return None
    rest = list(a.bases)
    for x in b.bases:
        if x not in rest:
            return None
        rest.remove(x)
    if a.coef % b.coef:
        return None
    c = a.coef // b.coef
    return Sym(c, tuple(rest)) if rest else c


def prod(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def same(a: Dim, b: Dim) -> bool:
    """Proven equal: both concrete and equal, or the same symbol."""
    return a is not None and a == b


def broadcast(a: Dim, b: Dim) -> Dim:
    """One dim of a numpy-style broadcast of two operands (conservative: None when undecided)."""
    if same(a, b):
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    return None


# The most elements a constant whose values the rules below read can have (Pad's paddings, shape vectors); a larger
# one is only a shape to this module and to TF's shape functions.
_SHAPE_LIKE = 64


def _const_array(node) -> Optional[np.ndarray]:
    """The Const's value, or a zero-strided stand-in of its shape and dtype when it is too large to be shape-like:
    decoding every weight was 0.4 s of BERT-TASO's ingest."""
    t = node.attr["value"].tensor
    try:
        dtype = tf.as_dtype(t.dtype).as_numpy_dtype
        shape = tuple(d.size for d in t.tensor_shape.dim)
        if shape and math.prod(shape) > _SHAPE_LIKE and np.dtype(dtype).kind in "fiu":
            return np.broadcast_to(np.zeros((), dtype), shape)
        return tf.make_ndarray(t)
    except Exception:  # noqa: BLE001 - an unusual Const (string, resource) has no value we need
        return None


def _placeholder_shape(node, fresh) -> Shape:
    if "shape" not in node.attr or node.attr["shape"].shape.unknown_rank:
        return None
    return tuple(d.size if d.size >= 0 else fresh(i) for i, d in enumerate(node.attr["shape"].shape.dim))


_UNARY = frozenset("""Identity StopGradient Relu Relu6 Elu Selu Sigmoid Tanh Rsqrt Sqrt Neg Erf Erfc Exp Log Log1p
Softmax LogSoftmax Square Abs Floor Ceil Round Sign Reciprocal Softplus Softsign LeakyRelu Gelu Sin Cos IsNan
LogicalNot Snapshot PreventGradient EnsureShape CheckNumerics ZerosLike OnesLike Cumsum Cumprod
MatrixBandPart""".split())
_BINARY = frozenset("""AddV2 Add Sub Mul RealDiv Div DivNoNan Maximum Minimum SquaredDifference Pow FloorDiv FloorMod
Greater GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr BiasAdd MulNoNan TruncateDiv""".split())
_REDUCE = frozenset("Sum Mean Max Min Prod All Any".split())


class Analysis:
    """Shapes (tensor name 'node:k' -> Shape) and values (tensor name -> list of elements, with `scalar` flags)."""

    def __init__(self):
        self.shapes: dict[str, Shape] = {}
        self.values: dict[str, list] = {}
        self.scalar: dict[str, bool] = {}
        self.base_origin: dict[int, tuple[str, int]] = {}   # base symbol -> (placeholder name, dim index)
        self.egraph = False
        self.consts: set[str] = set()                       # tensors of Const nodes

    def encoded(self, tensor: str) -> Optional[tuple[int, ...]]:
        s = self.shapes.get(tensor)
        return None if s is None else tuple(encode(d) for d in s)


def encode(d: Dim) -> int:
    """A dim as the e-graph's i64: a multiple of one base symbol is its code (ops.symbol_code; base symbol k is input
    dim k - 1); a product of two or more is -1 in the e-graph: its shape rules cannot multiply symbols (`_dim`
    derives -1 for any arithmetic on one), and a fact they would contradict is a `shape` conflict."""
    if d is None:
        return -1
    if isinstance(d, int):
        return d
    if len(d.bases) != 1:
        return -1
    return ops.symbol_code(d.bases[0] - 1, d.coef)


def decode(code: int) -> Sym:
    """The Sym that `encode` gave `code` (<= -2)."""
    base, coef = ops.symbol_parts(code)
    return Sym(coef, (base + 1,))


def tensor_ref(inp: str) -> str:
    """'a' / 'a:1' -> 'a:0' / 'a:1'."""
    name, _, idx = inp.partition(":")
    return f"{name}:{idx or 0}"


def infer(graph_def, tf_shapes: Optional[dict] = None, egraph: bool = False) -> Analysis:
    """Symbolic shapes and values of every tensor of `graph_def` (nodes in any order; cycles are TF errors).

    tf_shapes: TF's inferred shapes (tensor name -> tuple with -1 for unknown, or None); computed when omitted.
    egraph: derive for the e-graph's ops only what their egglog shape rules derive too (tensat_tf/ops.py), so an
    ingested fact never contradicts the shape a rewrite derives for an equal term (the `shape` function refuses two
    values); without it (the shape pass), every symbol that can be named is."""
    if tf_shapes is None:
        tf_shapes = tf_inferred(graph_def)[1]
    a = Analysis()
    a.egraph = egraph
    nodes = {n.name: n for n in graph_def.node}
    order = _topological(graph_def)
    counter = [0]

    def fresh(name: str, i: int):
        counter[0] += 1
        k = counter[0]
        a.base_origin[k] = (name, i)
        return Sym(1, (k,))

    for name in order:
        node = nodes[name]
        data = [tensor_ref(i) for i in node.input if not i.startswith("^")]
        try:
            outs, vals = _rule(node, data, a, lambda i, name=name: fresh(name, i))
        except Exception:  # noqa: BLE001 - an unexpected attribute layout: know nothing about this node
            outs, vals = {}, {}
        k = 0
        while f"{name}:{k}" in tf_shapes:
            t = f"{name}:{k}"
            a.shapes[t] = _combine(tf_shapes[t], outs.get(k))
            if k in vals and vals[k] is not None:
                v, is_scalar = vals[k]
                s = a.shapes[t]
                if s is not None and (len(s) == 0) == is_scalar and (is_scalar or prod(s) == len(v)
                                                                     or (len(s) == 1 and s[0] is None)):
                    a.values[t], a.scalar[t] = list(v), is_scalar
            k += 1
    return a


def tf_inferred(graph_def) -> tuple[dict, dict]:
    """Output dtypes and shapes of every node from TF's own shape inference (-1 for an unknown dim)."""
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(_without_weights(graph_def), name="")
    dtypes, shapes = {}, {}
    for op in g.get_operations():
        dtypes[op.name] = [t.dtype for t in op.outputs]
        for k, t in enumerate(op.outputs):
            s = t.shape
            shapes[f"{op.name}:{k}"] = None if s.rank is None else tuple(
                -1 if d is None else int(d) for d in s.as_list())
    return dtypes, shapes


def _without_weights(graph_def):
    """graph_def with its floating-point constants of more than _SHAPE_LIKE elements as Placeholders of the same dtype
    and shape: TF's shape functions read the values of shape-like (integer, small) inputs only, and serialising and
    importing the weights was most of the time here (2.1 s of BERT-TASO's 3.3 s ingest)."""
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        t = n.attr["value"].tensor if n.op == "Const" and "value" in n.attr else None
        if t is not None and tf.as_dtype(t.dtype).is_floating and (
                math.prod(d.size for d in t.tensor_shape.dim) > _SHAPE_LIKE):
            ph = out.node.add(name=n.name, op="Placeholder", device=n.device)
            ph.attr["dtype"].type = t.dtype
            ph.attr["shape"].shape.CopyFrom(t.tensor_shape)
        else:
            out.node.add().CopyFrom(n)
    return out


def _combine(tf_shape, mine: Shape) -> Shape:
    if tf_shape is None:
        return None
    if mine is None or len(mine) != len(tf_shape):
        return tuple(None if d < 0 else d for d in tf_shape)
    out = []
    for t, m in zip(tf_shape, mine):
        if t >= 0:
            if isinstance(m, int) and m != t:          # this module disagrees with TF: trust TF for the tensor
                return tuple(None if d < 0 else d for d in tf_shape)
            out.append(t)
        else:   # a symbol, or a size TF could not see (a Reshape target computed from shapes)
            out.append(m)
    return tuple(out)


def _topological(graph_def) -> list[str]:
    import networkx as nx
    order_of = {n.name: i for i, n in enumerate(graph_def.node)}
    dg = nx.DiGraph()
    dg.add_nodes_from(order_of)
    dg.add_edges_from((i.lstrip("^").split(":")[0], n.name) for n in graph_def.node for i in n.input)
    return list(nx.lexicographical_topological_sort(dg, key=order_of.__getitem__))


# ------------------------------------------------------------------ per-op rules
def expand_dims(shape: tuple, axis: int) -> tuple:
    """`shape` with a 1 inserted at `axis` (TF's ExpandDims: a negative axis counts from the end of the result).
    Dims of any kind (cost/sizes.py passes its pricing sizes through it too)."""
    i = axis + len(shape) + 1 if axis < 0 else axis
    return tuple(shape[:i]) + (1,) + tuple(shape[i:])


def squeeze(shape: tuple, axes) -> tuple:
    """`shape` without the dims at `axes` (TF's Squeeze: negative axes count from the end)."""
    drop = {d + len(shape) if d < 0 else d for d in axes}
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def _int_attr(node, name, default=0):
    return int(node.attr[name].i) if name in node.attr else default


def _const_ints(a: Analysis, t: str) -> Optional[list]:
    """A fully concrete integer value (axis, perm, begin...)."""
    v = a.values.get(t)
    if v is None or any(not isinstance(x, int) for x in v):
        return None
    return v


def _rule(node, data, a: Analysis, fresh) -> tuple[dict, dict]:
    """-> ({output index: Shape}, {output index: (value list, is_scalar)})."""
    op = node.op
    S = lambda i: a.shapes.get(data[i])   # noqa: E731
    V = lambda i: a.values.get(data[i])   # noqa: E731
    if op == "Placeholder":
        return {0: _placeholder_shape(node, fresh)}, {}
    if op == "Const":
        a.consts.add(f"{node.name}:0")
        arr = _const_array(node)
        if arr is None:
            return {}, {}
        out = {0: tuple(int(d) for d in arr.shape)}
        if arr.dtype in (np.int32, np.int64) and arr.ndim <= 2 and arr.size <= _SHAPE_LIKE:   # rank 2: paddings
            return out, {0: ([int(x) for x in arr.reshape(-1)], arr.ndim == 0)}
        if arr.dtype in (np.float32, np.float64) and arr.ndim == 0 and float(arr) == int(arr) and abs(arr) < 2 ** 31:
            return out, {0: ([int(arr)], True)}      # an integral float scalar (a Range's start or delta)
        return out, {}
    if op in _UNARY:
        vals = {0: (V(0), a.scalar[data[0]])} if op in ("Identity", "Snapshot") and V(0) is not None else {}
        return {0: S(0)}, vals
    if op == "Cast":
        # integers (and symbols, which are sizes) are exact in every numeric type a shape is cast to
        dst = tf.dtypes.as_dtype(node.attr["DstT"].type)
        if (dst.is_integer or dst.is_floating) and V(0) is not None:
            return {0: S(0)}, {0: (V(0), a.scalar[data[0]])}
        return {0: S(0)}, {}
    if op in _BINARY:
        sa, sb = S(0), S(1)
        shape = None
        if sa is not None and sb is not None:
            r = max(len(sa), len(sb))
            pa, pb = (1,) * (r - len(sa)) + tuple(sa), (1,) * (r - len(sb)) + tuple(sb)
            shape = tuple(broadcast(x, y) for x, y in zip(pa, pb))
        return {0: shape}, {0: _binary_value(op, a, data)}
    if op == "AddN":
        # its inputs all have its output's shape (AddN does not broadcast): a dim one of them knows is known. Grappler's
        # arithmetic optimizer turns Keras' chains of adds into AddN (LayerNormalization's): without this rule the
        # batch symbol stopped there on ConvNeXt-Tiny
        known = [x for x in (S(i) for i in range(len(data))) if x is not None]
        if not known or any(len(x) != len(known[0]) for x in known):
            return {}, {}
        return {0: tuple(next((x[k] for x in known if x[k] is not None), None) for k in range(len(known[0])))}, {}
    if op in ("SelectV2", "Select"):
        s = [S(i) for i in range(3)]
        if any(x is None for x in s) or (op == "Select" and not (s[0] == s[1] == s[2])):
            return {}, {}
        r = max(len(x) for x in s)
        padded = [(1,) * (r - len(x)) + tuple(x) for x in s]
        return {0: tuple(broadcast(broadcast(p, q), w) for p, q, w in zip(*padded))}, {}
    if op == "MatMul":
        sa, sb = S(0), S(1)
        if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
            return {}, {}
        ta, tb = node.attr["transpose_a"].b, node.attr["transpose_b"].b
        return {0: (sa[1] if ta else sa[0], sb[0] if tb else sb[1])}, {}
    if op in ("BatchMatMulV2", "BatchMatMulV3", "BatchMatMul"):
        sa, sb = S(0), S(1)
        if sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
            return {}, {}
        ax, ay = node.attr["adj_x"].b, node.attr["adj_y"].b
        ba, bb = sa[:-2], sb[:-2]
        r = max(len(ba), len(bb))
        ba, bb = (1,) * (r - len(ba)) + tuple(ba), (1,) * (r - len(bb)) + tuple(bb)
        batch = tuple(broadcast(x, y) for x, y in zip(ba, bb))
        return {0: batch + (sa[-1] if ax else sa[-2], sb[-2] if ay else sb[-1])}, {}
    if op == "Einsum":
        return {0: _einsum(node, [S(i) for i in range(len(data))])}, {}
    if op == "Range":
        start, limit, delta = (V(i) for i in range(3))
        if start is None or limit is None or delta is None:
            return {}, {}
        if start[0] == 0 and delta[0] == 1:
            n = limit[0]
        elif all(isinstance(x[0], int) for x in (start, limit, delta)) and delta[0] != 0:
            n = max(0, -(-(limit[0] - start[0]) // delta[0]))
        else:
            n = None
        return {0: (n if not isinstance(n, int) or n >= 0 else None,)}, {}
    if op == "Shape":
        s = S(0)
        return {0: None if s is None else (len(s),)}, ({0: (list(s), False)} if s is not None else {})
    if op == "Size":
        s = S(0)
        return {0: ()}, ({0: ([prod(s)], True)} if s is not None else {})
    if op == "Rank":
        s = S(0)
        return {0: ()}, ({0: ([len(s)], True)} if s is not None else {})
    if op == "Reshape":
        return _reshape(a, data)
    if op == "Transpose":
        s, p = S(0), _const_ints(a, data[1])
        if s is None or p is None or sorted(p) != list(range(len(s))):
            return {}, {}
        return {0: tuple(s[i] for i in p)}, {}
    if op == "ConcatV2":
        return _concat(a, data)
    if op == "Pack":
        return _pack(node, a, data)
    if op == "StridedSlice":
        return _strided_slice(node, a, data)
    if op == "Slice":
        return _slice(a, data)
    if op == "GatherV2":
        return _gather(node, a, data)
    if op in _REDUCE:
        return _reduce(node, a, data)
    if op == "ExpandDims":
        s, ax = S(0), _const_ints(a, data[1])
        if s is None or ax is None or len(ax) != 1:
            return {}, {}
        vals = {0: (V(0), False)} if V(0) is not None and len(s) == 0 else {}
        return {0: expand_dims(s, ax[0])}, vals
    if op == "Squeeze":
        s = S(0)
        dims = [int(x) for x in node.attr["squeeze_dims"].list.i] if "squeeze_dims" in node.attr else []
        if s is None or not dims:
            return {}, {}
        return {0: squeeze(s, dims)}, {}
    if op in ("SpaceToBatchND", "BatchToSpaceND"):
        # the batch times (or over) the block's size; the blocked dims depend on the paddings; the rest are copied
        s, bs = S(0), _const_ints(a, data[1])
        if s is None or bs is None or not bs or len(s) <= len(bs) or any(k is None or k <= 0 for k in bs):
            return {}, {}
        k = math.prod(bs)
        batch = mul(s[0], k) if op == "SpaceToBatchND" else div(s[0], k)
        return {0: (batch,) + (None,) * len(bs) + tuple(s[1 + len(bs):])}, {}
    if op in ("Fill", "BroadcastTo"):
        v = V(0) if op == "Fill" else V(1)
        return ({0: _as_dims(v)} if v is not None else {}), {}
    if op == "Tile":
        s, m = S(0), V(1)
        if s is None or m is None or len(m) != len(s):
            return {}, {}
        return {0: tuple(mul(d, k) if k is not None and (isinstance(k, Sym) or k >= 0) else None
                         for d, k in zip(s, m))}, {}
    if op in ("Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", "FusedBatchNormV3", "FusedBatchNorm"):
        s = S(0)
        if s is None or len(s) != 4 or node.attr["data_format"].s.decode() not in ("", "NHWC"):
            return {}, {}
        if op.startswith("FusedBatchNorm"):
            return {0: s}, {}
        # batch copies; H, W and C come from TF (concrete when the input's are)
        return {0: (s[0], None, None, None)}, {}
    if op in ("Split", "SplitV"):
        return _split(node, a, data)
    if op in ("Pad", "PadV2", "MirrorPad"):
        s, p = S(0), V(1)
        if s is None or p is None or len(p) != 2 * len(s):
            return {}, {}
        out = []
        for i, d in enumerate(s):
            lo, hi = p[2 * i], p[2 * i + 1]
            out.append(d if lo == 0 and hi == 0 else (d + lo + hi if isinstance(d, int) and isinstance(lo, int)
                                                      and isinstance(hi, int) else None))
        return {0: tuple(out)}, {}
    return {}, {}


def _as_dims(v) -> tuple:
    return tuple(x if isinstance(x, Sym) or (isinstance(x, int) and x >= 0) else None for x in v)


def _binary_value(op, a: Analysis, data):
    va, vb = a.values.get(data[0]), a.values.get(data[1])
    if va is None or vb is None:
        return None
    sa, sb = a.scalar[data[0]], a.scalar[data[1]]
    if not sa and not sb and len(va) != len(vb):
        return None
    n = max(len(va), len(vb))
    xs = va * n if sa else va
    ys = vb * n if sb else vb
    out = []
    for x, y in zip(xs, ys):
        if op == "Mul":
            out.append(None if (isinstance(x, int) and x < 0) or (isinstance(y, int) and y < 0) else mul(x, y))
        elif op in ("FloorDiv", "Div", "TruncateDiv"):
            out.append(div(x, y))
        elif op in ("AddV2", "Add", "Sub") and isinstance(x, int) and isinstance(y, int):
            out.append(x + y if op != "Sub" else x - y)
        elif op in ("AddV2", "Add", "Sub") and y == 0:
            out.append(x)
        else:
            out.append(None)
    return out, sa and sb


def _einsum(node, shapes) -> Shape:
    eq = node.attr["equation"].s.decode().replace(" ", "")
    if "..." in eq or "->" not in eq or any(s is None for s in shapes):
        return None
    lhs, out = eq.split("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        return None
    letter: dict = {}
    for term, s in zip(ins, shapes):
        if len(term) != len(s):
            return None
        for ch, d in zip(term, s):
            if ch not in letter:
                letter[ch] = d
            elif not same(letter[ch], d):
                # einsum does not broadcast named dims: equal at run time, so a concrete one wins
                letter[ch] = d if isinstance(d, int) and not isinstance(letter[ch], int) else (
                    letter[ch] if isinstance(letter[ch], int) else None)
    return tuple(letter.get(ch) for ch in out)


def _reshape(a: Analysis, data):
    s, v = a.shapes.get(data[0]), a.values.get(data[1])
    if v is None or a.scalar.get(data[1]):
        return {}, {}
    target = list(v)
    infer_at = [i for i, x in enumerate(target) if isinstance(x, int) and x == -1]
    if len(infer_at) > 1 or any(isinstance(x, int) and x < -1 for x in target):
        return {}, {}
    if infer_at:
        known = [x for i, x in enumerate(target) if i != infer_at[0]]
        full = div(prod(s), prod(known)) if s is not None else None
        if a.egraph and data[1] in a.consts and s is not None and not all(isinstance(d, int) for d in s):
            # a typed Reshape in the e-graph (constant target): what the egglog Reshape rules derive (tensat_tf/ops.py,
            # _reshape_symbol_rules), only a leading symbol over a leading -1 is named, scaled to a whole multiple of
            # its input dim; the facts must agree
            lead = (infer_at[0] == 0 and len(s) >= 1 and isinstance(s[0], Sym) and encode(s[0]) <= -2
                    and all(isinstance(d, int) and d >= 0 for d in s[1:])
                    and all(isinstance(k, int) and k > 0 for k in known))
            full = div(mul(s[0], prod(s[1:])), prod(known)) if lead else None
            if not (isinstance(full, Sym) and encode(full) <= -2):
                full = None
        target[infer_at[0]] = full
    return {0: _as_dims(target)}, {}


def _concat(a: Analysis, data):
    parts, ax = data[:-1], _const_ints(a, data[-1])
    shapes = [a.shapes.get(t) for t in parts]
    if ax is None or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return {}, {}
    r = len(shapes[0])
    if r == 0:
        return {}, {}
    axis = ax[0] + r if ax[0] < 0 else ax[0]
    out = []
    for i in range(r):
        col = [s[i] for s in shapes]
        if i == axis:
            out.append(sum(col) if all(isinstance(d, int) for d in col) else None)
        else:
            # every input has the same dim here at run time (or the op fails): a concrete one, else the first
            # input's symbol, describes it (the first: what the egglog ConcatV2 rule copies)
            concrete = {d for d in col if isinstance(d, int)}
            out.append(None if len(concrete) > 1 else concrete.pop() if concrete else col[0])
    vals = {}
    if r == 1 and axis == 0 and all(a.values.get(t) is not None and not a.scalar[t] for t in parts):
        vals = {0: (sum((a.values[t] for t in parts), []), False)}
    return {0: tuple(out)}, vals


def _pack(node, a: Analysis, data):
    shapes = [a.shapes.get(t) for t in data]
    axis = _int_attr(node, "axis")
    if any(s is None for s in shapes) or len(set(shapes)) != 1:
        return {}, {}
    s = shapes[0]
    axis = axis + len(s) + 1 if axis < 0 else axis
    out = {0: tuple(s[:axis]) + (len(data),) + tuple(s[axis:])}
    if len(s) == 0 and all(a.values.get(t) is not None for t in data):
        return out, {0: ([a.values[t][0] for t in data], False)}
    return out, {}


def _strided_slice(node, a: Analysis, data):
    """Constant begin/end/strides, no ellipsis. A dim sliced whole ([:] with stride 1) keeps its symbol; a dim of
    concrete size gets numpy's slice length; new axes are 1; shrunk axes vanish. A rank-1 value is sliced too."""
    b, e, st = (_const_ints(a, data[i]) for i in (1, 2, 3))
    s = a.shapes.get(data[0])
    if b is None or e is None or st is None or s is None or _int_attr(node, "ellipsis_mask"):
        return {}, {}
    bm, em, sm, nm = (_int_attr(node, m) for m in ("begin_mask", "end_mask", "shrink_axis_mask", "new_axis_mask"))
    out, dim, picks = [], 0, []
    for k in range(len(b)):
        if nm >> k & 1:
            out.append(1)
            continue
        if dim >= len(s) or st[k] == 0:
            return {}, {}
        n = s[dim]
        whole = st[k] == 1 and (bm >> k & 1 or b[k] == 0) and em >> k & 1
        if sm >> k & 1:
            if not isinstance(n, int):
                return {}, {}
            i = b[k] + n if b[k] < 0 else b[k]
            if not 0 <= i < n:
                return {}, {}
            picks.append([i])
        elif whole:
            out.append(n)
            picks.append(None if not isinstance(n, int) else list(range(n)))
        elif isinstance(n, int):
            idx = list(range(n))[slice(None if bm >> k & 1 else b[k], None if em >> k & 1 else e[k], st[k])]
            out.append(len(idx))
            picks.append(idx)
        else:
            out.append(None)
            picks.append(None)
        dim += 1
    out.extend(s[dim:])
    v = a.values.get(data[0])
    vals = {}
    if v is not None and len(s) == 1 and not nm and picks and picks[0] is not None:
        vals = {0: ([v[i] for i in picks[0]], bool(sm & 1))}
    return {0: tuple(out)}, vals


def _slice(a: Analysis, data):
    s, b, z = a.shapes.get(data[0]), _const_ints(a, data[1]), _const_ints(a, data[2])
    if s is None or b is None or z is None or len(s) != 1 or not isinstance(s[0], int):
        return {}, {}
    n = s[0]
    size = n - b[0] if z[0] == -1 else z[0]
    idx = list(range(b[0], b[0] + size))
    if any(not 0 <= i < n for i in idx):
        return {}, {}
    v = a.values.get(data[0])
    return {0: (len(idx),)}, ({0: ([v[i] for i in idx], False)} if v is not None else {})


def _gather(node, a: Analysis, data):
    s, idx, ax = a.shapes.get(data[0]), a.values.get(data[1]), _const_ints(a, data[2])
    if s is None or ax is None or _int_attr(node, "batch_dims"):
        return {}, {}
    if idx is None or len(s) != 1:          # an embedding lookup: params[:axis] + indices + params[axis + 1:]
        si = a.shapes.get(data[1])
        if si is None:
            return {}, {}
        axis = ax[0] + len(s) if ax[0] < 0 else ax[0]
        return {0: tuple(s[:axis]) + tuple(si) + tuple(s[axis + 1:])}, {}
    if ax[0] != 0:
        return {}, {}
    if any(not isinstance(i, int) for i in idx) or not isinstance(s[0], int):
        return {}, {}
    n = s[0]
    idx = [i + n if i < 0 else i for i in idx]
    if any(not 0 <= i < n for i in idx):
        return {}, {}
    scalar = a.scalar[data[1]]
    v = a.values.get(data[0])
    out = {0: () if scalar else (len(idx),)}
    return out, ({0: ([v[i] for i in idx], scalar)} if v is not None else {})


def _reduce(node, a: Analysis, data):
    s, axes = a.shapes.get(data[0]), _const_ints(a, data[1])
    if s is None or axes is None:
        return {}, {}
    axes = {x + len(s) if x < 0 else x for x in axes}
    keep = node.attr["keep_dims"].b if "keep_dims" in node.attr else False
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else tuple(
        d for i, d in enumerate(s) if i not in axes)
    vals = {}
    v = a.values.get(data[0])
    if node.op in ("Prod", "Sum") and v is not None and len(s) == 1 and axes == {0}:
        if node.op == "Prod":
            r = prod(v)
        else:
            r = sum(v) if all(isinstance(x, int) for x in v) else None
        vals = {0: ([r], not keep)}
    return {0: out}, vals


def _split(node, a: Analysis, data):
    if node.op == "Split":
        ax, s = _const_ints(a, data[0]), a.shapes.get(data[1])
        n = _int_attr(node, "num_split")
        if ax is None or s is None:
            return {}, {}
        axis = ax[0] + len(s) if ax[0] < 0 else ax[0]
        d = s[axis]
        piece = d // n if isinstance(d, int) and d % n == 0 else None     # as the egglog Split rule: never a symbol
        return {k: tuple(s[:axis]) + (piece,) + tuple(s[axis + 1:]) for k in range(n)}, {}
    s, sizes, ax = a.shapes.get(data[0]), _const_ints(a, data[1]), _const_ints(a, data[2])
    if s is None or sizes is None or ax is None:
        return {}, {}
    axis = ax[0] + len(s) if ax[0] < 0 else ax[0]
    return {k: tuple(s[:axis]) + (z if z >= 0 else None,) + tuple(s[axis + 1:]) for k, z in enumerate(sizes)}, {}


def describe(a: Analysis, tensor: str) -> str:
    """A readable shape, for tests and debugging: [s1, s2, 32]."""
    s = a.shapes.get(tensor)
    return "?" if s is None else "[" + ", ".join("?" if d is None else str(d) for d in s) + "]"


__all__ = ["Sym", "Analysis", "infer", "encode", "decode", "tf_inferred", "mul", "div", "prod", "same", "broadcast", "describe"]
