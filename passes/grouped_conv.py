"""Grouped convolutions, compiled by XLA in a function call -> DepthwiseConv2dNative, or the call inlined.

Keras 3 runs a Conv2D with `groups > 1` on CPU (where TF's Eigen kernels cannot fuse one) as a call to a
`jit_compile=True` function (`StatefulPartitionedCall`, `_XlaMustCompile`, `_noinline`): one Conv2D whose filter's
input depth is the input's channels / groups. Freezing and Grappler keep the call (it must not be inlined), the
e-graph sees one opaque node, and XLA's CPU grouped convolution is slow: a 7x7 one on [1,56,56,96] takes 34 ms against
0.95 ms for TF's DepthwiseConv2dNative computing the same values (one thread; 21-27x on ConvNeXt-Tiny's four stage
shapes, maximum difference 6e-6; BENCHMARKS.md). ConvNeXt's 7x7 "depthwise" convolutions are written this way, and
they were 47 of its 72 ms.

When the filter's input depth is 1 (groups = the input's channels C) and it has M = C * m output channels, the grouped
convolution IS a depthwise convolution with multiplier m: grouped output channel g * m + j reads input channel g
through filter[:, :, 0, g * m + j], the depthwise output channel c * m + j reads channel c through
dw_filter[:, :, c, j], and in row-major order the [kh, kw, 1, C*m] filter and the [kh, kw, C, m] one are the same
array. So the call becomes DepthwiseConv2dNative(x, reshape(filter)), same name (its consumers are unchanged),
same strides, padding and dilations. Only when all of this is known: a float32 NHWC Conv2D alone in the function
(Identity nodes aside), a constant filter, the input's channel count static, equal row and column strides
(DepthwiseConv2dNative's requirement), SAME or VALID padding.

Where TF runs a grouped Conv2D itself (`native_groups`: oneDNN's CPU kernels, cuDNN; cost/devices.py
Device.grouped_conv), every other such call is inlined: its body's nodes take the call's place, the call's name
going to the node that computes its output (so its consumers are unchanged). Keras' XLA function holds the Conv2D
alone, or with ExpandDims / Squeeze (Conv1D) or SpaceToBatchND / BatchToSpaceND (a dilation) and their operands,
constants or, where the input's spatial dims are dynamic, computed from its shape; a body with anything else keeps
its call. oneDNN runs the grouped Conv2D, and fuses its bias and
activation, 1.8-16x faster than XLA's CPU code at every ResNeXt / RegNet shape measured (`python
tools/bench_forms.py --experiments=grouped_conv`, BENCHMARKS.md). Without oneDNN, TF's Eigen Conv2D computes groups
but its fused form refuses them ("Fused conv implementation does not support grouped convolutions"), and the remapper
fuses any BiasAdd after the conv: there the call is kept.

A Grappler-style pass, run after canonicalize (which has turned the filter's Identity chain into a Const): the
e-graph then sees a typed depthwise convolution, or a typed grouped Conv2D, its rules and cost model know (bias
folds, fused kernels).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import function_def_to_graph

from tensat_tf import ops, symbolic
from tensat_tf.egraph import nodedef
from tensat_tf.item import GrapplerItem, source

name = "grouped_conv"

CALLS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
# what Keras' XLA function around one grouped Conv2D may hold besides it, all of which TF runs natively: Conv1D's
# ExpandDims / Squeeze, a dilation's SpaceToBatchND / BatchToSpaceND, and where the input's spatial dims are dynamic
# the integer arithmetic of their paddings and crops
INLINED_OPS = frozenset({"Conv2D", "ExpandDims", "Squeeze", "SpaceToBatchND", "BatchToSpaceND", "Const", "Identity",
                         "NoOp", "Shape", "StridedSlice", "Pack", "FloorMod", "AddV2", "Sub"})


def _conv_of(fn) -> Optional[tuple]:
    """(Conv2D node, index of the function argument it convolves, index of its filter argument) when the function
    body is one Conv2D (Identity and NoOp nodes aside: the variable read's control plumbing) whose output is the
    function's only output; else None."""
    body = [n for n in fn.node_def if n.op not in ("Identity", "NoOp")]
    if len(body) != 1 or body[0].op != "Conv2D" or len(fn.signature.output_arg) != 1:
        return None
    conv = body[0]
    by_name = {n.name: n for n in fn.node_def}
    args = [a.name for a in fn.signature.input_arg]

    def arg_of(ref: str) -> Optional[int]:
        """The argument a node input reads, through Identity nodes."""
        while True:
            base = ref.split(":")[0]
            if base in args:
                return args.index(base)
            n = by_name.get(base)
            if n is None or n.op != "Identity" or len(n.input) != 1:
                return None
            ref = n.input[0]

    out = fn.ret[fn.signature.output_arg[0].name].split(":")[0]
    while out != conv.name:
        n = by_name.get(out)
        if n is None or n.op != "Identity":
            return None
        out = n.input[0].split(":")[0]
    data, filt = arg_of(conv.input[0]), arg_of(conv.input[1])
    if data is None or filt is None or any(i.startswith("^") for i in conv.input):
        return None
    return conv, data, filt


def _const_value(nodes: dict, ref: str) -> Optional[np.ndarray]:
    """The value of a Const a graph input reads, through Identity nodes."""
    n = source(nodes, ref)
    if n is None or n.op != "Const":
        return None
    return tf.make_ndarray(n.attr["value"].tensor)


def _depthwise(call, conv, data_ref: str, filt: np.ndarray, channels: int, filter_name: str):
    """-> (the filter Const, the DepthwiseConv2dNative replacing `call`), or None when `conv` is not depthwise."""
    a = conv.attr
    strides = list(a["strides"].list.i)
    dilations = list(a["dilations"].list.i) or [1, 1, 1, 1]
    fmt = a["data_format"].s.decode() if "data_format" in a else "NHWC"
    padding = a["padding"].s.decode()
    if (a["T"].type != tf.float32.as_datatype_enum or fmt != "NHWC" or padding not in ("SAME", "VALID")
            or filt.dtype != np.float32 or filt.ndim != 4 or filt.shape[2] != 1 or channels <= 1
            or filt.shape[3] % channels or len(strides) != 4 or strides[1] != strides[2]
            or strides[0] != 1 or strides[3] != 1 or dilations[0] != 1 or dilations[3] != 1):
        return None
    kh, kw, _, m_total = filt.shape
    const = tf.compat.v1.NodeDef(name=filter_name, op="Const")
    const.attr["dtype"].type = tf.float32.as_datatype_enum
    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(filt.reshape(kh, kw, channels, m_total // channels)))
    # the emitter's own builder (attributes as the e-graph's DepthwiseConv2dNative term writes them)
    dw, _ = nodedef.build(ops.BY_TERM["DepthwiseConv2dNative"], (tuple(strides), padding, tuple(dilations)),
                          call.name, [data_ref, filter_name], tf.float32)
    dw.device = call.device
    dw.input.extend(i for i in call.input if i.startswith("^"))
    return const, dw


def _channels(graph_def, refs: list) -> dict:
    """ref -> its static last dim (None when unknown or not rank 4), from TF's shape inference on the graph without
    its weights (symbolic.tf_inferred)."""
    _, shapes = symbolic.tf_inferred(graph_def)
    out = {}
    for ref in refs:
        dims = shapes.get(symbolic.tensor_ref(ref))
        out[ref] = dims[-1] if dims is not None and len(dims) == 4 and dims[-1] >= 0 else None
    return out


def _inlined(call, fn, data_inputs: list, taken: set) -> Optional[list]:
    """The nodes of `fn`'s body in `call`'s place: each named under the call's name, the one computing the output by
    the call's own name; the function's arguments read where the call's inputs come from. None when the body holds
    anything but INLINED_OPS around one float32 NHWC Conv2D, has another output than the first of one node, or a
    new name is taken."""
    convs = [n for n in fn.node_def if n.op == "Conv2D"]
    if (len(fn.signature.output_arg) != 1 or len(convs) != 1 or any(n.op not in INLINED_OPS for n in fn.node_def)
            or convs[0].attr["T"].type != tf.float32.as_datatype_enum
            or convs[0].attr["data_format"].s not in (b"", b"NHWC")):
        return None
    body, flat = function_def_to_graph.function_def_to_graph_def(fn)
    args = dict(zip((a.name for a in fn.signature.input_arg), data_inputs))
    by_name = {n.name: n for n in body.node}

    def through_identity(ref: str) -> tuple[str, str]:
        base, _, index = ref.lstrip("^").partition(":")
        while base in by_name and by_name[base].op == "Identity":
            base, _, index = by_name[base].input[0].lstrip("^").partition(":")
        return base, index or "0"

    out, out_index = through_identity(flat[fn.ret[fn.signature.output_arg[0].name]])
    if out not in by_name or by_name[out].op in ("Placeholder", "NoOp") or out_index != "0":
        return None

    def renamed(base: str) -> str:
        return call.name if base == out else f"{call.name}/{base}"

    def resolved(ref: str) -> Optional[str]:
        """A body input as the graph names it (None: a control edge on a NoOp, which goes)."""
        base, index = through_identity(ref)
        if base in args:
            target = args[base]
            return "^" + target.split(":")[0] if ref.startswith("^") else target
        if by_name[base].op == "NoOp":
            return None
        if ref.startswith("^"):
            return "^" + renamed(base)
        return renamed(base) if index == "0" else f"{renamed(base)}:{index}"

    made = []
    for n in body.node:
        if n.op in ("Placeholder", "Identity", "NoOp"):
            continue
        name = renamed(n.name)
        if name != call.name and name in taken:
            return None
        node = tf.compat.v1.NodeDef(name=name, op=n.op, device=call.device)
        node.input.extend(r for r in map(resolved, n.input) if r is not None)
        node.input.extend(i for i in call.input if i.startswith("^"))
        for key, value in n.attr.items():
            if not key.startswith("_"):         # the function's bookkeeping (_output_shapes, _user_specified_name)
                node.attr[key].CopyFrom(value)
        made.append(node)
    return made


def optimize(graph_def, item: GrapplerItem, native_groups: bool = False):
    """Depthwise grouped-conv calls -> DepthwiseConv2dNative; with `native_groups`, every other one inlined."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    nodes = {n.name: n for n in graph_def.node}
    calls, depthwise = [], {}
    for n in graph_def.node:
        fn = functions.get(n.attr["f"].func.name) if n.op in CALLS else None
        data_inputs = [i for i in n.input if not i.startswith("^")]
        if fn is None or len(data_inputs) != len(fn.signature.input_arg):
            continue
        calls.append((n, fn, data_inputs))
        conv = _conv_of(fn)
        filt = _const_value(nodes, data_inputs[conv[2]]) if conv is not None else None
        if filt is not None:
            depthwise[n.name] = (conv[0], data_inputs[conv[1]], filt)
    if not calls or not (depthwise or native_groups):
        return graph_def
    channels = _channels(graph_def, [data for _, data, _ in depthwise.values()]) if depthwise else {}
    taken = set(nodes)
    replaced: dict[str, list] = {}
    for call, fn, data_inputs in calls:
        made = None
        if call.name in depthwise:
            conv, data, filt = depthwise[call.name]
            filter_name = call.name + "/depthwise_filter"
            if filter_name not in taken and channels[data] is not None:
                made = _depthwise(call, conv, data, filt, channels[data], filter_name)
        if made is None and native_groups:
            made = _inlined(call, fn, data_inputs, taken)
        if made is not None:
            replaced[call.name] = list(made)
            taken.update(n.name for n in made)
    if not replaced:
        return graph_def
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    for n in graph_def.node:
        if n.name in replaced:
            out.node.extend(replaced[n.name])
        else:
            out.node.add().CopyFrom(n)
    # a function only the replaced calls used goes with them
    gone = {call.attr["f"].func.name for call, _, _ in calls if call.name in replaced}
    still = {n.attr["f"].func.name for n in out.node if n.op in CALLS}
    still |= {v.func.name for f in graph_def.library.function for nd in f.node_def for v in nd.attr.values()
              if v.HasField("func")}
    out.library.CopyFrom(graph_def.library)
    del out.library.function[:]
    out.library.function.extend(f for f in graph_def.library.function
                                if f.signature.name not in gone or f.signature.name in still)
    return out


class Pass:
    """This pass for the device the output is served on: `native_groups` where its TF runs a grouped Conv2D itself
    (cost/devices.py Device.grouped_conv)."""
    name = name

    def __init__(self, native_groups: bool):
        self.native_groups = native_groups

    def optimize(self, graph_def, item: GrapplerItem):
        return optimize(graph_def, item, self.native_groups)
