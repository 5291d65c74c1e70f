"""How large verification's random integers may be for each integer input: the rows of the tables it indexes.

Verification drew every integer input from {0, 1}, the one range valid for any table (a token id of 7 on a 5-row
embedding makes the original itself fail). Token ids then only ever read an embedding's first two rows, so a rewrite
that broke the others (a gather off by a row, a slice of the table, a wrong fold into one of its rows) would pass.
Here the bound of an input is the smallest first dim of the tables its values index: the input is followed through
ops whose output values are among their input's (Identity, Cast, Reshape, slices, the data operands of a select:
Keras' negative-index handling in `ops.take` selects between the id and id + rows), to the index operand of GatherV2
/ Gather / ResourceGather (the table's dim at the gather's axis) or OneHot (its depth).

An input whose bound cannot be read for every table it reaches (a table that is not a constant, a dynamic axis), or
that reaches none, keeps {0, 1}. The bound comes from the graph alone, so convert checks it on the original before
it is used (verify.check_original: where the original refuses these draws, the input keeps {0, 1}).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util

from tensat_tf.io.load import TensorSpec
from tensat_tf.item import source

# op -> the operand indices whose values the output carries (a subset, rearranged)
_CARRY = {
    "Identity": (0,), "Cast": (0,), "Reshape": (0,), "ExpandDims": (0,), "Squeeze": (0,), "StridedSlice": (0,),
    "Slice": (0,), "Transpose": (0,), "Tile": (0,), "ReverseV2": (0,), "BroadcastTo": (0,), "SelectV2": (1, 2),
    "Select": (1, 2),
}
_GATHERS = ("GatherV2", "Gather", "ResourceGather")


def _ref(name: str) -> str:
    """A tensor's name as node inputs spell it ('x' for 'x:0')."""
    return name[:-2] if name.endswith(":0") else name


def _const_node(nodes: dict, ref: str):
    """The Const node behind Identity nodes from `ref`, or None."""
    node = source(nodes, ref)
    return node if node is not None and node.op == "Const" else None


def _const(nodes: dict, ref: str) -> Optional[np.ndarray]:
    node = _const_node(nodes, ref)
    return None if node is None else tensor_util.MakeNdarray(node.attr["value"].tensor)


def _const_shape(nodes: dict, ref: str) -> Optional[list[int]]:
    """Read from the Const's proto, without copying its values (an embedding of 50,257 rows)."""
    node = _const_node(nodes, ref)
    return None if node is None else [d.size for d in node.attr["value"].tensor.tensor_shape.dim]


def _bound(nodes: dict, node, operand: int) -> Optional[int]:
    """The number of valid index values of `node`'s operand, where it is an index operand; None otherwise, -1 where
    it is one but its bound cannot be read."""
    if node.op in _GATHERS and operand == 1:
        shape = _const_shape(nodes, node.input[0])
        if node.op == "GatherV2":
            axis = _const(nodes, node.input[2])
            if axis is None or axis.size != 1:
                return -1
            axis = int(axis.reshape(()))
        else:
            axis = 0
        if shape is None or not -len(shape) <= axis < len(shape):
            return -1
        return shape[axis] if shape[axis] >= 0 else -1
    if node.op == "OneHot" and operand == 0:
        depth = _const(nodes, node.input[1])
        return int(depth.reshape(())) if depth is not None and depth.size == 1 else -1
    return None


def highs(graph_def, inputs: Sequence[TensorSpec]) -> dict[str, int]:
    """{input key: exclusive upper bound of its random values} for the integer inputs whose values index tables
    (module docstring); the others are left out."""
    nodes = {n.name: n for n in graph_def.node}
    readers = defaultdict(list)             # tensor ref -> [(node, operand index)]
    for node in graph_def.node:
        for i, name in enumerate(node.input):
            if not name.startswith("^"):
                readers[name].append((node, i))
    out = {}
    for spec in inputs:
        if not spec.dtype.is_integer:
            continue
        bounds, seen, todo = [], set(), [_ref(spec.tensor)]
        while todo:
            ref = todo.pop()
            for node, i in readers.get(ref, ()):
                if (node.name, i) in seen:
                    continue
                seen.add((node.name, i))
                bound = _bound(nodes, node, i)
                if bound is not None:
                    bounds.append(bound)
                elif i in _CARRY.get(node.op, ()):
                    if node.op == "Cast" and not tf.as_dtype(node.attr["DstT"].type).is_integer:
                        continue
                    todo.append(node.name)
        if bounds and min(bounds) > 0:
            out[spec.key] = min(bounds)
    return out

