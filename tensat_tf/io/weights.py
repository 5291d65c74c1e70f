"""Which constants of a frozen graph are weights, and the graph with its weights as placeholders beside their values.

A weight is a Const of at least `min_elements` elements (options.py MIN_VARIABLE_ELEMENTS unless the user chose) that
is not a string and has no control inputs: tensat_tf/io/save.py writes each as a variable, so a served call reads it
rather than holding it as a constant, and TF's runtime neither folds it nor caches a reordered copy of it.

Whoever needs to run a frozen graph (save, verification's baselines) feeds the weights to its placeholders instead of
importing them as constants: importing a graph copies every constant into the function graph, its FunctionDef, the
runtime's optimized copy and the kernels (VGG16 at 64x64, 168 MB of weights: 2 GB more at the first call,
BENCHMARKS.md), while a fed weight is one array.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2


def is_weight(node, min_elements: int) -> bool:
    if node.op != "Const" or any(i.startswith("^") for i in node.input):
        return False
    value = node.attr["value"].tensor
    return value.dtype != types_pb2.DT_STRING and math.prod(d.size for d in value.tensor_shape.dim) >= min_elements


def as_placeholders(graph_def, min_elements: int) -> tuple[tf.compat.v1.GraphDef, dict[str, np.ndarray]]:
    """A copy of `graph_def` whose weights are Placeholders of the same name, dtype and shape (debug info and device
    kept), and {node name: value} in node order. Each weight's bytes are copied once, into its array; the rest of
    the GraphDef (the library's functions keep their constants) is copied as it is."""
    out = tf.compat.v1.GraphDef()
    for field, value in graph_def.ListFields():        # versions, library, debug info: all but the nodes
        if field.name == "node":
            continue
        if field.message_type is None:
            setattr(out, field.name, value)
        else:
            getattr(out, field.name).CopyFrom(value)
    values = {}
    for src in graph_def.node:
        if not is_weight(src, min_elements):
            out.node.add().CopyFrom(src)
            continue
        values[src.name] = tf.make_ndarray(src.attr["value"].tensor)
        node = out.node.add(name=src.name, op="Placeholder", device=src.device)
        if src.HasField("experimental_debug_info"):
            node.experimental_debug_info.CopyFrom(src.experimental_debug_info)
        node.attr["dtype"].type = src.attr["dtype"].type
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(values[src.name].shape).as_proto())
    return out, values
