"""Activations that TF's remapper would fail on, written in an equal form it leaves alone (a Grappler-style pass, run
last).

TF 2.21's remapper (tensorflow/core/grappler/optimizers/remapper.cc, oneDNN build) fuses
`Conv2D -> BiasAdd -> Add -> Relu` into one _FusedConv2D that replaces the activation, and deletes the Add. Its
matcher (FindContractionWithBiasAndAddActivation) checks that the BiasAdd has one reader, not that the Add has: where
the Add's sum is also read by another node, the rewrite deletes a node that node still reads, and the whole remapper
pass fails ("Mutation::Apply error: fanout ... exist for missing node ..."). TF logs the error and runs the function
without any of the remapper's rewrites: every conv's bias and activation then run as separate kernels. Found on
NASNet-Mobile after rule F02 folded its batch norms into the separable convs' pointwise convs: its reduction cells
add two branches, and the sum feeds both a ReLU and an average pool. Reproduced with ten nodes (a conv, a conv with
a bias, their sum, a ReLU of it and a pool of it): the served SavedModel logs the failure on its first call, and
runs its conv + bias as _MklNativeConv2DWithBias (the layout pass's fallback) next to a separate AddV2 and Relu.

Offline Grappler (tensat_tf/grappler.py runtime_error, the tensat pass's check) does not reproduce it: on the same
graph it fuses conv + bias + add + ReLU and keeps the Add. So the guard is structural: where an activation the
pattern takes (Relu, Relu6, LeakyRelu) reads a two-input Add whose other reader makes the fusion unsafe, and one of
the Add's inputs is a bias (BiasAdd, or AddV2 by a vector) with no other reader on a convolution or matmul, the
activation is written as Maximum(x, 0), ClipByValue(x, 0, 6) or Maximum(x, alpha * x), under its own name. Those are
not activations to the remapper, which then fuses conv + bias + add (ContractionWithBiasAddAndAdd: the Add's value is
the fused kernel's output, read by both) and leaves the activation a separate op, as it must be: its input has two
readers. It costs nothing the remapper would otherwise have fused (measured on NASNet-Mobile: BENCHMARKS.md).
"""
from __future__ import annotations

import collections

import tensorflow as tf

from tensat_tf.item import GrapplerItem, node_name, source
from tensat_tf.shape_values import const_node, unique

name = "remapper_guard"

ADDS = frozenset({"Add", "AddV2", "AddN"})
CONTRACTIONS = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul"})
# the activations FindContractionWithBiasAndAddActivation takes with oneDNN (it refuses Tanh and Sigmoid); Elu has
# no equal form here and is left alone
ACTIVATIONS = frozenset({"Relu", "Relu6", "LeakyRelu"})
FLOATS = frozenset({tf.float32.as_datatype_enum, tf.bfloat16.as_datatype_enum})


def _readers(graph_def, item: GrapplerItem) -> collections.Counter:
    """node name -> how many times its output 0 is read (data inputs and fetches; control inputs are not reads)."""
    count = collections.Counter()
    for n in graph_def.node:
        for ref in n.input:
            if not ref.startswith("^") and ref.split(":")[1:] in ([], ["0"]):
                count[node_name(ref)] += 1
    for t in item.fetches:
        if t.split(":")[1:] in ([], ["0"]):
            count[node_name(t)] += 1
    return count


def _is_bias_on_contraction(nodes: dict, node, readers: collections.Counter) -> bool:
    if node is None or readers[node.name] != 1 or len([i for i in node.input if not i.startswith("^")]) != 2:
        return False
    if node.op == "BiasAdd":
        producer = source(nodes, node.input[0])
        return producer is not None and producer.op in CONTRACTIONS
    if node.op in ("Add", "AddV2"):      # oneDNN's bias-semantic Add: either operand may be the contraction
        return any((p := source(nodes, ref)) is not None and p.op in CONTRACTIONS for ref in node.input[:2])
    return False


def hazards(graph_def, item: GrapplerItem) -> list[str]:
    """The activation nodes TF's remapper would fail on (module docstring), in graph order."""
    nodes = {n.name: n for n in graph_def.node}
    readers = _readers(graph_def, item)
    out = []
    for n in graph_def.node:
        if n.op not in ACTIVATIONS or n.attr["T"].type not in FLOATS or any(i.startswith("^") for i in n.input):
            continue
        add = source(nodes, n.input[0])
        if add is None or add.op not in ADDS or readers[add.name] < 2:
            continue
        data = [i for i in add.input if not i.startswith("^")]
        if len(data) != 2 or len(data) != len(add.input):
            continue
        if any(_is_bias_on_contraction(nodes, source(nodes, ref), readers) for ref in data):
            out.append(n.name)
    return out


def _rewrite(act, taken: set) -> list:
    """The NodeDefs that compute `act` without an activation op, the last one under act's name."""
    dtype = tf.as_dtype(act.attr["T"].type)
    x = act.input[0]

    def const(suffix: str, value: float):
        nm = unique(f"{act.name}/tensat_{suffix}", taken)
        taken.add(nm)
        node = const_node(nm, [value], dtype, scalar=True)
        node.device = act.device
        return node

    def op(nm: str, kind: str, inputs: list):
        node = tf.compat.v1.NodeDef(name=nm, op=kind, input=inputs, device=act.device)
        node.attr["T"].type = dtype.as_datatype_enum
        return node

    if act.op == "Relu":
        zero = const("zero", 0.0)
        return [zero, op(act.name, "Maximum", [x, zero.name])]
    if act.op == "Relu6":
        zero, six = const("zero", 0.0), const("six", 6.0)
        return [zero, six, op(act.name, "ClipByValue", [x, zero.name, six.name])]
    alpha = act.attr["alpha"].f if "alpha" in act.attr else 0.2        # LeakyRelu's registered default
    a = const("alpha", alpha)
    scaled = unique(f"{act.name}/tensat_scaled", taken)
    taken.add(scaled)
    # max(x, alpha x) is leaky ReLU for 0 <= alpha <= 1 only; outside that range the node is kept (_guardable)
    return [a, op(scaled, "Mul", [x, a.name]), op(act.name, "Maximum", [x, scaled])]


def _guardable(act) -> bool:
    return act.op != "LeakyRelu" or 0.0 <= (act.attr["alpha"].f if "alpha" in act.attr else 0.2) <= 1.0


def optimize(graph_def, item: GrapplerItem):
    found = {nm for nm in hazards(graph_def, item)}
    if not found:
        return graph_def
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    taken = {n.name for n in graph_def.node}
    for n in graph_def.node:
        if n.name in found and _guardable(n):
            out.node.extend(_rewrite(n, taken))
        else:
            out.node.add().CopyFrom(n)
    return out
