"""Rules F35-F37 and their price: a per-channel vector broadcast along a narrow last dim (an RGB image's 3 channels,
which Keras' Rescaling and Normalization layers scale and shift) costs a row loop per pixel, and runs on the image's
[-1, W*C] rows by the tiled vector instead."""
import numpy as np
import pytest
import tensorflow as tf

from conftest import run_graph

from tensat_tf.cost.analytic import node_cost
from tensat_tf.cost.devices import CPU, CPU_EIGEN


def test_a_narrow_broadcast_is_priced_per_row():
    def us(c, n=12288, device=CPU):
        return node_cost("Mul", None, [(1, n // c, c), (c,)], (1, n // c, c), 1, device) * 1e3
    # measured (cost/devices.py broadcast_row_ns): 13.0 us at C = 3, 2.7 at C = 64, on 12,288 elements
    assert 11 < us(3) < 15 and us(64) < 5 and us(3) > 3 * us(64)
    assert us(3, 49152) > 3.5 * us(3)                  # rows, not the op, set the price
    assert us(3, device=CPU_EIGEN) == pytest.approx(us(64, device=CPU_EIGEN), rel=0.01)   # not measured there
    # a scalar, a one-element vector on one channel and a full-size operand are not per-channel vectors
    assert node_cost("Mul", None, [(1, 4096, 3), ()], (1, 4096, 3), 1, CPU) * 1e3 < 5
    assert node_cost("Mul", None, [(1, 12288, 1), (1,)], (1, 12288, 1), 1, CPU) * 1e3 < 5
    assert node_cost("Mul", None, [(1, 4096, 3), (1, 4096, 3)], (1, 4096, 3), 1, CPU) * 1e3 < 5


def _export_preprocessed(path, size=16):
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((size, size, 3))
    h = keras.layers.Rescaling(1 / 255.0)(x)
    h = keras.layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.052, 0.05, 0.051])(h)
    h = keras.layers.ZeroPadding2D(((0, 1), (0, 1)))(h)
    model = keras.Model(x, keras.layers.Conv2D(8, 3, strides=2, activation="relu")(h))
    randomize_weights(model, 0)
    model.export(path, verbose=False)


def test_keras_preprocessing_runs_on_rows(tmp_path):
    from tensat_tf.io import load
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes import canonicalize
    from tensat_tf.passes.tensat import TensatPass
    _export_preprocessed(str(tmp_path / "m"))
    sig = load.load(str(tmp_path / "m")).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    # Grappler writes Normalization's subtraction as Add(x, -mean): ingested as an AddV2 (ops.BINARY_ALIASES)
    assert "Add" in [n.op for n in gd.node]
    tp = TensatPass(EngineOptions(unknown_dim=8))
    out = tp.optimize(gd, sig.item)
    assert tp.stats.rules_applied.get("F35-narrow-channel-mul-widened") == 1
    assert tp.stats.rules_applied.get("F36-narrow-channel-add-widened") == 1
    shapes = {}
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(out, name="")
    for n in out.node:
        if n.op in ("Mul", "AddV2", "Add", "BiasAdd"):
            shapes[n.name] = g.get_tensor_by_name(n.name + ":0").shape.as_list()
    # the per-channel ops run on [batch, 16 * 3] rows, none on [batch, 16, 16, 3] (the conv's bias is on 8 channels)
    assert sorted(map(str, shapes.values())) == ["[None, 48]", "[None, 48]", "[None, 8, 8, 8]"], shapes
    feeds = [np.random.RandomState(1).rand(3, 16, 16, 3).astype("f") * 255]
    for a, b in zip(run_graph(gd, sig.item, feeds), run_graph(out, sig.item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_string_add_stays_opaque():
    from tensat_tf.egraph import ingest
    from tensat_tf.item import GrapplerItem
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.string, [None], name="a")
        tf.identity(tf.raw_ops.Add(x=a, y=tf.constant(["!"]), name="cat"), name="y")
    ing = ingest.ingest(g.as_graph_def(), GrapplerItem(feeds=("a:0",), fetches=("y:0",)))
    # opaque (an Op term named after its node): Add on strings concatenates, it is not an AddV2
    assert [t.op for t in ing.terms.values() if t.payload == ("cat",)] == ["Op"]
