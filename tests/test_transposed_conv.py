"""Keras' Conv2DTranspose / Conv1DTranspose in the e-graph (the typed term Conv2DBackpropInput, tensat_tf/ops.py): a
BatchNormalization's scale after one folds into its filter's output channels (rules/tf_fold.rules F40), which
Grappler leaves as a Mul; the output computes the same values as the export at other batch sizes and lengths."""
import collections

import numpy as np
import pytest
from conftest import cleaned_graph, run_graph

from tensat_tf.convert import convert
from tensat_tf.io import load
from tensat_tf.options import EngineOptions, Options


def _bn(layers, x, seed: int):
    """A BatchNormalization with statistics far from Keras' defaults (which Grappler would fold away)."""
    bn = layers.BatchNormalization()
    y = bn(x)
    r = np.random.default_rng(seed)
    c = bn.gamma.shape[0]
    bn.set_weights([r.uniform(0.5, 1.5, c), r.uniform(-0.5, 0.5, c), r.uniform(-0.5, 0.5, c), r.uniform(0.5, 1.5, c)])
    return y


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A decoder of two Conv2DTransposes (stride 2 SAME without bias, stride 1 VALID with one), each + BN (+ ReLU),
    and a Conv1DTranspose + BN on a dynamic length; both with a dynamic batch."""
    import keras
    from keras import layers
    keras.utils.set_random_seed(5)
    root = tmp_path_factory.mktemp("deconv")
    x = inp = keras.Input((6, 6, 16), name="x")
    x = layers.Conv2DTranspose(8, 3, strides=2, padding="same", use_bias=False)(x)
    x = layers.ReLU()(_bn(layers, x, 1))
    x = layers.Conv2DTranspose(4, 2, padding="valid")(x)
    x = _bn(layers, x, 2)
    keras.Model(inp, x).export(str(root / "image"), verbose=False)
    s = inp1 = keras.Input((None, 8), name="s")
    s = layers.Conv1DTranspose(64, 4, strides=2, padding="same", use_bias=False)(s)
    s = layers.ReLU()(_bn(layers, s, 3))
    keras.Model(inp1, s).export(str(root / "sequence"), verbose=False)
    return {"image": str(root / "image"), "sequence": str(root / "sequence")}


def test_batch_norm_scales_fold_into_transposed_conv_filters(exports, tmp_path):
    gd, _ = cleaned_graph(exports["image"])
    assert collections.Counter(n.op for n in gd.node)["Mul"] == 2      # Grappler leaves both scales
    rep = convert(exports["image"], str(tmp_path / "out"), Options(signatures=["serving_default"]))
    s = rep["signatures"]["serving_default"]
    assert s["rules_applied"].get("F40-deconv-mul-fold") == 2
    assert s["ops_after"]["Conv2DBackpropInput"] == 2 and "Mul" not in s["ops_after"]
    assert rep["verification"]["passed"]
    _same_values(exports["image"], str(tmp_path / "out"), [(3, 0)])


def test_a_conv1d_transpose_on_a_dynamic_length(exports, tmp_path):
    # at a length where the scale's pass is worth --min_gain (a small layer at 8 steps predicted 0.2 %: input kept)
    rep = convert(exports["sequence"], str(tmp_path / "out"), Options(signatures=["serving_default"],
                                                                      engine=EngineOptions(unknown_dim=128)))
    s = rep["signatures"]["serving_default"]
    # the Mul left is input_sizes' length x 2 (an int32 shape value), not the scale
    assert s["rules_applied"].get("F40-deconv-mul-fold") == 1 and s["ops_after"]["Mul"] == 1
    _same_values(exports["sequence"], str(tmp_path / "out"), [(2, 1), (3, 9), (1, 30)])


def _same_values(src: str, out: str, sizes):
    """The served graphs of `src` and `out` agree on random inputs at each (batch, length): the input's unknown
    dims but the batch are `length` long."""
    want = load.load(src, only=["serving_default"]).signatures["serving_default"]
    got = load.load(out, only=["serving_default"]).signatures["serving_default"]
    (spec,) = want.inputs
    for batch, length in sizes:
        shape = [batch] + [length if d < 0 else d for d in spec.shape[1:]]
        x = np.random.default_rng(batch * 100 + length).standard_normal(shape).astype("f4")
        (a,), (b,) = run_graph(want.graph_def, want.item, [x]), run_graph(got.graph_def, got.item, [x])
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_the_typed_term_is_priced_as_its_opaque_estimate_was():
    """Typed, a transposed conv costs its multiply-adds as tensat_tf/cost/opaque.py estimated them when it was
    opaque (every input element over the filter's taps and output channels), so predictions did not jump."""
    from tensat_tf.cost import analytic, opaque
    sz, w, x, out = (4,), (3, 3, 8, 16), (2, 6, 6, 16), (2, 12, 12, 8)
    payload = (out, (1, 2, 2, 1), "SAME", (1, 1, 1, 1))
    flops, nbytes = analytic.flops_and_bytes("Conv2DBackpropInput", payload, [sz, w, x], out)
    assert flops == opaque.flops("Conv2DBackpropInput", {}, [sz, w, x], [out]) == 2.0 * (2 * 6 * 6 * 16) * (3 * 3 * 8)
    assert nbytes == 4 * (3 * 3 * 8 * 16 + 2 * 6 * 6 * 16 + 2 * 12 * 12 * 8)
