"""Sizes of the e-classes whose shape analysis says -1, for pricing.

The e-graph's shapes cannot hold a product of two symbols (tensat_tf/symbolic.py encode): the rows of Keras' Dense on
a [batch, seq, C] input with both dims dynamic, flattened to [-1, C] before its MatMul, are batch x sequence. Priced
as one row (analytic.concrete's fallback for an unknown dim 0), ConvNeXt-Tiny's 37 MatMuls (whose batch x H x W rows
had no code either before a multiple of one symbol had one) came to 1.2 ms of a 2.9 ms prediction against 13.4 of
19.6 ms measured, so rewrites of the elementwise ops around them looked 4x more valuable than they were.
Ingest knows these dims as monomials of the graph inputs' symbols (Ingested.sizes); here they go onto
the classes of the ingested tensors, and on through the new classes that rewrites make (same-shape ops, MatMul, a
Reshape with a -1), so the cost model can evaluate them at a batch size (analytic.concrete).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from tensat_tf import symbolic
from tensat_tf.egraph import export
from tensat_tf.egraph.export import Exported
from tensat_tf.options import UNKNOWN_DIM

# terms whose output has the shape of their first tensor input (elementwise with a same-or-broadcast second one)
SAME_AS_FIRST = frozenset("""Relu ReluSix Sigmoid Tanh Neg Erfc Rsqrt Exp Sqrt Identity BiasAdd""".split())
BINARY = frozenset("""AddV2 Mul Sub RealDiv SquaredDifference Maximum Minimum""".split())


def exported(eg, ing) -> Exported:
    """The e-graph `eg` exported (egraph/export.py), its missing elementwise shapes completed (complete_shapes) and
    the sizes and scalar values of ingest `ing` (an Ingested) attached."""
    exp = export.export(eg, ing.roots)
    complete_shapes(exp)
    attach(exp, ing.sizes, ing.output_lets, ing.batch_bases)
    export.attach_scalars(exp, ing.scalars)
    return exp


def complete_shapes(exp: Exported) -> None:
    """Give a class the e-graph's analysis left without a shape the one its elementwise node's operands broadcast to.
    The analysis derives broadcasting only for the forms the rules' guards need (tensat_tf/ops.py): a product that
    S042 makes of a layer norm's gamma [1, 1, C] and row mean [b, t, 1], a full [b, t, C], had none and was priced
    as one op's fixed cost (cost/analytic.py), which made that form look 0.13 ms cheaper than the centred layer norm
    (F25) on a BERT-base-sized encoder where it costs two full-size passes more. A dim broadcasts where the two are
    the same (a symbol included), or where one is 1; anything else (an unknown -1 against a size) stays undecided."""
    g = exp.egraph
    for _ in range(4):                      # a few rounds reach chains of new classes
        grew = False
        for n in g.nodes:
            if n.eclass in exp.shapes or exp.sorts[n.eclass] != "Tensor":
                continue
            kids = [exp.shapes.get(c) for c in n.children]
            shape = None
            if n.op in SAME_AS_FIRST and kids and kids[0] is not None:
                shape = kids[0]
            elif n.op in BINARY and len(kids) == 2 and None not in kids:
                shape = _broadcast(*kids)
            if shape is not None:
                exp.shapes[n.eclass] = shape
                grew = True
        if not grew:
            break


def _broadcast(a: tuple, b: tuple) -> Optional[tuple]:
    """numpy's broadcast of two shapes (right-aligned, each dim by symbolic.broadcast), or None where a dim is
    undecided."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    dims = [symbolic.broadcast(x, y) for x, y in zip(a, b)]
    return None if None in dims else tuple(dims)


def attach(exp: Exported, sizes: dict, output_lets: dict, batch_bases: frozenset) -> None:
    """Set exp.sizes (class -> dims, each an int, a symbolic.Sym or None) from ingest's tensor sizes (tensor name ->
    dims; Ingested.sizes, .output_lets), completed through the nodes of classes ingest did not make, and
    exp.batch_bases (the base symbols that are a graph input's dim 0)."""
    out: dict[int, tuple] = {}
    for tensor, let in output_lets.items():
        c, dims = exp.lets.get(let), sizes.get(tensor)
        if c is not None and dims is not None and any(not isinstance(d, int) for d in dims):
            out.setdefault(c, tuple(dims))
    g = exp.egraph
    for _ in range(4):                      # a few rounds reach chains of new classes; the rest keep the fallback
        grew = False
        for n in g.nodes:
            if n.eclass not in exp.shapes or -1 not in exp.shapes[n.eclass]:
                continue
            sized = out.get(n.eclass)
            if sized is not None and (None not in sized or not _on_blocked_path(n, out)):
                continue
            dims = _derived(n, exp, out)
            if dims is not None and len(dims) == len(exp.shapes[n.eclass]) and dims != out.get(n.eclass):
                out[n.eclass] = dims
                grew = True
        if not grew:
            break
    exp.sizes, exp.batch_bases = out, frozenset(batch_bases)


@dataclasses.dataclass(frozen=True)
class Quotient:
    """A size known only as `dim` (an int, a symbolic.Sym, or None: unknown, priced as `--unknown_dim`) over `den`,
    rounded up: a dim that SpaceToBatchND splits over a run-time length (the padded length over the rate, the padding
    left out). For pricing only: the shape analysis keeps such a dim unknown (-1). Without it a conv between
    SpaceToBatchND and BatchToSpaceND was priced at the batch times the rate and at a whole `--unknown_dim` long (a
    WaveNet-like stack predicted 5.9x faster by the dilated form, measured 1.33x; BENCHMARKS.md)."""
    dim: object
    den: int


