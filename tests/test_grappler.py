"""tensat_tf/grappler.py: the MetaGraphDef handed to TF's Grappler, with and without importing the graph."""
import tensorflow as tf

from tensat_tf import grappler
from tensat_tf.item import GrapplerItem
from tensat_tf.passes import canonicalize

from conftest import conv_scale_bias_relu


def test_placeholder_feeds_are_described_by_their_attributes_as_tf_infers_them():
    gd, item = conv_scale_bias_relu(4)
    sig = grappler._meta_graph(gd, item).signature_def["serving_default"]
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    x = g.get_tensor_by_name("x:0")
    assert sig.inputs["in0"].name == "x:0"
    assert sig.inputs["in0"].dtype == x.dtype.as_datatype_enum
    assert sig.inputs["in0"].tensor_shape == x.shape.as_proto()
    assert [d.size for d in sig.inputs["in0"].tensor_shape.dim] == [-1, 8, 8, 3]
    assert sig.outputs["out0"].name == "out:0"


def test_a_feed_that_is_no_placeholder_is_described_by_tf_shape_inference():
    """Grappler feeds a fake tensor of each input's dtype and shape: a fed tensor that is not a Placeholder's (here
    an Identity's) gets them from TF's shape inference, and the graph still optimizes around it."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5], name="x")
        fed = tf.identity(x, name="fed")
        tf.identity(tf.nn.relu(fed * 2.0), name="out")
    gd = g.as_graph_def()
    item = GrapplerItem(feeds=("fed:0",), fetches=("out:0",))
    sig = grappler._meta_graph(gd, item).signature_def["serving_default"]
    assert sig.inputs["in0"].dtype == tf.float32.as_datatype_enum
    assert [d.size for d in sig.inputs["in0"].tensor_shape.dim] == [-1, 5]
    out = canonicalize.optimize(gd, item)
    assert {"fed", "out"} <= {n.name for n in out.node}


def test_canonicalize_gives_the_same_graph_as_through_an_imported_tf_graph(monkeypatch):
    """The direct MetaGraphDef changes nothing Grappler writes: the same bytes as the MetaGraphDef TF's own
    export_meta_graph builds from an imported graph (how the module built it before)."""
    gd, item = conv_scale_bias_relu(4)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    exported = tf.compat.v1.train.export_meta_graph(graph_def=g.as_graph_def(add_shapes=True), graph=g)
    direct = grappler._meta_graph(gd, item)
    exported.signature_def["serving_default"].CopyFrom(direct.signature_def["serving_default"])

    plain = canonicalize.optimize(gd, item).SerializeToString(deterministic=True)

    def run(mg):
        monkeypatch.setattr(grappler, "_meta_graph", lambda *_: mg)
        return canonicalize.optimize(gd, item).SerializeToString(deterministic=True)
    assert run(exported) == run(direct) == plain
