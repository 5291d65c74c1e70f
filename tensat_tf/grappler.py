"""Run TF's own Grappler offline on a GraphDef (tf_optimizer.OptimizeGraph), honouring a GrapplerItem."""
from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
from tensorflow.python.grappler import tf_optimizer

from tensat_tf.io import weights
from tensat_tf.item import GrapplerItem, node_name
from tensat_tf.options import MIN_VARIABLE_ELEMENTS


def _meta_graph(graph_def, item: GrapplerItem) -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraphDef Grappler's item builder reads (tensorflow/core/grappler/grappler_item_builder.cc in TF's
    sources): the graph, and a signature whose inputs give each feed's dtype and shape (it feeds a fake tensor of
    them) and whose outputs name the fetches. Where every feed is a Placeholder its attributes say both, and the graph
    is not imported into a tf.Graph (0.3 s for Inception-ResNet-v2's rewritten graph, a third of the Grappler
    check); otherwise TF's shape inference says them."""
    nodes = {n.name: n for n in graph_def.node}
    feeds = [nodes.get(node_name(t)) for t in item.feeds]
    mg = meta_graph_pb2.MetaGraphDef()
    sig = meta_graph_pb2.SignatureDef()
    if all(n is not None and n.op == "Placeholder" and t.endswith(":0") for n, t in zip(feeds, item.feeds)):
        mg.graph_def.CopyFrom(graph_def)
        for i, (name, n) in enumerate(zip(item.feeds, feeds)):
            sig.inputs[f"in{i}"].CopyFrom(meta_graph_pb2.TensorInfo(
                name=name, dtype=n.attr["dtype"].type, tensor_shape=n.attr["shape"].shape))
    else:
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        mg.graph_def.CopyFrom(g.as_graph_def())
        # build TensorInfo by hand: build_tensor_info() refuses to run in eager mode
        for i, name in enumerate(item.feeds):
            t = g.get_tensor_by_name(name)
            sig.inputs[f"in{i}"].CopyFrom(meta_graph_pb2.TensorInfo(
                name=t.name, dtype=t.dtype.as_datatype_enum, tensor_shape=t.shape.as_proto()))
    for i, name in enumerate(item.fetches):
        sig.outputs[f"out{i}"].name = name       # the item builder reads only an output's name
    mg.signature_def["serving_default"].CopyFrom(sig)
    return mg


def optimize_graph(graph_def, item: GrapplerItem, optimizers: Sequence[str], **rewrite_options):
    mg = _meta_graph(graph_def, item)
    # Grappler keeps the nodes listed in the train_op collection (that is how convert_to_constants uses it too)
    keep = sorted({node_name(t) for t in item.fetches} | set(item.preserve))
    coll = meta_graph_pb2.CollectionDef()
    coll.node_list.value.extend(keep)
    mg.collection_def["train_op"].CopyFrom(coll)
    cfg = config_pb2.ConfigProto()
    rw = cfg.graph_options.rewrite_options
    rw.min_graph_nodes = -1                  # the default skips graphs with fewer than 4 nodes
    rw.optimizers.extend(optimizers)         # an explicit list runs ONLY these, in this order
    for k, v in rewrite_options.items():
        setattr(rw, k, v)
    return tf_optimizer.OptimizeGraph(cfg, mg)


def runtime_error(graph_def, item: GrapplerItem,
                  min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> Optional[str]:
    """The first error TF's default Grappler pipeline meets on `graph_def` placed on the CPU, as a served model runs
    it, or None. At run time Grappler logs an optimizer's error and goes on without that optimizer's rewrites: on
    zoo:real_mobilenetv3_small a rewritten graph made the remapper fail ("Mutation::Apply error: fanout ... exist for
    missing node", its hard-swish fusion) and so lost every conv fusion, 0.96x of the no-rules graph."""
    try:
        runtime_graph(graph_def, item, min_variable_elements, fail_on_optimizer_errors=True)
    except tf.errors.OpError as e:
        return (e.message.strip().splitlines() or [type(e).__name__])[0]
    return None


def runtime_graph(graph_def, item: GrapplerItem, min_variable_elements: int = MIN_VARIABLE_ELEMENTS,
                  **rewrite_options):
    """`graph_def` as TF's default Grappler pipeline rewrites it when a served model runs it: placed on the CPU (the
    remapper fuses only nodes placed on a CPU), its weights read from variables."""
    placed = graph_pb2.GraphDef()
    placed.versions.CopyFrom(graph_def.versions)     # the library and versions too: Grappler reads both
    placed.library.CopyFrom(graph_def.library)
    for src in graph_def.node:
        device = src.device or "/device:CPU:0"
        if weights.is_weight(src, min_variable_elements):
            # served, a weight is a variable read (tensat_tf/io/weights.py), not a constant: Grappler rewrites the
            # two differently (runtime_error's failure happens with reads, not with placeholders), and folding
            # Inception-ResNet-v2's weights as constants here took 6 s. Its bytes are not copied.
            dtype, shape = src.attr["dtype"].type, src.attr["value"].tensor.tensor_shape
            handle = placed.node.add(name=f"{src.name}/tensat_handle", op="VarHandleOp", device=device)
            handle.attr["dtype"].type = dtype
            handle.attr["shape"].shape.CopyFrom(shape)
            handle.attr["shared_name"].s = handle.name.encode()
            read = placed.node.add(name=src.name, op="ReadVariableOp", device=device)
            read.attr["dtype"].type = dtype
            read.input.append(handle.name)
        else:
            node = placed.node.add()
            node.CopyFrom(src)
            node.device = device
    return optimize_graph(placed, item, [], **rewrite_options)