BLOCKING = {"SpaceToBatchND": True, "SpaceToBatchNDT": True, "BatchToSpaceND": False, "BatchToSpaceNDT": False}


def _on_blocked_path(n, known: dict) -> bool:
    """A SpaceToBatchND / BatchToSpaceND, or an op reading a tensor one blocked: a class ingest sized is derived again
    only there, where ingest left the blocked dims unknown (Quotient)."""
    return n.op in BLOCKING or any(isinstance(d, Quotient) for c in n.children for d in known.get(c, ()))


def _blocked(n, kids, rank: int) -> Optional[tuple]:
    """The dims of a SpaceToBatchND (the batch times the block, each blocked dim over its rate) or of a
    BatchToSpaceND (the inverse), from its input's."""
    x, block = kids[0] if kids else None, tuple(n.payload[0]) if n.payload else ()
    if x is None or not block or len(x) != rank or rank <= len(block) or any(k <= 0 for k in block):
        return None
    total = math.prod(block)
    if BLOCKING[n.op]:
        batch, inner = symbolic.mul(x[0], total), [_over(d, k) for d, k in zip(x[1:], block)]
    else:
        batch, inner = symbolic.div(x[0], total), [_times(d, k) for d, k in zip(x[1:], block)]
    return (batch, *inner, *x[1 + len(block):])


def _over(d, k: int):
    # an unknown dim (None: a padded run-time length) is priced as any unknown dim is, `--unknown_dim`, over the rate
    return -(-d // k) if isinstance(d, int) else Quotient(d, k)


def _times(d, k: int):
    if isinstance(d, Quotient):
        if d.den % k:
            return None
        return Quotient(d.dim, d.den // k) if d.den > k else d.dim      # (a None dim stays unknown)
    return None if d is None else symbolic.mul(d, k)


def _through(n, exp: Exported, kids) -> Optional[tuple]:
    """The dims of an op on a blocked tensor (one whose dims hold a Quotient): ExpandDims, Squeeze, and a stride-1
    convolution (its spatial dims the input's, the filter's shrink left out), the ops between TF's SpaceToBatchND and
    BatchToSpaceND."""
    x, shape = kids[0] if kids else None, exp.shapes[n.eclass]
    if x is None:
        return None
    if n.op == "ExpandDims" and n.payload:
        return symbolic.expand_dims(x, n.payload[0])
    if n.op == "Squeeze" and n.payload:
        return symbolic.squeeze(x, n.payload[0])
    if n.op in ("Conv2D", "DepthwiseConv2dNative") and n.payload and tuple(n.payload[0]) == (1, 1, 1, 1) \
            and len(x) == 4 == len(shape):
        return (x[0], x[1], x[2], shape[3] if shape[3] >= 0 else None)
    return None


def _derived(n, exp: Exported, known: dict) -> Optional[tuple]:
    kids = [known.get(c, _decoded(exp.shapes.get(c))) for c in n.children]
    rank = len(exp.shapes[n.eclass])
    if n.op in BLOCKING:
        return _blocked(n, kids, rank)
    if any(isinstance(d, Quotient) for k in kids if k is not None for d in k):
        return _through(n, exp, kids)
    if n.op in SAME_AS_FIRST and kids and kids[0] is not None:
        return kids[0]
    if n.op in BINARY and len(kids) == 2:
        # broadcasting: a dim of the result is the operand's that is not 1 ([b, h, w, 1] * [b, h, w, C], a layer
        # norm's row statistic; taking either operand whole priced ConvNeXt's Dense after F27 at one row)
        same = [k for k in kids if k is not None and len(k) == rank]
        if not same:
            return None
        shape = exp.shapes[n.eclass]
        return tuple(shape[i] if shape[i] >= 0 else next((k[i] for k in same if k[i] != 1), same[0][i])
                     for i in range(rank))
    if n.op == "MatMul" and len(kids) == 2 and all(k is not None and len(k) == 2 for k in kids):
        ta, tb = (bool(x) for x in n.payload[:2])
        return kids[0][1 if ta else 0], kids[1][0 if tb else 1]
    if n.op == "Reshape" and kids and kids[0] is not None and n.payload:
        target = tuple(n.payload[0])
        if list(target).count(-1) != 1:
            return None
        rest = symbolic.prod(d for d in target if d != -1)
        return tuple(symbolic.div(symbolic.prod(kids[0]), rest) if d == -1 else d for d in target)
    return None


def _decoded(shape) -> Optional[tuple]:
    """A class's shape with its symbols as Syms (a new class of symbolic shape, e.g. a rewritten GELU's product on
    [batch, seq, C], that a Reshape with a -1 then flattens), or None when a dim is unknown."""
    if shape is None or -1 in shape:
        return None
    return tuple(symbolic.decode(d) if d <= -2 else d for d in shape)


def evaluate(dim, batch_size: int, batch_bases: frozenset, unknown_dim: int = UNKNOWN_DIM) -> Optional[int]:
    """A size at `batch_size`: a batch symbol is batch_size, any other unknown_dim; None when unknown."""
    if isinstance(dim, int):
        return dim if dim >= 0 else None
    if isinstance(dim, symbolic.Sym):
        v = dim.coef
        for b in dim.bases:
            v *= batch_size if b in batch_bases else unknown_dim
        return v
    if isinstance(dim, Quotient):
        v = unknown_dim if dim.dim is None else evaluate(dim.dim, batch_size, batch_bases, unknown_dim)
        return None if v is None else -(-v // dim.den)
    return None
