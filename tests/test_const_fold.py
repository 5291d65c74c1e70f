"""rules/const_fold.rules (and F30, F38 and F39 of tf_fold.rules, F29 of pixel_matmul.rules) end to end: on small
graphs shaped like what Keras 3 exports leave after Grappler (MobileNetV3's hard-swish before a depthwise conv,
Xception's residual of two biased branches, a residual add after a folded BatchNorm, DenseNet's transition and
pre-activation batch norm, a squeeze-excite block's one-pixel convs as MatMuls, F38, or batch matmuls, F29; a
bottleneck's 1x1 conv as a MatMul, F39), the pass takes the folded forms, the graph loses the nodes, and the values
stay the same."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf.cost import CPU
from tensat_tf.item import GrapplerItem
from tensat_tf.options import EngineOptions
from tensat_tf.passes.tensat import TensatPass
from conftest import run_graph

RNG = np.random.default_rng(0)


def _const(*shape):
    return tf.constant(RNG.normal(size=shape).astype(np.float32))


def _hard_swish_depthwise(x, after_conv=True):
    """Keras' hard swish before a depthwise conv. After a conv's bias TF's remapper fuses it whole in the form rules
    A07/A08 reach (tensat_tf/cost/fusion.py, hardswish); elsewhere its 1/6 folds into the depthwise filter (C07)."""
    y = (tf.nn.bias_add(tf.nn.conv2d(x, _const(1, 1, 4, 8), 1, "SAME"), _const(8)) if after_conv
         else tf.concat([x, tf.add(x, _const(4))], axis=3))
    h = tf.nn.relu6(tf.add(tf.constant(3.0), y)) * tf.multiply(tf.constant(1.0 / 6.0), y)
    return tf.nn.depthwise_conv2d(h, _const(3, 3, 8, 1), [1, 1, 1, 1], "SAME")


def _residual_biases(x):
    # the bias of branch a sits on a Relu, not on its conv: a real AddV2 that C17 removes (a bias a conv fuses costs
    # almost nothing, and C17 there is a tie the cost model may break either way)
    a = tf.nn.max_pool2d(tf.add(tf.nn.relu(tf.nn.conv2d(x, _const(3, 3, 4, 8), 1, "SAME")), _const(8)), 3, 2, "SAME")
    b = tf.add(tf.nn.conv2d(x, _const(1, 1, 4, 8), 2, "SAME"), _const(8))
    return tf.add(b, a)


def _residual_after_bn(x):
    # what Grappler's arithmetic optimizer leaves of (conv + b) + x after a folded BatchNorm: AddN(x, conv) + b
    return tf.add(tf.add_n([x, tf.nn.conv2d(x, _const(1, 1, 4, 4), 1, "SAME")]), _const(4))


def _squeeze_excite(x):
    # MobileNetV3's and EfficientNet's squeeze-excite: two 1x1 convs on the global mean, a one-pixel image
    m = tf.reduce_mean(x, [1, 2], keepdims=True)
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(m, _const(1, 1, 4, 2), 1, "SAME"), _const(2)))
    return x * tf.sigmoid(tf.nn.bias_add(tf.nn.conv2d(h, _const(1, 1, 2, 4), 1, "VALID"), _const(4)))


def _bottleneck(x):
    # DenseNet's and ResNet's 1x1 conv without bias after a ReLU on a small image: a MatMul of the pixel rows (F39)
    return tf.nn.conv2d(tf.nn.relu(x), _const(1, 1, 4, 8), 1, "VALID")


def _transition(x):
    return tf.nn.avg_pool2d(tf.nn.conv2d(tf.nn.relu(x), _const(1, 1, 4, 2), 1, "VALID"), 2, 2, "VALID")


def _preactivation_bn(x, negative_channel=None):
    """DenseNet's pre-activation batch norm after a concat: relu(y*s + t) -> conv, s and t per channel
    (rules/positive_fold.rules). negative_channel: make one element of s negative (the rules must not apply)."""
    y = tf.concat([x, tf.nn.conv2d(x, _const(3, 3, 4, 4), 1, "SAME")], axis=3)
    s = RNG.uniform(0.5, 1.5, 8).astype(np.float32)
    if negative_channel is not None:
        s[negative_channel] = -0.7
    r = tf.nn.relu(tf.add(tf.multiply(y, tf.constant(s)), _const(8)))
    return tf.nn.conv2d(r, _const(3, 3, 8, 4), 1, "SAME")


@pytest.mark.parametrize("build, rule, fewer_ops, disable", [
    (lambda x: _hard_swish_depthwise(x, after_conv=False), "C07-depthwise-scalar-in", {"Mul": 1}, ()),
    # the 1x1 conv kept a conv (F39 off), whose bias and hard swish the remapper fuses in A07's form
    (_hard_swish_depthwise, "A07-relu6-product-scalar-in", {"Mul": 0}, ("F39-conv1x1-as-matmul",)),
    (_residual_biases, "C17-residual-biases-join", {"AddV2": 2, "BiasAdd": -1}, ()),   # 1 AddV2 + 1 BiasAdd left
    # F39 off where the 1x1 conv is to stay a conv: these rules are about the conv's neighbours
    (_transition, "C18-avgpool-conv1x1-swap", {}, ("F39-conv1x1-as-matmul",)),
    (_residual_after_bn, "C19-residual-bias-onto-right", {"AddN": 1, "AddV2": 0, "BiasAdd": -1},
     ("F39-conv1x1-as-matmul",)),
    # the conv's bias stays a BiasAdd after the reshape back to one pixel: the remapper has no MatMul to fuse it into
    (_squeeze_excite, "F38-pixel-conv-as-matmul", {"Conv2D": 2, "MatMul": -2, "BiasAdd": 0},
     ("F39-conv1x1-as-matmul",)),     # F39 writes the same term for these stride-1 convs
    (_bottleneck, "F39-conv1x1-as-matmul", {"Conv2D": 1, "MatMul": -1}, ()),
    (_squeeze_excite, "F29-pixel-conv-as-batch-matmul", {"Conv2D": 2, "BatchMatMulV2": -2},
     ("F38-pixel-conv-as-matmul", "F39-conv1x1-as-matmul")),
    (_preactivation_bn, "P03-conv-positive-channel-scale-in", {"Mul": 1}, ()),
    (lambda x: _preactivation_bn(x, negative_channel=3), None, {"Mul": 0}, ()),
])
def test_const_fold_applies_and_keeps_values(build, rule, fewer_ops, disable):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 4], name="x")
        tf.identity(build(x), name="out")
    gd = g.as_graph_def()
    item = GrapplerItem(feeds=["x:0"], fetches=["out:0"])
    p = TensatPass(EngineOptions(enable_rules=["tf-fold", "pixel-matmul"], disable_rules=disable,
                                 min_gain=0.0))   # a toy graph: any gain
    out = p.optimize(gd, item)
    if rule:
        assert p.stats.rules_applied.get(rule), p.stats.rules_applied
    else:   # a scale with a non-positive element: relu(s*x + t) != s*relu(x + t/s), the positive folds stay off
        assert not [r for r in p.stats.rules_applied if r.startswith("P0")], p.stats.rules_applied
    count = lambda graph, op: sum(n.op == op for n in graph.node)   # noqa: E731
    for op, fewer in fewer_ops.items():
        assert count(out, op) == count(gd, op) - fewer, (op, count(gd, op), count(out, op))
    data = RNG.normal(size=(2, 8, 8, 4)).astype(np.float32)
    want, got = (run_graph(graph_def, item, [data])[0] for graph_def in (gd, out))
    assert np.max(np.abs(want - got)) <= 1e-5 * np.max(np.abs(want))


@pytest.mark.parametrize("hw, depthwise", [(56, 1), (48, 0)])
def test_channel_scale_runs_as_depthwise_on_large_tensors_only(hw, depthwise):
    """Rule F30 and its price (cost/fusion.py, depthwise): DenseNet's pre-activation batch norm on a concatenation,
    relu(y*s + t) before a 1x1 conv, becomes one 1x1 depthwise conv with the shift and the ReLU fused at 56x56x64
    (200k elements per image), where it pays; at 48x48x64 (147k, under the cost model's crossover of about 165k) the
    rule applies in the e-graph but extraction keeps the scale folded into the conv and AddV2 + Relu."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, hw, hw, 32], name="x")
        y = tf.concat([x, tf.nn.conv2d(x, _const(3, 3, 32, 32), 1, "SAME")], axis=3)
        s = RNG.uniform(0.5, 1.5, 64).astype(np.float32)
        r = tf.nn.relu(tf.add(tf.multiply(y, tf.constant(s)), _const(64)))
        tf.identity(tf.nn.conv2d(r, _const(1, 1, 64, 16), 1, "SAME"), name="out")
    gd = g.as_graph_def()
    item = GrapplerItem(feeds=["x:0"], fetches=["out:0"])
    # the 1x1 conv stays a conv (F39 off): the choice under test is the scale's, folded into it or a depthwise conv
    p = TensatPass(EngineOptions(enable_rules=["tf-fold"], disable_rules=["F39-conv1x1-as-matmul"], min_gain=0.0))
    out = p.optimize(gd, item)
    matched = [it["matches"].get("F30-channel-scale-as-depthwise") for it in p.stats.saturation["per_iteration"]]
    assert any(matched)         # offered both times: the cost model decides
    assert sum(n.op == "DepthwiseConv2dNative" for n in out.node) == depthwise, p.stats.rules_applied
    if depthwise:       # the scale and the shift are gone into the depthwise conv and its BiasAdd
        assert not [n.op for n in out.node if n.op in ("Mul", "AddV2")]
    data = RNG.normal(size=(2, hw, hw, 32)).astype(np.float32)
    want, got = (run_graph(graph_def, item, [data])[0] for graph_def in (gd, out))
    assert np.max(np.abs(want - got)) <= 1e-5 * np.max(np.abs(want))


def test_an_integer_channel_scale_stays_a_mul():
    """TF's depthwise conv takes floats only: F30's `(float ?g)` guard keeps an int32 per-channel multiply (large
    enough for the size guard) a Mul, and the pass runs through instead of emitting an op TF rejects."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.int32, [None, 64, 64, 32], name="x")
        y = x * tf.constant(np.arange(1, 33, dtype=np.int32))
        tf.identity(tf.nn.relu(y + tf.constant(np.arange(32, dtype=np.int32))), name="out")
    gd = g.as_graph_def()
    item = GrapplerItem(feeds=["x:0"], fetches=["out:0"])
    p = TensatPass(EngineOptions(enable_rules=["tf-fold"], min_gain=0.0))
    out = p.optimize(gd, item)
    assert "F30-channel-scale-as-depthwise" not in str(p.stats.saturation)
    assert [n.op for n in out.node if n.op in ("Mul", "DepthwiseConv2dNative")] == ["Mul"]
    data = RNG.integers(-5, 5, size=(2, 64, 64, 32)).astype(np.int32)
    want, got = (run_graph(graph_def, item, [data])[0] for graph_def in (gd, out))
    np.testing.assert_array_equal(want, got)


@pytest.mark.parametrize("hw, cin, cout, cache_mib, matmul", [
    (4, 256, 512, None, True), (32, 32, 64, None, False), (2, 1024, 2048, None, True), (2, 1024, 2048, 4, False)])
def test_conv1x1_runs_as_matmul_on_small_images_only(hw, cin, cout, cache_mib, matmul):
    """Rule F39 and its price: a 1x1 conv + bias + ReLU6 measured 1.14x faster as a MatMul of the pixel rows (the bias
    and ReLU6 then separate kernels) at 4x4x256 -> 512, and 0.81x at 32x32x32 -> 64, where the conv's fused epilogue
    saves two passes over 65k elements (`python tools/bench_forms.py --experiments=conv1x1`, BENCHMARKS.md "Small
    convolutions as plain MatMuls"). On a 2x2 image with 2 Mi weights the MatMul is the faster while the model's
    weights stay in the cache, and 0.91x the conv's speed where they are streamed from memory (cost/devices.py
    streamed_matmul_*; a device with a 4 MiB cache stands for a model of more weights than the L3 cache holds). The
    rule applies in all; extraction takes the MatMul only where it pays."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, hw, hw, cin], name="x")
        y = tf.nn.conv2d(tf.nn.relu(x), _const(1, 1, cin, cout), 1, "SAME")
        tf.identity(tf.nn.relu6(tf.nn.bias_add(y, _const(cout))), name="out")
    gd = g.as_graph_def()
    item = GrapplerItem(feeds=["x:0"], fetches=["out:0"])
    device = None if cache_mib is None else dataclasses.replace(CPU, weight_cache_bytes=cache_mib << 20)
    p = TensatPass(EngineOptions(enable_rules=["tf-fold"], min_gain=0.0, device=device))
    out = p.optimize(gd, item)
    matched = [it["matches"].get("F39-conv1x1-as-matmul") for it in p.stats.saturation["per_iteration"]]
    assert any(matched)
    assert sum(n.op == "MatMul" for n in out.node) == matmul and sum(n.op == "Conv2D" for n in out.node) == 1 - matmul
    if matmul:      # the bias reads the reshape back to the image, not the MatMul: TF's remapper has nothing to fuse
        by_name = {n.name: n for n in out.node}
        bias = next(n for n in out.node if n.op == "BiasAdd")
        reshape = by_name[bias.input[0].split(":")[0]]
        assert reshape.op == "Reshape" and by_name[reshape.input[0].split(":")[0]].op == "MatMul"
    data = RNG.normal(size=(2, hw, hw, cin)).astype(np.float32)
    want, got = (run_graph(graph_def, item, [data])[0] for graph_def in (gd, out))
    assert np.max(np.abs(want - got)) <= 1e-5 * np.max(np.abs(want))
