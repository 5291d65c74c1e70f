"""Keras' Conv1D: ExpandDims -> Conv2D -> Squeeze, then the layer's bias, a batch norm and the activation, which TF's
remapper cannot fuse with the Conv2D across the Squeeze. rules/squeeze.rules moves them inside (eagerly:
rules/syntax.py `:schedule eager`), F02 folds the batch norm's scale into the filter, and one layer's Squeeze cancels
the next one's ExpandDims."""
import numpy as np
import pytest

from conftest import exported_graph, run_graph



@pytest.fixture(scope="module")
def conv1d(tmp_path_factory):
    """Conv1D (no bias) + BatchNorm + ReLU, Conv1D + BatchNorm + swish, MaxPooling1D, Conv1D + ReLU: dynamic batch
    and sequence."""
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    layers = keras.layers
    x = keras.Input((None, 8))
    y = layers.Conv1D(16, 3, padding="same", use_bias=False)(x)
    y = layers.ReLU()(layers.BatchNormalization()(y))
    y = layers.Conv1D(16, 3, padding="same")(y)
    y = layers.Activation("swish")(layers.BatchNormalization()(y))
    y = layers.MaxPooling1D(2)(y)
    y = layers.Conv1D(8, 1, activation="relu")(y)
    model = keras.Model(x, y)
    randomize_weights(model, 0)
    return exported_graph(model, str(tmp_path_factory.mktemp("conv1d") / "m"))


def _optimized(gd, item, disable=()):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    p = TensatPass(EngineOptions(disable_rules=list(disable), unknown_dim=32))
    return p.optimize(gd, item), p.stats.rules_applied


def _reader(gd):
    """node name -> ops of the nodes that read it."""
    readers: dict = {}
    for n in gd.node:
        for i in n.input:
            readers.setdefault(i.split(":")[0].lstrip("^"), []).append(n.op)
    return readers


