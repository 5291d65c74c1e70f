"""Typed term -> TF NodeDef(s): the one place that turns an op-table entry plus literal values into TF nodes.

Used by the emitter (new nodes of the optimized graph, and the graph that computes its folded constants: evaluate)
and by the measured cost model (timing one op). Folded Const inputs (axis, perm, shape, split sizes) become int32
Const nodes named `<node>/<literal>`.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tensat_tf import ops


def set_attr(node, name: str, kind: str, value) -> None:
    a = node.attr[name]
    if kind == "bool":
        a.b = bool(value)
    elif kind == "int":
        a.i = int(value)
    elif kind == "str":
        a.s = value.encode()
    elif kind == "float":
        a.f = float(value)
    else:
        a.list.i.extend(int(v) for v in value)


def int_const(name: str, value) -> tf.compat.v1.NodeDef:
    node = tf.compat.v1.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = tf.int32.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(value, dtype=np.int32)))
    return node


def build(spec: ops.OpSpec, payload: tuple, name: str, in_names: list[str],
          dtype: tf.DType) -> tuple[tf.compat.v1.NodeDef, list[tf.compat.v1.NodeDef]]:
    """The NodeDef for term `spec` with literal values `payload` (term order) reading tensors `in_names`.

    Returns (node, const_nodes): the Const nodes of folded inputs must be added to the graph too.
    A variadic op (ConcatV2) takes any number >= 2 of tensor inputs.
    """
    node = tf.compat.v1.NodeDef(name=name, op=spec.tf_op)
    values = dict(zip((n for n, _ in spec.literals), payload))
    if spec.symbolic_target:
        return _reshape_to(node, values["out_shape"], in_names, dtype)
    for a in spec.attrs:
        set_attr(node, a.name, a.kind, values[a.name])
    node.attr["T"].type = dtype.as_datatype_enum
    n_in = len(in_names) + len(spec.const_inputs)
    consts, extra = {}, []
    position = {c.name: p for p, c in spec.const_slots(n_in).items()}
    for c in spec.const_inputs:
        value = values[c.name]
        if c.kind == "pairs":
            value = [value[i:i + 2] for i in range(0, len(value), 2)]
        const = int_const(f"{name}/{c.name}", value)
        extra.append(const)
        consts[position[c.name]] = const.name
    it = iter(in_names)
    node.input.extend(consts[p] if p in consts else next(it) for p in range(n_in))
    if spec.variadic:
        node.attr["N"].i = len(in_names)
    for attr in spec.index_type_attrs:
        node.attr[attr].type = tf.int32.as_datatype_enum
    for attr in spec.same_type_attrs:
        node.attr[attr].type = dtype.as_datatype_enum
    for attr, value in spec.fixed_attrs:
        node.attr[attr].i = value
    return node, extra


def _reshape_to(node, out_shape, in_names: list[str], dtype: tf.DType):
    """ReshapeS: in_names is [x] (the target a Const of out_shape, which must then be concrete but for one -1: rule
    tests, folded classes, the measured cost model) or [x, target] (the emitter's run-time target where out_shape
    holds symbols: tensat_tf/shape_values.py)."""
    extra = []
    if len(in_names) == 1:
        dims = [int(d) for d in out_shape]
        if any(d < -1 for d in dims) or dims.count(-1) > 1:
            raise ValueError(f"reshape to {dims} needs a run-time target (its symbols come from the graph inputs)")
        extra.append(int_const(f"{node.name}/shape", dims))
        in_names = [in_names[0], extra[0].name]
    node.input.extend(in_names)
    node.attr["T"].type = dtype.as_datatype_enum
    node.attr["Tshape"].type = tf.int32.as_datatype_enum
    return node, extra


def scalar_const(name: str, value: float, dtype: tf.DType) -> tf.compat.v1.NodeDef:
    node = tf.compat.v1.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = dtype.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(value, dtype=dtype.as_numpy_dtype)))
    return node


def evaluate(gd, feeds: dict, fetches: list[str]) -> list:
    """Run GraphDef `gd` once in a fresh graph: feeds {placeholder name: array} (the Placeholders are added here),
    fetches tensor names ("n:k"), or node names for all of a node's outputs (a list each)."""
    full = tf.compat.v1.GraphDef()
    for name, x in feeds.items():
        ph = full.node.add(name=name, op="Placeholder")
        ph.attr["dtype"].type = tf.as_dtype(np.asarray(x).dtype).as_datatype_enum
    full.node.extend(gd.node)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(full, name="")
    want = [g.get_tensor_by_name(f) if ":" in f else g.get_operation_by_name(f).outputs for f in fetches]
    with tf.compat.v1.Session(graph=g, config=_config()) as sess:
        return sess.run(want, {g.get_tensor_by_name(f"{k}:0"): x for k, x in feeds.items()})


def _config():
    # Grappler off: the ops are evaluated one by one as written (a rewrite of its own between them, such as an
    # arithmetic-optimizer reassociation, could change the values), and it would only cost time here.
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config
