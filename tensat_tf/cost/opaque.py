"""The work of the ops the e-graph keeps opaque, estimated from their shapes, for the predicted speed-up of a call.

Extraction prices an opaque `Op` e-node at one op's overhead (cost/__init__.py): it is the same in every extracted
program, so its price cannot change a choice. But a predicted speed-up is a ratio of whole calls, and an opaque op
can be most of the call: a video model's Conv3D, a decoder's Conv3DBackpropInputV2, pooling in 3-D. Priced at its
overhead, a Keras Conv3D classifier (a helper's sweep of new models, BENCHMARKS.md) was predicted 1.43x for merging
a BatchNormalization's bias into the conv's: 30 % of a call whose convolutions cost nothing, measured 1.004x.

Each opaque op is estimated here the way cost/analytic.py prices a typed one (a roofline of FLOPs and bytes at the
device's peak and bandwidth, without the overhead extraction already counts) from the sizes ingest found for its
tensors (Ingested.sizes: TF's inferred shapes, symbols where a dim is unknown; an unknown dim as extraction reads
one, analytic.concrete). The contractions and pools TF has
in 3-D or transposed count their multiply-adds; anything else one FLOP per output element, every tensor read and
written once. Control flow and function calls (a While's body, a call) and an op of unknown shapes cannot be
estimated: they count in `unpriced`, and the estimate is then a lower bound.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from tensat_tf.cost.analytic import DTYPE_BYTES, Device, concrete, transposed_conv_flops
from tensat_tf.symbolic import tensor_ref
from tensat_tf.options import UNKNOWN_DIM

# ops whose work is a body this module cannot see
UNPRICED = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase", "PartitionedCall",
                      "StatefulPartitionedCall"})


@dataclasses.dataclass(frozen=True)
class Estimate:
    ms: float                  # the opaque ops' estimated work, beyond the overhead extraction counts for each
    unpriced: int              # opaque ops that could not be estimated


def _shape(ing, tensor: str, batch_size: int, unknown_dim: int) -> Optional[tuple[int, ...]]:
    """A tensor's dims at batch_size, as extraction's prices read them (analytic.concrete). None: unknown rank."""
    return concrete(ing.shapes.get(tensor), batch_size, ing.sizes.get(tensor), ing.batch_bases, unknown_dim)


def flops(op: str, attrs, ins: list[tuple[int, ...]], outs: list[tuple[int, ...]]) -> float:
    """Multiply-adds (x2) of the contractions and pools TF has in 3-D or transposed; one per output element else."""
    out = outs[0] if outs else ()
    if op == "Conv3D":                                  # filter [kd, kh, kw, in, out]
        w = ins[1]
        return 2.0 * math.prod(out) * math.prod(w[:4])
    if op in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):     # a 2-D one where the e-graph keeps it opaque
        return transposed_conv_flops(ins[1], ins[2])
    if op in ("MaxPool3D", "AvgPool3D"):
        return float(math.prod(out) * math.prod(attrs["ksize"].list.i))
    if op in ("BatchMatMulV3", "BatchMatMul"):
        a = ins[0]
        k = a[-2] if "adj_x" in attrs and attrs["adj_x"].b else a[-1]
        return 2.0 * math.prod(out) * k
    return float(sum(math.prod(o) for o in outs))


def estimate(ing, device: Device, batch_size: int = 1, unknown_dim: int = UNKNOWN_DIM) -> Estimate:
    """The opaque ops of `ing` (an Ingested) at `batch_size`, every other unknown dim unknown_dim long."""
    total, unpriced = 0.0, 0
    for name in sorted(ing.opaque):
        node = ing.opaque[name]
        if node.op in UNPRICED:
            unpriced += 1
            continue
        ins = [_shape(ing, tensor_ref(i), batch_size, unknown_dim) for i in node.input if not i.startswith("^")]
        n_out = len(ing.opaque_dtypes.get(name, ())) or 1
        outs = [_shape(ing, f"{name}:{k}", batch_size, unknown_dim) for k in range(n_out)]
        if any(s is None for s in ins + outs):
            unpriced += 1
            continue
        try:
            work = flops(node.op, node.attr, ins, outs)
        except (IndexError, KeyError, ValueError):      # attributes or ranks that are not the op's usual ones
            unpriced += 1
            continue
        nbytes = DTYPE_BYTES * sum(math.prod(s) for s in ins + outs)
        total += max(work * device.flops_per_element(node.op) / (device.peak_gflops * 1e6),
                     nbytes / (device.bandwidth_gbs * 1e6))
    return Estimate(total, unpriced)
