"""Rule F21 on a real Keras 3 export: ZeroPadding2D(correct_pad) before a strided DepthwiseConv2D (MobileNet's,
EfficientNet's and NASNet's downsampling form) becomes the conv's own SAME padding, and the Pad kernel goes."""
import numpy as np
import pytest

from conftest import run_graph


def export_padded_depthwise(path, size, kernel):
    import keras
    from tensat_tf.zoo._keras import calibrate_batchnorm, randomize_weights
    from keras.src.applications.imagenet_utils import correct_pad
    x = keras.Input((size, size, 8))
    h = keras.layers.ZeroPadding2D(correct_pad(x, kernel))(x)
    h = keras.layers.DepthwiseConv2D(kernel, strides=2, padding="valid", use_bias=False)(h)
    h = keras.layers.ReLU(6.0)(keras.layers.BatchNormalization(axis=3)(h))
    model = keras.Model(x, keras.layers.Conv2D(4, 1)(h))
    randomize_weights(model, 0)
    calibrate_batchnorm(model, (size, size, 8), 0)
    model.export(path, verbose=False)


@pytest.mark.parametrize("size,kernel", [(16, 3), (15, 3), (16, 5)])
def test_zero_padding_before_a_strided_depthwise_conv_becomes_same(tmp_path, size, kernel):
    from tensat_tf.io import load
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes import canonicalize
    from tensat_tf.passes.tensat import TensatPass
    export_padded_depthwise(str(tmp_path / "m"), size, kernel)
    sig = load.load(str(tmp_path / "m")).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    assert [n.op for n in gd.node].count("Pad") == 1
    out = TensatPass(EngineOptions(enable_rules=["tf-fold"])).optimize(gd, sig.item)
    assert "Pad" not in [n.op for n in out.node]
    dw = [n for n in out.node if n.op == "DepthwiseConv2dNative"]
    assert len(dw) == 1 and dw[0].attr["padding"].s == b"SAME" and list(dw[0].attr["strides"].list.i) == [1, 2, 2, 1]
    feeds = [np.random.RandomState(1).rand(2, size, size, 8).astype("f")]
    for a, b in zip(run_graph(gd, sig.item, feeds), run_graph(out, sig.item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_padding_other_than_same_keeps_its_pad(tmp_path):
    import keras
    from tensat_tf.io import load
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes import canonicalize
    from tensat_tf.passes.tensat import TensatPass
    x = keras.Input((16, 16, 8))
    h = keras.layers.ZeroPadding2D(((1, 1), (1, 1)))(x)       # SAME at stride 2 on 16 would be ((0, 1), (0, 1))
    model = keras.Model(x, keras.layers.DepthwiseConv2D(3, strides=2, padding="valid")(h))
    model.export(str(tmp_path / "m"), verbose=False)
    sig = load.load(str(tmp_path / "m")).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    out = TensatPass(EngineOptions(enable_rules=["tf-fold"])).optimize(gd, sig.item)
    assert [n.op for n in out.node].count("Pad") == 1
