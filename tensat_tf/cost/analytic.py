"""Analytic per-e-node cost (milliseconds): a roofline per op plus a fixed per-op overhead.

    cost = max(FLOPs / peak_flops, bytes_moved / bandwidth) + overhead

The optimizer only needs a cost that ranks alternatives correctly, so the model counts what separates rewrites:
arithmetic for matmuls and convolutions, memory traffic for everything else, and one overhead per op (which is what
makes merging two small matmuls into one worthwhile). Extraction sums these per chosen e-node (DAG cost).

Conventions
  - Shapes come from the exported `shape` analysis. An unknown dimension (-1) is evaluated at `batch_size` when it is
    dimension 0 (the batch dimension of every zoo and Keras model) and at options.UNKNOWN_DIM anywhere else (the
    sequence length of a text model exported with a dynamic one): the length verification and profiling feed, so the
    predicted gain is the one measured. Priced at 1 until now, the three transformer exports' gains were predicted
    1.15-1.23x against 0.98-1.11x measured.
  - Element size is 4 bytes (float32): the exported e-graph carries no dtypes, and float32 is what every model of the
    zoo computes in. Ranking between rewrites of the same tensors does not depend on this.
  - A node without usable shapes costs the overhead alone, so an odd class never stops extraction.
  - Structural nodes that never run (Input, Weight, FConst, Out, Ctl, TNil, TCons: tensat_tf/terms.py) cost 0; an
    opaque `Op` costs one overhead: it is the only node of its class, so any constant ranks the same, and the
    overhead keeps totals comparable to measurements.
  - A typed node whose tensor children are all constant classes costs 0: the emitter folds weight-only subgraphs into
    new constants (tensat_tf/egraph/emit.py), so such a node never runs at serving time.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Sequence

from tensat_tf import einsum, ops, symbolic, terms
from tensat_tf.cost import fusion, sizes
# the devices are declared in cost/devices.py; these names stay reachable as analytic.CPU etc.
from tensat_tf.cost.devices import (AUTO, CPU, CPU_EIGEN, DEVICES, GPU, GPU_H100, GPU_T4, Device,  # noqa: F401
                                    device_named, runtime_cpu)
from tensat_tf.cost.fusion import HAZARD_MS, remapper_hazards
from tensat_tf.egraph.data import EGraphData, Fused
from tensat_tf.egraph.export import Exported
from tensat_tf.options import MIN_VARIABLE_ELEMENTS, UNKNOWN_DIM

Shape = tuple[int, ...]

STRUCTURAL_FREE = terms.FREE        # constructors that never run (every structural one but the opaque Op): cost 0
DTYPE_BYTES = 4


# ---------------------------------------------------------------------------------------------- shapes
def concrete(shape: Optional[Sequence[int]], batch_size: int, size: Optional[Sequence] = None,
             batch_bases: frozenset = frozenset(), unknown_dim: int = UNKNOWN_DIM) -> Optional[Shape]:
    """Unknown dims resolved: from `size` (the class's symbolic dims, cost/sizes.py) where it knows them, a symbol
    (<= -2) from its code where the batch's symbols are known (a multiple of the batch or of another input dim), else
    dimension 0 -> batch_size, any other -> unknown_dim (see the module docstring)."""
    if shape is None:
        return None
    if size is not None and len(size) == len(shape):
        known = [sizes.evaluate(z, batch_size, batch_bases, unknown_dim) for z in size]
    else:
        known = [sizes.evaluate(symbolic.decode(d), batch_size, batch_bases, unknown_dim) if d <= -2 and batch_bases
                 else None for d in shape]
    return tuple(d if d >= 0 else (known[i] if known[i] is not None else batch_size if i == 0 else unknown_dim)
                 for i, d in enumerate(shape))


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def node_shapes(exp: Exported, node_index: int, batch_size: int, unknown_dim: int = UNKNOWN_DIM,
                cache: Optional[dict] = None) -> tuple[Optional[list[Shape]], Optional[Shape]]:
    """(input shapes, output shape) of a typed e-node, unknown dims resolved; None where a shape is missing.

    For tuple-output ops (Split, SplitV, FusedBatchNormV3) the class is a TTuple without a shape, so the output shape
    is the shape of the first input (the data tensor). cache: a dict kept by the caller across the nodes of one
    `exp` at one batch_size and unknown_dim (class -> resolved shape): pricing ConvNeXt-Tiny's e-graph resolved
    the same classes' shapes ~25 times each, 0.1 s of each 0.3 s pricing.
    """
    node = exp.egraph.nodes[node_index]

    def resolved(c: int) -> Optional[Shape]:
        if cache is not None and c in cache:
            return cache[c]
        shape = concrete(exp.shapes.get(c), batch_size, exp.sizes.get(c), exp.batch_bases, unknown_dim)
        if cache is not None:
            cache[c] = shape
        return shape

    ins = [resolved(c) for c in node.children]
    in_shapes = None if any(s is None for s in ins) else ins
    out = resolved(node.eclass)
    if out is None and exp.sorts[node.eclass] == "TTuple" and ins and ins[0] is not None:
        out = ins[0]
    return in_shapes, out


# ---------------------------------------------------------------------------------------------- constants
def constant_classes(egraph: EGraphData) -> set[int]:
    """Classes whose value is known before serving: a Weight, or a typed op on constant classes only (fixpoint).

    `Out` of a constant tuple class is constant too: a Split of a weight is weight-only, and the emitter folds
    weight-only subgraphs whole. Opaque `Op` nodes never make a class constant (they may be stateful or random).
    """
    const: set[int] = set()
    readers: dict[int, list[int]] = {}
    candidates = []
    for i, n in enumerate(egraph.nodes):
        if n.op in ("Weight", "FConst"):
            const.add(n.eclass)
        elif n.op == "Out" or n.op not in terms.STRUCTURAL_NAMES:
            candidates.append(i)
            for c in set(n.children):
                readers.setdefault(c, []).append(i)
    # worklist: a node is re-checked only when one of its children became constant
    work = [i for i in candidates if all(c in const for c in egraph.nodes[i].children)]
    while work:
        i = work.pop()
        n = egraph.nodes[i]
        if n.eclass in const or not all(c in const for c in n.children):
            continue
        const.add(n.eclass)
        work.extend(readers.get(n.eclass, ()))
    return const


def is_folded(node, const: set[int]) -> bool:
    """A typed e-node that the emitter turns into a constant (all tensor children constant)."""
    return node.op not in STRUCTURAL_FREE and node.op != "Op" and all(c in const for c in node.children)


# ---------------------------------------------------------------------------------------------- per op
def _literals(term: str, payload) -> dict:
    spec = ops.BY_TERM.get(term)
    if spec is None or payload is None:
        return {}
    return dict(zip((n for n, _ in spec.literals), payload))


def _spatial(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    if padding == "SAME":
        return -(-size // stride)
    return max(0, (size - dilation * (k - 1) - 1) // stride + 1)


def _conv_out(x: Shape, w: Shape, lit: dict, channels: int) -> Shape:
    s, d, pad = lit.get("strides", (1, 1, 1, 1)), lit.get("dilations", (1, 1, 1, 1)), lit.get("padding", "SAME")
    return (x[0], _spatial(x[1], w[0], s[1], d[1], pad), _spatial(x[2], w[1], s[2], d[2], pad), channels)


def transposed_conv_flops(w: Shape, x: Shape) -> float:
    """Multiply-adds (x2) of a transposed conv (Conv2DBackpropInput, typed or opaque; Conv3DBackpropInputV2): every
    element of its input x [.., in] spreads over the filter's taps and output channels (filter [k.., out, in])."""
    return 2.0 * numel(x) * math.prod(w[:-1])


def flops_and_bytes(term: str, payload, in_shapes: Sequence[Shape], out_shape: Optional[Shape]) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one op at concrete shapes. Bytes count every input read and every output written."""
    lit = _literals(term, payload)
    ins = [tuple(s) for s in in_shapes]
    n_in = sum(numel(s) for s in ins)
    if term == "MatMul":
        a, b = ins
        m, k = (a[1], a[0]) if lit.get("transpose_a") else (a[0], a[1])
        n = b[0] if lit.get("transpose_b") else b[1]
        return 2.0 * m * n * k, DTYPE_BYTES * (n_in + m * n)
    if term == "BatchMatMulV2":
        a, b = ins
        m, k = (a[-1], a[-2]) if lit.get("adj_x") else (a[-2], a[-1])
        n = b[-2] if lit.get("adj_y") else b[-1]
        rank = max(len(a), len(b))
        pa, pb = (1,) * (rank - len(a)) + a[:-2], (1,) * (rank - len(b)) + b[:-2]
        batch = math.prod(max(x, y) for x, y in zip(pa, pb))
        return 2.0 * batch * m * n * k, DTYPE_BYTES * (n_in + batch * m * n)
    if term in ("Conv2D", "DepthwiseConv2dNative"):
        x, w = ins
        channels = w[3] if term == "Conv2D" else w[2] * w[3]
        out = out_shape if out_shape is not None and len(out_shape) == 4 else _conv_out(x, w, lit, channels)
        # Conv2D: every output element is a KH*KW*Cin dot product; depthwise: a KH*KW one per (channel, multiplier)
        per_out = w[0] * w[1] * (w[2] if term == "Conv2D" else 1)
        return 2.0 * numel(out) * per_out, DTYPE_BYTES * (n_in + numel(out))
    if term == "Conv2DBackpropInput":
        _, w, x = ins
        # its output shape is the term's literal, known wherever it is priced; without it, one output element per
        # input pixel and channel (a stride-1 SAME conv's)
        out = numel(out_shape) if out_shape is not None else numel(x) * w[2] // max(w[3], 1)
        return transposed_conv_flops(w, x), DTYPE_BYTES * (numel(w) + numel(x) + out)
    if term in ("MaxPool", "AvgPool"):
        x = ins[0]
        ks, st, pad = lit.get("ksize", (1, 1, 1, 1)), lit.get("strides", (1, 1, 1, 1)), lit.get("padding", "VALID")
        out = out_shape if out_shape is not None else (
            x[0], _spatial(x[1], ks[1], st[1], 1, pad), _spatial(x[2], ks[2], st[2], 1, pad), x[3])
        return float(numel(out) * ks[1] * ks[2]), DTYPE_BYTES * (numel(x) + numel(out))
    if term == "FusedBatchNormV3":
        # inference form: y = x * scale' + offset' per channel (2 FLOPs), plus the tiny per-channel vectors
        x = ins[0]
        return 2.0 * numel(x), DTYPE_BYTES * (n_in + numel(x))
    if term == "Einsum":
        # every point of the iteration space (each label once) is a multiply-add; operands read, output written
        eq = einsum.parse(lit.get("equation", ""))
        if eq is None:
            raise ValueError("einsum equation outside the typed subset")
        return eq.flops(ins), DTYPE_BYTES * (n_in + numel(eq.output_shape(ins)))
    if getattr(ops.BY_TERM.get(term), "tf_op", None) in ("Reshape", "Squeeze", "ExpandDims"):   # and ReshapeT, ReshapeS
        return 0.0, 0.0                       # metadata only: TF forwards the buffer
    if term == "ConcatV2":
        out = numel(out_shape) if out_shape is not None else n_in
        return 0.0, DTYPE_BYTES * (n_in + out)
    if term in ("Split", "SplitV"):
        # Along dimension 0 TF hands out slices of the input buffer (split_op.cc's aligned first-dimension case:
        # 2048x64 split on axis 0 takes 0.3 us, on axis 1 21 us); along any other axis every element is copied.
        return 0.0, 0.0 if lit.get("axis") == 0 else DTYPE_BYTES * 2 * n_in
    if term == "Transpose":
        # TF forwards the buffer when the dims larger than 1 keep their order (transpose_op.cc: a reshape)
        x, perm = ins[0], lit.get("perm", ())
        moved = [p for p in perm if x[p] != 1]
        return 0.0, 0.0 if moved == sorted(moved) else DTYPE_BYTES * 2 * n_in
    out = numel(out_shape) if out_shape is not None else max((numel(s) for s in ins), default=0)
    # elementwise (AddV2, Mul, Sub, BiasAdd, Relu, ReluSix, Sigmoid, Tanh) and any typed op this model does not
    # know yet: one FLOP per output element (node_cost scales it by the device's flops_per_element), every input
    # read once and the output written once
    return float(out), DTYPE_BYTES * (n_in + out)


def node_cost(term: str, payload, in_shapes: Optional[Sequence[Shape]], out_shape: Optional[Shape],
              batch_size: int = 1, device: Device = CPU) -> float:
    """Cost in ms of one typed op (or structural node). Shapes may hold -1 (resolved with batch_size) or be None."""
    if term in STRUCTURAL_FREE:
        return 0.0
    if term == "Op":
        return device.overhead_ms(term)
    if in_shapes is None:
        if term not in _ELEMENTWISE or term not in ops.BY_TERM or out_shape is None:
            return device.overhead_ms(term)
        # an operand the shape analysis cannot name (a broadcast it does not derive, e.g. [1,1,1,C] * [b,h,w,1]
        # after a reassociation): priced as if every operand were output-sized, an upper bound, not as the op's
        # overhead alone (which made such forms look free: ConvNeXt's layer norms, /tmp check)
        in_shapes = [out_shape] * ops.BY_TERM[term].n_tensor_inputs
    ins = [concrete(s, batch_size) for s in in_shapes]
    out = concrete(out_shape, batch_size)
    if term == "Conv2D" and not device.grouped_conv and _grouped(ins):
        return UNRUNNABLE_MS
    try:
        flops, nbytes = flops_and_bytes(term, payload, ins, out)
    except (ValueError, IndexError, TypeError):      # a shape that does not fit the op (rank mismatch): no estimate
        return device.overhead_ms(term)
    if term == "Transpose" and nbytes == 0:
        return device.overhead_ms("Reshape")        # a transpose that moves only size-1 dims is a reshape in TF
    outputs = flops / (2.0 * ins[1][0] * ins[1][1]) if term == "DepthwiseConv2dNative" and flops else 0.0
    flops *= device.flops_per_element(term)
    bandwidth = device.bandwidth_gbs
    if term == "Transpose":
        bandwidth *= device.strided_copy_efficiency
    elif (term in _BINARY_ELEMENTWISE and _broadcasts_vector(ins)) or term == "FusedBatchNormV3" or (
            term == "DepthwiseConv2dNative" and _pointwise(ins)):
        # FusedBatchNormV3 (inference) applies per-channel vectors too: measured 36 us at [1,56,56,64] and 150 us at
        # [4,28,28,128] against BiasAdd's 47 and 94 us, 4.9 us at [1,8,8,8] (tools: cost.measured.time_op). So
        # does a 1x1 depthwise conv (rule F30), as fast as a broadcast Mul but for its fixed cost (cost/fusion.py,
        # "depthwise")
        bandwidth *= device.broadcast_efficiency
        if term in _BINARY_ELEMENTWISE and out is not None and max(numel(s) for s in ins) < numel(out):
            # both operands broadcast (an outer product: a layer norm's gamma [1,1,C] times its row statistic
            # [b,t,1]): it runs as slowly per output element as a broadcast that reads one output-sized operand,
            # not at the bytes it reads (one thread, /tmp script: 31.4 us at [1,128,768] against 24.0 for a row and
            # 10.9 for same-shape operands; 98.5 / 70.9 / 33.1 at [1,3136,96]; BENCHMARKS.md, 2026-12-05)
            nbytes += DTYPE_BYTES * numel(out)
    compute_ms = flops / (device.peak_gflops * 1e6) + outputs * device.depthwise_ns_per_output * 1e-6
    memory_ms = nbytes / (bandwidth * 1e6)
    copy_ms = 0.0
    if term == "Einsum" and out is not None and (eq := einsum.parse(_literals(term, payload).get("equation", ""))) \
            and eq.output_transposed:
        # the kernel's copy of its result into the output's order (einsum.Equation.output_transposed), after the
        # contraction, priced as the Transpose it is
        copy_ms = DTYPE_BYTES * 2 * numel(out) / (device.bandwidth_gbs * device.strided_copy_efficiency * 1e6)
    if term in _BINARY_ELEMENTWISE and device.broadcast_row_ns and (c := _channel_vector(ins, out)):
        memory_ms = max(memory_ms, numel(out) / c * device.broadcast_row_ns * 1e-6)
    return max(compute_ms, memory_ms) + copy_ms + device.overhead_ms(term)


# contractions whose constant operands oneDNN reorders into its own layout (Device.variable_weight_ns_per_element)
WEIGHTED = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2", "Einsum"})


def variable_weights_ms(node, in_shapes: Optional[Sequence[Shape]], const: set[int], device: Device,
                        min_variable_elements: int = MIN_VARIABLE_ELEMENTS, streamed: bool = False) -> float:
    """What a contraction pays per call to reorder its constant operands that the output saves as variables (those
    of min_variable_elements elements or more); streamed: those variables come from memory (weights_streamed)."""
    if node.op not in WEIGHTED or in_shapes is None:
        return 0.0
    rows = _matmul_rows(node.payload, in_shapes) if streamed and node.op == "MatMul" else 0
    return sum(device.variable_weight_ms(node.op, numel(s), min_variable_elements, rows if k == 1 else 0)
               for k, (c, s) in enumerate(zip(node.children, in_shapes)) if c in const)


def weights_streamed(exp: Exported, device: Device, min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> bool:
    """The variables of the output (the program's weights of min_variable_elements or more) outgrow the device's
    weight_cache_bytes: each call then reads every one of them from memory (Device.streamed_matmul_ns_per_element)."""
    if not device.weight_cache_bytes:
        return False
    elements = (numel(s) for n in exp.egraph.nodes if n.op == "Weight" and (s := exp.shapes.get(n.eclass)) is not None)
    return DTYPE_BYTES * sum(e for e in elements if e >= min_variable_elements) > device.weight_cache_bytes


def _matmul_rows(payload, ins: Sequence[Shape]) -> int:
    """The rows of a MatMul's output: its first operand's, transposed or not."""
    return ins[0][1] if _literals("MatMul", payload).get("transpose_a") else ins[0][0]


# What a grouped Conv2D costs where TF runs Eigen's CPU kernels (Device.grouped_conv False): the remapper fuses a
# BiasAdd after it into a _FusedConv2D that Eigen does not implement for groups ("Fused conv implementation does not
# support grouped convolutions", seen on NASNet-Mobile after rules S092/S093 on the Zen 3 VM), so such a form must not
# be extracted. GPUs run grouped convs through cuDNN: priced unrunnable there, the zoo's ResNeXt-50 (16 grouped convs)
# cost 16,001 ms under gpu-h100 and hid every other difference (BENCHMARKS.md, the first GPU run).
UNRUNNABLE_MS = 1e3


def _grouped(ins: Sequence[Shape]) -> bool:
    """A Conv2D whose input has more channels than its filter takes (TF then runs filter-in-channel groups)."""
    return len(ins) == 2 and len(ins[0]) == 4 and len(ins[1]) == 4 and ins[0][3] > 0 and ins[1][2] > 0 \
        and ins[0][3] != ins[1][2]


_BINARY_ELEMENTWISE = frozenset({"AddV2", "Mul", "Sub", "BiasAdd"})
_ELEMENTWISE = sizes.SAME_AS_FIRST | sizes.BINARY      # elementwise terms, as cost/sizes.py propagates their sizes


def _pointwise(ins: Sequence[Shape]) -> bool:
    """A depthwise conv's filter is [1, 1, C, 1]: a per-channel scale."""
    return len(ins) == 2 and len(ins[1]) == 4 and ins[1][0] == ins[1][1] == ins[1][3] == 1


def _channel_vector(ins: Sequence[Shape], out: Optional[Shape]) -> int:
    """C where one operand is a per-channel vector ([C] or [1, .., 1, C], C > 1) broadcast along the output's last
    dim C over more elements; else 0 (a [1] or [1, .., 1] operand streams as a scalar: 1.5 us on 12,288 elements)."""
    if out is None or not out or out[-1] <= 1 or numel(out) <= out[-1]:
        return 0
    for s in ins:
        if s and s[-1] == out[-1] and numel(s) == out[-1]:
            return out[-1]
    return 0


def _broadcasts_vector(ins: Sequence[Shape]) -> bool:
    """One operand is neither a scalar (numel 1) nor full size: a per-channel (or per-row) vector is broadcast."""
    sizes = [numel(s) for s in ins]
    return any(1 < n < max(sizes) for n in sizes)


def fused_cost(term: str, in_shapes: Optional[Sequence[Shape]], out_shape: Optional[Shape],
               device: Device = CPU) -> float:
    """Cost in ms of an op run as the epilogue of a fused contraction kernel: its arithmetic on the output tile while
    it is still in cache (FLOPs at peak, scaled by flops_per_element); no overhead, no memory pass."""
    shape = out_shape if out_shape is not None else (in_shapes[0] if in_shapes else None)
    if shape is None:
        return 0.0
    per_element = 2.0 if term == "FusedBatchNormV3" else device.fused_flops_per_element(term)
    return numel(shape) * per_element / (device.peak_gflops * 1e6)


def fusion_terms(exp: Exported, costs_ms: list[float], batch_size: int, device: Device,
                 unknown_dim: int = UNKNOWN_DIM) -> tuple[list[float], dict[int, Fused]]:
    """(costs, fused): costs_ms with every node the runtime fuses into a contraction (fusion.fusion_sites) repriced
    by fused_cost, for the device's fused_contractions (folded nodes keep their 0); and for each node priced fused,
    what its fusion needs of the extracted program and what it costs more where that does not hold, or where it
    does and the fused kernel is the dearer (EGraphData.fused)."""
    if not device.fused_contractions and not device.fused_activations:
        return costs_ms, {}
    const = constant_classes(exp.egraph)
    out = list(costs_ms)
    terms: dict[int, Fused] = {}
    resolved: dict = {}
    for i, site in sorted(fusion.fusion_sites(exp, device.fused_contractions, device.fused_activations,
                                              device.onednn).items()):
        n = exp.egraph.nodes[i]
        if is_folded(n, const):
            continue
        in_shapes, out_shape = node_shapes(exp, i, batch_size, unknown_dim, resolved)
        # a Sigmoid run inside its swish's Mul (_MklSwish) costs the swish's arithmetic, the Mul its pass
        price = fused_cost("Swish" if site.kind == "mklswish" else n.op, in_shapes, out_shape, device)
        if site.kind == "bias" and all(exp.egraph.nodes[j].op == "DepthwiseConv2dNative" for j in site.producers):
            # a Fused term, not a plain price as a MatMul's bias: F30 puts a depthwise conv in the class of a Mul,
            # and only the extracted depthwise takes the bias (on a small tensor, where the fixed cost exceeds the
            # separate ops', the separate price stays: a Fused term only makes a node cheaper)
            price += device.fused_depthwise_us * 1e-3
        out[i] = min(out[i], price)
        if costs_ms[i] > out[i]:
            terms[i] = Fused(site.reads, costs_ms[i] - out[i], site.producers, site.partners, site.consumers)
    if device.fused_matmul_us:
        # a MatMul's bias is fused by the runtime wherever extraction computes its input with a MatMul: dearer than a
        # separate BiasAdd on a few rows, cheaper on many. It is priced as the cheaper of the two, and its Fused term
        # adds the difference where the other one runs: its extra where the bias runs alone on many rows (an
        # activation on it then runs alone too, extract/dag.py unfused), its surcharge where the MatMul is chosen on
        # a few. Without the extra a rewrite that leaves the MatMul's class computed by an AddV2 (F27b on
        # ConvNeXt-Tiny: AddV2(MatMul, beta W) then the Dense's BiasAdd) had its exact GELU priced fused and ran
        # three unfused (480 us, 2.5 % slower measured). Without the surcharge a bias that F03 gives a MatMul to
        # read (a scale folded into the weights) was priced fused where it ran alone: Dense layers without bias
        # before a BatchNormalization were predicted 1.047x faster with the scale folded and measured 0.96x
        for i, site in fusion.matmul_bias_sites(exp, device.onednn).items():
            if not is_folded(exp.egraph.nodes[i], const):
                in_shapes, out_shape = node_shapes(exp, i, batch_size, unknown_dim, resolved)
                fused_ms = device.fused_matmul_us * 1e-3 + fused_cost(exp.egraph.nodes[i].op, in_shapes, out_shape,
                                                                      device)
                out[i] = min(costs_ms[i], fused_ms)
                terms[i] = Fused(site.reads, costs_ms[i] - out[i], site.producers, site.partners,
                                 surcharge=fused_ms - out[i])
    return out, terms


def costs(exp: Exported, batch_size: int = 1, device: Device = CPU, fusion: bool = True,
          unknown_dim: int = UNKNOWN_DIM, min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> list[float]:
    """One cost (ms) per e-node of exp.egraph, index-aligned with exp.egraph.nodes, an unknown dim other than the
    batch at unknown_dim, constants of min_variable_elements or more read as the variables the output saves.

    fusion: price the epilogues the runtime fuses into contractions (those of device.fused_contractions), as
    priced() does (without its fusion terms). A form TF's remapper fails on costs fusion.HAZARD_MS more
    (with_hazards): here only where it is not a fusion term's surcharge.
    """
    device = device_named(device)
    if fusion:
        return priced(exp, batch_size, device, unknown_dim, min_variable_elements)[0]
    return with_hazards(exp, _node_costs(exp, batch_size, device, unknown_dim, min_variable_elements), device)[0]


def _node_costs(exp: Exported, batch_size: int, device: Device, unknown_dim: int = UNKNOWN_DIM,
                min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> list[float]:
    """Each e-node priced alone (node_cost)."""
    const = constant_classes(exp.egraph)
    streamed = weights_streamed(exp, device, min_variable_elements)
    out = []
    resolved: dict = {}
    for i, n in enumerate(exp.egraph.nodes):
        if n.op in STRUCTURAL_FREE or is_folded(n, const):
            out.append(0.0)
            continue
        if n.op == "Op":
            out.append(device.overhead_ms("Op"))
            continue
        in_shapes, out_shape = node_shapes(exp, i, batch_size, unknown_dim, resolved)
        out.append(_node_cost_of(n.op, n.payload, None if in_shapes is None else tuple(in_shapes), out_shape,
                                 batch_size, device)
                   + variable_weights_ms(n, in_shapes, const, device, min_variable_elements, streamed))
    return out


@functools.lru_cache(maxsize=1 << 16)
def _node_cost_of(term: str, payload, in_shapes, out_shape, batch_size: int, device: Device) -> float:
    """node_cost, remembered: the saturation probe prices each iteration's e-graph, most of whose e-nodes the previous
    one priced already (node_cost was 0.75 of the 1.2 s of ConvNeXt-Tiny's four pricings, profiled)."""
    return node_cost(term, payload, in_shapes, out_shape, batch_size, device)


def with_hazards(exp: Exported, costs_ms: list[float], device: Device,
                 fused: Optional[dict[int, Fused]] = None) -> tuple[list[float], dict[int, Fused]]:
    """(costs_ms, fused) with fusion.HAZARD_MS added to every form TF's remapper fails on (fusion.remapper_hazards),
    on a device where the remapper fuses a bias-semantic AddV2 (the hazard's form: oneDNN's). The remapper sees the
    form only where the program computes the AddV2's operand with the contraction: where the node has a Fused term
    for that contraction, the hazard is its surcharge (a batch norm's AddV2 after its Mul, in a class that F03 gave a
    MatMul, was charged while the Mul ran: 24 such layers predicted 1.09x faster for F05's BiasAdds, measured 1.00x);
    elsewhere it is a plain price, as the node's fusion terms do not say what runs with it."""
    fused = dict(fused or {})
    if not device.onednn:
        return costs_ms, fused
    out = list(costs_ms)
    for i, sides in sorted(remapper_hazards(exp).items()):
        f = fused.get(i)
        if f is not None and len(sides) == 1 and sides[0] == (f.reads, f.producers):
            fused[i] = dataclasses.replace(f, surcharge=f.surcharge + HAZARD_MS)
        else:
            out[i] += HAZARD_MS
    return out, fused


def predicted_gain(cost_before_ms: float, cost_after_ms: float, device: Device = CPU, calls: int = 1,
                   opaque_ms: float = 0.0) -> float:
    """The speed-up of whole calls that two extraction costs (DAG costs before and after, summed over `calls`
    signatures called once each) predict: the device's fixed cost of a call counts in both, and so does the work of
    the ops the e-graph keeps opaque (`opaque_ms`, cost/opaque.py), which extraction prices at their overhead."""
    call = device_named(device).call_overhead_us * 1e-3 * calls
    return (cost_before_ms + opaque_ms + call) / (cost_after_ms + opaque_ms + call)


def reported_gain(extractions: Sequence[dict], device: Device = CPU) -> Optional[float]:
    """predicted_gain of the tensat pass's report entries (`extraction` of each signature: cost_before, cost_after,
    opaque_ms), one call of each; None when none has both costs."""
    done = [e for e in extractions if e and e.get("cost_before") is not None and e.get("cost_after") is not None]
    if not done or sum(e["cost_after"] for e in done) <= 0:
        return None
    return predicted_gain(sum(e["cost_before"] for e in done), sum(e["cost_after"] for e in done), device,
                          calls=len(done), opaque_ms=sum(e.get("opaque_ms") or 0.0 for e in done))


def priced(exp: Exported, batch_size: int = 1, device: Device = CPU, unknown_dim: int = UNKNOWN_DIM,
           min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> tuple[list[float], dict[int, Fused]]:
    """costs() and the terms of its fused nodes (fusion_terms): what extraction needs."""
    device = device_named(device)
    out, fused = fusion_terms(exp, _node_costs(exp, batch_size, device, unknown_dim, min_variable_elements),
                              batch_size, device, unknown_dim)
    return with_hazards(exp, out, device, fused)

