"""Keras' LayerNormalization on real Keras 3 exports (rules/tf_fold.rules F25-F27b): the centred form (x - mean) * g +
beta replaces Grappler's (beta + (-mean) * g) + x * g, and before a Dense gamma and beta fold into its weight and
bias. Also the AddN of two tensors that Grappler writes for some of these sums is ingested as an AddV2."""
import numpy as np
import pytest

from conftest import run_graph


def _export(path, shape, units):
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input(shape)
    h = keras.layers.LayerNormalization(epsilon=1e-5)(x)
    model = keras.Model(x, keras.layers.Dense(units)(h))
    randomize_weights(model, 0)
    model.export(path, verbose=False)
    from tensat_tf.io import load
    from tensat_tf.passes import canonicalize, shapes
    sig = load.load(path).signatures["serving_default"]
    return shapes.optimize(canonicalize.optimize(sig.graph_def, sig.item), sig.item), sig.item


def _ops(gd):
    return [n.op for n in gd.node]


@pytest.mark.parametrize("shape,feed", [((None, 16), (2, 5, 16)), ((32, 32, 16), (2, 32, 32, 16))])
def test_layernorm_is_centred_first_and_its_affine_joins_the_dense(tmp_path, shape, feed):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    gd, item = _export(str(tmp_path / "m"), shape, 24)
    before = _ops(gd)
    assert before.count("Neg") == 1 and "Sub" not in before
    p = TensatPass(EngineOptions(enable_rules=["tf-fold"]))
    out = p.optimize(gd, item)
    after = _ops(out)
    assert "Neg" not in after and after.count("Sub") == 1
    adds = lambda ops: ops.count("AddV2") + ops.count("BiasAdd")     # noqa: E731
    if len(feed) == 3:
        # 8 rows per unknown dim: the bias beta W would cost the MatMul's fused kernel more than the two small ops it
        # saves (cost/fusion.py, "MatMul"), so only the centring: (-mean) * g and x * g become one product
        assert after.count("Mul") == before.count("Mul") - 1 and adds(after) == adds(before) - 1
    else:
        # 1024 rows per image: of gamma * rsqrt, (-mean) * g and x * g only (x - mean) * rsqrt is left (gamma went
        # into the Dense's weight), and of eps, beta + ... and ... + x * g only the eps (beta into the Dense's bias)
        assert after.count("Mul") == before.count("Mul") - 2 and adds(after) == adds(before) - 2
    feeds = [np.random.RandomState(1).standard_normal(feed).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_addn_of_two_is_ingested_as_addv2_and_emitted_unchanged():
    import tensorflow as tf
    from tensat_tf.egraph import emit, export, ingest, language
    from tensat_tf.item import GrapplerItem
    gd = tf.compat.v1.GraphDef()
    for name in ("a", "b", "c"):
        n = gd.node.add(name=name, op="Placeholder")
        n.attr["dtype"].type = tf.float32.as_datatype_enum
        n.attr["shape"].shape.CopyFrom(tf.TensorShape([2, 3]).as_proto())
    two = gd.node.add(name="two", op="AddN", input=["a", "b"])
    three = gd.node.add(name="three", op="AddN", input=["two", "b", "c"])
    for n in (two, three):
        n.attr["T"].type = tf.float32.as_datatype_enum
        n.attr["N"].i = len(n.input)
    item = GrapplerItem(("a", "b", "c"), ("three",))
    ing = ingest.ingest(gd, item)
    assert ing.typed["two"].op == "AddV2" and "three" in ing.opaque      # three inputs: no binary form
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = export.export(eg, ing.roots)
    out = emit.emit(ing, exp, emit.original_choice(ing, exp))
    assert sorted((n.name, n.op) for n in out.node if n.op == "AddN") == [("three", "AddN"), ("two", "AddN")]