def test_each_conv1d_runs_with_its_bias_and_activation(conv1d):
    gd, item = conv1d
    before = _reader(gd)
    assert sorted(before[n.name][0] for n in gd.node if n.op == "Conv2D") == ["Squeeze"] * 3
    out, applied = _optimized(gd, item)
    assert {"F02-conv-mul-fold", "Q12-expand-squeeze-cancel"} <= set(applied), applied
    readers = _reader(out)
    convs = [n for n in out.node if n.op == "Conv2D"]
    assert len(convs) == 3
    for c in convs:                                  # the conv's own BiasAdd, the one the remapper fuses
        assert readers[c.name] == ["BiasAdd"], readers[c.name]
    # the batch norms' scales are in the filters; what Muls are left are the swish's
    assert [n.op for n in out.node if n.op == "Mul"] == ["Mul"]
    # the first ExpandDims and the last Squeeze are left; between the layers (and the pool) they cancel
    ops = [n.op for n in out.node]
    assert ops.count("ExpandDims") == 1 and ops.count("Squeeze") == 1
    for b, t in ((1, 2), (2, 5), (3, 32)):
        feeds = [np.random.RandomState(b * t).standard_normal((b, t, 8)).astype("f")]
        (want,), (got,) = run_graph(gd, item, feeds), run_graph(out, item, feeds)
        assert got.shape == want.shape == (b, t // 2, 8)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_without_the_squeeze_rules_the_epilogues_stay_outside(conv1d):
    gd, item = conv1d
    from tensat_tf import rules
    squeeze_rules = [r.name for r in rules.builtin().rules if r.origin.startswith("squeeze.rules:")]
    out, applied = _optimized(gd, item, disable=squeeze_rules)
    assert not any(r.startswith("Q") for r in applied)
    readers = _reader(out)
    assert sorted(readers[n.name][0] for n in out.node if n.op == "Conv2D") == ["Squeeze"] * 3


def test_squeeze_and_expand_dims_shapes_agree_with_tf():
    """The e-graph's shape rules (tensat_tf/ops.py) against TF's, for every axis spelling TF accepts on a rank-4
    input whose batch is a symbol (-2): the symbol is copied wherever its dim lands."""
    import tensorflow as tf
    from tensat_tf.egraph import language
    shape = (2, 1, 5, 1)
    lets, checks = ['(let $x_ (Input "x")) (set (shape $x_) (vec-of -2 1 5 1))'], []

    def expect(name, term, tf_shape):
        want = [-2 if d == 2 else d for d in tf_shape]
        lets.append(f"(let ${name}_ {term})")
        checks.append(f"(check (= (shape ${name}_) (vec-of {' '.join(map(str, want))})))")

    for a in range(-4, 4):
        if shape[a] == 1:
            expect(f"s{a + 4}", f"(Squeeze (vec-of {a}) $x_)", tf.squeeze(tf.zeros(shape), [a]).shape)
    for a in range(-5, 5):
        expect(f"e{a + 5}", f"(ExpandDims {a} $x_)", tf.expand_dims(tf.zeros(shape), a).shape)
    assert len(checks) == 4 + 10
    eg = language.new_egraph()
    eg.run_program(*eg.parse_program("\n".join(lets + ["(run-schedule (saturate (run shapes)))"] + checks)))


@pytest.fixture(scope="module")
def dilated(tmp_path_factory):
    """A temporal convolutional network's layers: causal Conv1D with dilation 2 and 4 (TF: SpaceToBatchND -> Conv2D ->
    BatchToSpaceND, paddings computed from the dynamic length), a VALID dilated one; VALID and SAME dilated Conv2D
    and SAME and causal Conv1D on static dims (constant paddings and crops)."""
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    layers = keras.layers
    x = keras.Input((None, 6))
    y = layers.Conv1D(8, 3, padding="causal", dilation_rate=2, activation="relu")(x)
    y = layers.BatchNormalization()(layers.Conv1D(8, 2, padding="causal", dilation_rate=4, use_bias=False)(y))
    y = layers.Conv1D(8, 2, dilation_rate=3)(layers.ReLU()(y))
    model = keras.Model(x, y)
    randomize_weights(model, 1)
    # static spatial dims: the paddings and crops are constants; SAME pads more than it crops
    image = keras.Input((12, 12, 3))
    y2 = layers.Conv2D(4, 3, dilation_rate=2, activation="relu")(image)
    y2 = layers.Conv2D(4, 3, dilation_rate=(3, 2), padding="same")(y2)
    conv2d = keras.Model(image, y2)
    randomize_weights(conv2d, 2)
    frames = keras.Input((20, 6))
    y1 = layers.Conv1D(8, 3, padding="same", dilation_rate=2, activation="relu")(frames)
    y1 = layers.Conv1D(8, 2, padding="causal", dilation_rate=3)(y1)
    static = keras.Model(frames, y1)
    randomize_weights(static, 3)
    root = tmp_path_factory.mktemp("dilated")
    return (exported_graph(model, str(root / "m1")), exported_graph(conv2d, str(root / "m2")),
            exported_graph(static, str(root / "m3")))


def test_dilated_convs_become_one_dilated_conv2d(dilated):
    cases = ((dilated[0], [(1, 6, 6), (2, 7, 6), (3, 33, 6)], [[1, 1, 2, 1], [1, 1, 4, 1], [1, 1, 3, 1]]),
             (dilated[1], [(1, 12, 12, 3), (2, 12, 12, 3)], [[1, 2, 2, 1], [1, 3, 2, 1]]),
             (dilated[2], [(1, 20, 6), (3, 20, 6)], [[1, 1, 2, 1], [1, 1, 3, 1]]))
    for (gd, item), shapes, rates in cases:
        assert {"SpaceToBatchND", "BatchToSpaceND"} <= {n.op for n in gd.node}
        out, applied = _optimized(gd, item)
        assert {"SpaceToBatchND", "BatchToSpaceND"}.isdisjoint(n.op for n in out.node)
        convs = [n for n in out.node if n.op == "Conv2D"]
        assert sorted(list(c.attr["dilations"].list.i) for c in convs) == sorted(rates)
        readers = _reader(out)
        assert all(readers[c.name] == ["BiasAdd"] for c in convs)       # bias (or batch norm) fused, as in Q01
        for shape in shapes:
            feeds = [np.random.RandomState(sum(shape)).standard_normal(shape).astype("f")]
            (want,), (got,) = run_graph(gd, item, feeds), run_graph(out, item, feeds)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_conv_between_space_to_batch_and_back_is_priced_at_its_length_over_the_rate(dilated):
    """cost/sizes.py Quotient: the dims SpaceToBatchND splits over a run-time length are the length over the rate,
    the batch times the rate, and BatchToSpaceND's output gets the length back; each conv's price is then about the
    same at every rate (it was the rate times its work: the batch times the rate at a whole unknown length)."""
    from tensat_tf.cost import analytic, sizes
    from tensat_tf.egraph import ingest, language
    gd, item = dilated[0]
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = sizes.exported(eg, ing)
    by_rate = {}
    for i, n in enumerate(exp.egraph.nodes):
        if n.op == "Conv2D":
            (x, w), out = analytic.node_shapes(exp, i, 1, 64)
            by_rate[x[0]] = (x, out)
    # the batch is the rate; the length 64 over it (the 2-wide and 4-wide causal ones, then the VALID rate 3)
    assert by_rate[2][0] == (2, 1, 32, 6) and by_rate[4][0] == (4, 1, 16, 8) and by_rate[3][0] == (3, 1, 22, 8)
    for rate, (x, out) in by_rate.items():
        assert out[0] == rate and out[2] * rate in range(64, 64 + rate)
    b2s = [i for i, n in enumerate(exp.egraph.nodes) if n.op == "BatchToSpaceNDT"]
    assert len(b2s) == 3 and all(analytic.node_shapes(exp, i, 1, 64)[1][:2] == (1, 64) for i in b2s)
