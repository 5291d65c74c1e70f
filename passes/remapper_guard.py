"""Activations, and depthwise convs' biases, that TF's remapper would fail on, written in an equal form it leaves alone
(a Grappler-style pass, run last).

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
graph it fuses the conv and its bias only, with the batch dim unknown or set to 1. It fails the same way only where
its shape inference proves the Add's two shapes equal (static H and W: Xception's residual chain after rule F39,
tests/test_remapper_guard.py), and is silent otherwise. So the guard is structural: where
an activation the pattern takes (Relu, Relu6, Elu, LeakyRelu) reads a two-input Add whose other reader makes the
fusion unsafe, and one of the Add's inputs is a bias (BiasAdd, or AddV2 by a tensor) with no other reader on a
convolution or matmul, the activation is written in an equal form under its own name: Relu as Maximum(x, 0), Relu6 as
ClipByValue(x, 0, 6), Elu as SelectV2(x > 0, x, Expm1(x)) and LeakyRelu as SelectV2(x > 0, x, alpha x), the values
TF's kernels compute. Not Maximum(x, alpha x) for LeakyRelu: the remapper turns that back into a LeakyRelu
(FindMulAndMaximum) and fails again (a review's served check). The remapper then fuses conv + bias + add
(ContractionWithBiasAddAndAdd, whose output both readers take) and leaves the activation a separate op, as it must
be: its input has two readers. On NASNet-Mobile this costs nothing measurable and saves nothing measurable either
(BENCHMARKS.md, "A remapper failure in NASNet-Mobile's output"); where the lost fusions are swishes or GELUs it is the
difference between a fused and an unfused model.

A second failure, of the same remapper on depthwise convs: `DepthwiseConv2dNative -> BiasAdd -> Add` (AddV2, Add or
AddN; a residual sum, with or without an activation after it) where the BiasAdd's only reader is the add. The
remapper leaves a node without an op in the function, whose graph then fails to import into TFG ("Node ... has an
empty op name", tfg_optimizer_hook.cc), and TF runs the function without any of Grappler's rewrites ("Ignoring
multi-device function optimization failure"). A Keras DepthwiseConv2D with a bias before a residual Add fails so in
TF itself, and passes/grouped_conv.py writes that pattern for a grouped conv of groups = channels (a helper's sweep,
BENCHMARKS.md). Such a BiasAdd is written as an AddV2 of the same bias under its own name (the same values: TF's
BiasAdd is that broadcast add); the remapper then fuses nothing into that depthwise conv and the bias runs as its own
kernel, which the served function's other fusions are worth many times over.
"""
from __future__ import annotations

import collections

import tensorflow as tf

from tensat_tf.item import GrapplerItem, node_name, source
from tensat_tf.shape_values import const_node, unique

name = "remapper_guard"

ADDS = frozenset({"Add", "AddV2", "AddN"})
CONTRACTIONS = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul"})
# the activations FindContractionWithBiasAndAddActivation takes with oneDNN (it refuses Tanh and Sigmoid)
ACTIVATIONS = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu"})
FLOATS = frozenset({tf.float32.as_datatype_enum, tf.bfloat16.as_datatype_enum})
LEAKY_RELU_ALPHA = 0.2          # LeakyRelu's registered default, when the NodeDef leaves the attribute out


def _direct_readers(graph_def) -> dict:
    """node name -> the nodes whose data inputs read its output 0."""
    direct = collections.defaultdict(list)
    for n in graph_def.node:
        for ref in n.input:
            if not ref.startswith("^") and ref.split(":")[1:] in ([], ["0"]):
                direct[node_name(ref)].append(n)
    return direct


def _readers(graph_def, item: GrapplerItem) -> dict:
    """node name -> how many nodes read its output 0 (data inputs and fetches; control inputs are not reads), an
    Identity's readers counted in its place (Grappler removes the Identity before the remapper runs)."""
    direct = _direct_readers(graph_def)
    fetched = collections.Counter(node_name(t) for t in item.fetches if t.split(":")[1:] in ([], ["0"]))
    memo: dict = {}

    def count(name: str) -> int:
        if name not in memo:
            memo[name] = 0          # a cycle through Identity nodes cannot occur in a GraphDef that imports
            memo[name] = fetched[name] + sum(count(r.name) if r.op == "Identity" else 1 for r in direct[name])
        return memo[name]

    return {n.name: count(n.name) for n in graph_def.node}


