"""Rules F32 / F33 on real Keras 3 exports: a depthwise conv whose output is 2x2 or 1x1 pixels becomes the filter's
taps times the input pixels (Mul + Sum), priced against the depthwise conv's fixed cost; larger outputs keep theirs."""
import numpy as np
import pytest

from conftest import run_graph


def export_depthwise(path, size, kernel, strides, channels=32):
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((size, size, channels))
    h = keras.layers.DepthwiseConv2D(kernel, strides=strides, padding="same", use_bias=False)(keras.layers.ReLU()(x))
    model = keras.Model(x, keras.layers.Conv2D(8, 1)(h))
    randomize_weights(model, 0)
    model.export(path, verbose=False)


def _optimized(path, rules=("tf-fold",)):
    from tensat_tf.io import load
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes import canonicalize
    from tensat_tf.passes.tensat import TensatPass
    sig = load.load(path).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    tp = TensatPass(EngineOptions(enable_rules=list(rules)))
    return sig, gd, tp.optimize(gd, sig.item), tp.stats.rules_applied


@pytest.mark.parametrize("size,kernel,strides,rule", [(2, 3, 1, "F32-tiny-depthwise-as-taps"),
                                                      (4, 5, 2, "F32-tiny-depthwise-as-taps"),
                                                      (3, 3, 2, "F32-tiny-depthwise-as-taps"),
                                                      (2, 5, 2, "F33-pixel-depthwise-as-taps"),
                                                      (1, 3, 1, "F33-pixel-depthwise-as-taps")])
def test_tiny_depthwise_conv_becomes_taps(tmp_path, size, kernel, strides, rule):
    export_depthwise(str(tmp_path / "m"), size, kernel, strides)
    sig, gd, out, applied = _optimized(str(tmp_path / "m"))
    ops = [n.op for n in out.node]
    assert "DepthwiseConv2dNative" not in ops and "Sum" in ops and "Slice" not in ops   # the taps are one constant
    assert applied.get(rule) == 1
    feeds = [np.random.RandomState(1).randn(3, size, size, 32).astype("f")]
    for a, b in zip(run_graph(gd, sig.item, feeds), run_graph(out, sig.item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_larger_depthwise_conv_keeps_its_kernel(tmp_path):
    export_depthwise(str(tmp_path / "m"), 4, 3, 1)          # a 4x4 output: 16 x 16 taps, measured slower
    _, _, out, applied = _optimized(str(tmp_path / "m"))
    assert [n.op for n in out.node].count("DepthwiseConv2dNative") == 1
    assert not any(r.startswith(("F32", "F33")) for r in applied)


def test_a_batch_norm_scale_folds_into_the_taps(tmp_path):
    # depthwise conv -> BatchNormalization at a 2x2 output (EfficientNetV2's last stage): F04 folds the norm's scale
    # into the filter, and F32 writes that folded filter as taps (the analysis carries Floating through F04's
    # Reshape / Mul, egraph/language.py FLOAT_KEEPING), so no Mul by the scale is left after the Sum
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((2, 2, 32))
    h = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(keras.layers.ReLU()(x))
    h = keras.layers.Activation("swish")(keras.layers.BatchNormalization()(h))
    model = keras.Model(x, keras.layers.Conv2D(8, 1)(h))
    randomize_weights(model, 0)
    model.export(str(tmp_path / "m"), verbose=False)
    sig, gd, out, applied = _optimized(str(tmp_path / "m"))
    assert applied.get("F32-tiny-depthwise-as-taps") == 1
    by = {n.name: n for n in out.node}
    (total,) = [n for n in out.node if n.op == "Sum"]
    readers = [n for n in out.node if any(i.split(":")[0] == total.name for i in n.input)]
    # the Sum's result goes through its Reshape to the bias, never to a Mul by a constant scale
    chain = [by[r.name] for r in readers]
    while chain and chain[0].op == "Reshape":
        chain = [n for n in out.node if any(i.split(":")[0] == chain[0].name for i in n.input)]
    assert chain and all(n.op != "Mul" or not any(by[i.split(":")[0]].op == "Const" for i in n.input) for n in chain), \
        [n.op for n in chain]
    feeds = [np.random.RandomState(1).randn(3, 2, 2, 32).astype("f")]
    for a, b in zip(run_graph(gd, sig.item, feeds), run_graph(out, sig.item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
