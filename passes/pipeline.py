"""Runs Grappler-style passes in order, checking invariants after each one.

Invariants: the graph imports (so it is acyclic and well formed), every fetch is still there with the same dtype and
a compatible shape, and no op is internal (`_`-prefixed ops have no compatibility guarantee and tf2onnx cannot
convert them). A pass that fails or breaks an invariant is undone: the pipeline continues from its input graph and
records why.
"""
from __future__ import annotations

import dataclasses
import math
import time

import tensorflow as tf

from tensat_tf.item import GrapplerItem


@dataclasses.dataclass
class PassResult:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int
    ok: bool
    error: str = ""


# A floating Const of at least this many elements is imported as a Placeholder of its dtype and shape (_light).
LIGHT_CONST_ELEMENTS = 1024


def _light(graph_def):
    """graph_def with its large floating constants as placeholders of the same dtype and static shape. Importing it
    checks what the invariants need (structure, op registrations, dtypes, inferred shapes: a shape function reads a
    constant's value only for shape-like inputs, small integer tensors) without copying the weights: importing
    Inception-ResNet-v2's 224 MB output took 0.8 s, a sixth of its tensat stage in `convert`."""
    floating = {tf.float16.as_datatype_enum, tf.bfloat16.as_datatype_enum, tf.float32.as_datatype_enum,
                tf.float64.as_datatype_enum}
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        shape = n.attr["value"].tensor.tensor_shape if n.op == "Const" else None
        if shape is not None and n.attr["dtype"].type in floating and not shape.unknown_rank \
                and math.prod(d.size for d in shape.dim) >= LIGHT_CONST_ELEMENTS:
            m = out.node.add(name=n.name, op="Placeholder", device=n.device, input=n.input)
            m.attr["dtype"].CopyFrom(n.attr["dtype"])
            m.attr["shape"].shape.CopyFrom(shape)
        else:
            out.node.add().CopyFrom(n)
    return out


def _signature(graph_def, item: GrapplerItem):
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(_light(graph_def), name="")
    out = []
    for name in item.feeds + item.fetches:
        t = g.get_tensor_by_name(name)
        out.append((name, t.dtype, t.shape))
    return out


def check_invariants(before_sig, graph_def, item: GrapplerItem, changed: bool = True) -> None:
    """`changed` False: the pass returned its input graph object itself, whose feeds and fetches are those of a graph
    already imported (the pipeline's input, or a pass output checked before), so it is not imported again (0.1-0.4 s
    a pass on the suite's CNNs: most passes return their input on most models)."""
    internal = sorted({n.op for n in graph_def.node if n.op.startswith("_")})
    if internal:
        raise AssertionError(f"internal ops in output: {internal}")
    if not changed:
        return
    after_sig = _signature(graph_def, item)
    for (name, dt0, s0), (_, dt1, s1) in zip(before_sig, after_sig):
        if dt0 != dt1:
            raise AssertionError(f"{name}: dtype changed {dt0.name} -> {dt1.name}")
        if not s0.is_compatible_with(s1):
            raise AssertionError(f"{name}: shape changed {s0} -> {s1}")


def run(graph_def, item: GrapplerItem, passes) -> tuple[object, list[PassResult]]:
    """passes: objects with `name` and `optimize(graph_def, item)`. Returns the final graph and one result per pass."""
    before_sig = _signature(graph_def, item)
    results = []
    for p in passes:
        t = time.perf_counter()
        n0 = len(graph_def.node)
        out = None
        try:
            out = p.optimize(graph_def, item)
            check_invariants(before_sig, out, item, changed=out is not graph_def)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - any failure of a pass (egglog panics derive from
            # BaseException) means: keep its input graph and say why; a pass whose output the check refused and that
            # keeps its own report (`rejected`) is told, so the report does not describe a graph that was dropped
            reason = f"{type(e).__name__}: {e}"
            if out is not None and hasattr(p, "rejected"):
                p.rejected(reason)
            results.append(PassResult(p.name, time.perf_counter() - t, n0, n0, False, reason))
            continue
        results.append(PassResult(p.name, time.perf_counter() - t, n0, len(out.node), True))
        graph_def = out
    return graph_def, results