def _is_bias_on_contraction(nodes: dict, node, readers: dict) -> bool:
    if node is None or readers.get(node.name) != 1 or len([i for i in node.input if not i.startswith("^")]) != 2:
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
        if n.op not in ACTIVATIONS or "T" not in n.attr or n.attr["T"].type not in FLOATS \
                or any(i.startswith("^") for i in n.input):
            continue
        add = source(nodes, n.input[0])
        if add is None or add.op not in ADDS or readers.get(add.name, 0) < 2:
            continue
        data = [i for i in add.input if not i.startswith("^")]
        if len(data) != 2 or len(data) != len(add.input):
            continue
        if any(_is_bias_on_contraction(nodes, source(nodes, ref), readers) for ref in data):
            out.append(n.name)
    return out


def depthwise_bias_hazards(graph_def, item: GrapplerItem) -> list[str]:
    """The BiasAdd nodes on a DepthwiseConv2dNative whose only reader is an add (module docstring), in graph order."""
    nodes = {n.name: n for n in graph_def.node}
    readers, direct = _readers(graph_def, item), _direct_readers(graph_def)
    out = []
    for n in graph_def.node:
        if n.op != "BiasAdd" or readers.get(n.name) != 1 or [r.op in ADDS for r in direct[n.name]] != [True] \
                or n.attr["data_format"].s not in (b"", b"NHWC"):
            continue
        conv = source(nodes, n.input[0])
        if conv is not None and conv.op == "DepthwiseConv2dNative":
            out.append(n.name)
    return out


def _as_add(bias_add):
    """A BiasAdd as the AddV2 of the same two inputs, under its name (NHWC: the bias broadcasts over the last dim)."""
    node = tf.compat.v1.NodeDef(name=bias_add.name, op="AddV2", input=bias_add.input, device=bias_add.device)
    node.attr["T"].CopyFrom(bias_add.attr["T"])
    return node


def _rewrite(act, taken: set) -> list:
    """The NodeDefs that compute `act` without an activation op the remapper knows, the last under act's name."""
    dtype = tf.as_dtype(act.attr["T"].type)
    x = act.input[0]

    def fresh(suffix: str) -> str:
        nm = unique(f"{act.name}/tensat_{suffix}", taken)
        taken.add(nm)
        return nm

    def const(suffix: str, value: float):
        node = const_node(fresh(suffix), [value], dtype, scalar=True)
        node.device = act.device
        return node

    def op(nm: str, kind: str, inputs: list):
        node = tf.compat.v1.NodeDef(name=nm, op=kind, input=inputs, device=act.device)
        node.attr["T"].type = dtype.as_datatype_enum
        return node

    zero = const("zero", 0.0)
    if act.op == "Relu":
        return [zero, op(act.name, "Maximum", [x, zero.name])]
    if act.op == "Relu6":
        six = const("six", 6.0)
        return [zero, six, op(act.name, "ClipByValue", [x, zero.name, six.name])]
    positive = op(fresh("positive"), "Greater", [x, zero.name])
    if act.op == "Elu":
        negative = op(fresh("expm1"), "Expm1", [x])
        return [zero, positive, negative, op(act.name, "SelectV2", [positive.name, x, negative.name])]
    alpha = const("alpha", act.attr["alpha"].f if "alpha" in act.attr else LEAKY_RELU_ALPHA)
    negative = op(fresh("scaled"), "Mul", [x, alpha.name])
    return [zero, alpha, positive, negative, op(act.name, "SelectV2", [positive.name, x, negative.name])]


def optimize(graph_def, item: GrapplerItem):
    found, biases = set(hazards(graph_def, item)), set(depthwise_bias_hazards(graph_def, item))
    if not found and not biases:
        return graph_def
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    taken = {n.name for n in graph_def.node}
    for n in graph_def.node:
        if n.name in found:
            out.node.extend(_rewrite(n, taken))
        elif n.name in biases:
            out.node.append(_as_add(n))
        else:
            out.node.add().CopyFrom(n)
    return out
