"""rules/activation.rules: swish after a conv's bias as h + h tanh(h), the halving folded into the conv, in the
model's own dtype."""
import numpy as np
import pytest
import tensorflow as tf

from tensat_tf.item import GrapplerItem
from tensat_tf.options import EngineOptions
from tensat_tf.passes.tensat import TensatPass

from conftest import run_graph

SWISH = ["A01-conv-swish-as-tanh", "A02-conv-swish-as-tanh-left", "A03-depthwise-swish-as-tanh",
         "A04-depthwise-swish-as-tanh-left", "A05-depthwise-scaled-swish-as-tanh",
         "A06-depthwise-scaled-swish-as-tanh-left"]


def _conv_bias_swish(dtype, depthwise: bool, sigmoid_left: bool, scaled: bool = False, hw: int = 8, c: int = 4):
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(dtype, [None, hw, hw, c], name="x")
        if depthwise:
            y = tf.nn.depthwise_conv2d(x, tf.constant(rng.normal(size=(3, 3, c, 1)), dtype), [1, 1, 1, 1], "SAME")
            if scaled:      # a batch norm's scale not folded into the filter yet (A05/A06)
                y = y * tf.constant(rng.uniform(0.5, 1.5, size=c), dtype)
        else:
            y = tf.nn.conv2d(x, tf.constant(rng.normal(size=(3, 3, c, 6)), dtype), 1, "SAME")
        y = tf.nn.bias_add(y, tf.constant(rng.normal(size=y.shape[-1]), dtype))
        s = tf.sigmoid(y)
        tf.identity(s * y if sigmoid_left else y * s, name="out")
    return g.as_graph_def(), GrapplerItem(feeds=("x:0",), fetches=("out:0",))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
@pytest.mark.parametrize("depthwise,sigmoid_left,scaled", [(False, False, False), (False, True, False),
                                                           (True, False, False), (True, True, False),
                                                           (True, False, True), (True, True, True)])
def test_swish_after_a_conv_bias_runs_as_tanh_in_the_models_dtype(dtype, depthwise, sigmoid_left, scaled):
    gd, item = _conv_bias_swish(dtype, depthwise, sigmoid_left, scaled)
    # the cpu-eigen profile prices Sigmoid at twice Tanh; original_cost_factor makes the rewrite certain here
    p = TensatPass(EngineOptions(enable_rules=SWISH, device="cpu-eigen", original_cost_factor=100.0))
    out = p.optimize(gd, item)
    ops = [n.op for n in out.node]
    assert "Tanh" in ops and "Sigmoid" not in ops, ops
    assert sum(p.stats.rules_applied.values()) == 1
    assert all(r[:3] in (("A05", "A06") if scaled else ("A01", "A02", "A03", "A04")) for r in p.stats.rules_applied)
    consts = [n for n in out.node if n.op == "Const"]
    assert consts and all(n.attr["dtype"].type == dtype.as_datatype_enum for n in consts)
    x = np.random.default_rng(1).normal(size=(2, 8, 8, 4)).astype(dtype.as_numpy_dtype)
    want, = run_graph(gd, item, [x])
    got, = run_graph(out, item, [x])
    tol = 1e-5 if dtype == tf.float32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("depthwise", [False, True])
def test_the_onednn_profile_keeps_the_swish(depthwise):
    """With oneDNN TF fuses conv + bias + swish into one kernel, and runs a depthwise conv's swish as one _MklSwish
    (tensat_tf/cost/fusion.py, "swish", "mklswish"): the rules' form, three kernels after the conv, is not cheaper
    there, so the pass keeps its input. (Priced as a Sigmoid and a Mul, the depthwise swish took the Tanh form.)"""
    gd, item = _conv_bias_swish(tf.float32, depthwise, False, hw=56, c=32)    # large enough for Tanh to pay
    p = TensatPass(EngineOptions(enable_rules=SWISH, device="cpu"))
    out = p.optimize(gd, item)
    assert "Sigmoid" in [n.op for n in out.node] and not p.stats.rules_applied, p.stats.rules_applied
