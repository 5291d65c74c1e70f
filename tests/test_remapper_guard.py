"""passes/remapper_guard.py: a conv's bias, a residual Add read by an activation and by another node. TF's remapper
fails on that at run time (and then runs the whole function without its fusions); the guard writes the activation
in an equal form it leaves alone."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_graph

from tensat_tf.item import GrapplerItem
from tensat_tf.passes import remapper_guard


ACTIVATIONS = {"Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu,
               "LeakyRelu": lambda t, name=None: tf.nn.leaky_relu(t, 0.3, name=name),
               "LeakyRelu(1.5)": lambda t, name=None: tf.nn.leaky_relu(t, 1.5, name=name)}
ONEDNN = pytest.mark.skipif(os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0",
                            reason="oneDNN off: TF's remapper has no conv + bias + add + activation fusion")


def _graph(activation="Relu", second_reader=True, bias_readers=1, identity=False):
    """x -> Conv2D a; x -> Conv2D b -> BiasAdd; Add(a, b) -> activation (-> y); Add -> AvgPool (-> z)."""
    g = tf.Graph()
    rng = np.random.RandomState(0)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 4, 8], name="x")
        a = tf.nn.conv2d(x, tf.constant(rng.randn(1, 1, 8, 8).astype("f")), 1, "SAME", name="conv_a")
        b = tf.nn.bias_add(tf.nn.conv2d(x, tf.constant(rng.randn(1, 1, 8, 8).astype("f")), 1, "SAME", name="conv_b"),
                           tf.constant(rng.randn(8).astype("f")), name="bias")
        s = tf.add(a, b, name="add")
        if identity:        # Grappler drops it before the remapper runs: the Add's readers are the Identity's
            s = tf.identity(s, name="add_identity")
        act = ACTIVATIONS[activation]
        y = tf.identity(act(s, name="act"), name="y")
        fetches = [y.name]
        if second_reader:
            fetches.append(tf.identity(tf.nn.avg_pool2d(s, 1, 1, "SAME", name="pool"), name="z").name)
        if bias_readers > 1:
            fetches.append(tf.identity(b * 2.0, name="w").name)
    return g.as_graph_def(), GrapplerItem(feeds=("x:0",), fetches=tuple(fetches))


@pytest.mark.parametrize("activation,form", [("Relu", ["Maximum"]), ("Relu6", ["ClipByValue"]),
                                             ("Elu", ["Greater", "Expm1", "SelectV2"]),
                                             ("LeakyRelu", ["Greater", "Mul", "SelectV2"]),
                                             ("LeakyRelu(1.5)", ["Greater", "Mul", "SelectV2"])])
def test_the_hazard_is_written_as_an_equal_form(activation, form):
    for identity in (False, True):
        gd, item = _graph(activation, identity=identity)
        assert remapper_guard.hazards(gd, item) == ["act"]
        out = remapper_guard.optimize(gd, item)
        ops = {n.name: n.op for n in out.node}
        assert ops["act"] == form[-1] and activation.split("(")[0] not in ops.values()
        assert [n.op for n in out.node if n.name.startswith("act/") and n.op != "Const"] == form[:-1]
        feeds = [np.random.RandomState(1).randn(2, 4, 4, 8).astype("f")]
        for want, got in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
            # the values TF's kernels compute; its Elu rounds exp(x) - 1 slightly otherwise than Expm1 does
            np.testing.assert_allclose(got, want, rtol=1e-6 if activation == "Elu" else 0, atol=0)


def test_no_hazard_leaves_the_graph_alone():
    for gd, item in (_graph(second_reader=False), _graph(bias_readers=2)):
        # the Add read by the ReLU alone fuses whole; a bias read twice does not fuse at all
        assert remapper_guard.hazards(gd, item) == []
        assert remapper_guard.optimize(gd, item) is gd


def _residual_chain():
    """x -> 1x1 conv + bias = s; twice s <- s + bias(conv3x3(relu(s))); relu(s): two residual Adds, each read by the
    next block's ReLU and by the next Add."""
    g = tf.Graph()
    rng = np.random.RandomState(0)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 4, 32], name="x")
        s = tf.nn.bias_add(tf.nn.conv2d(x, tf.constant(rng.randn(1, 1, 32, 32).astype("f")), 1, "SAME"),
                           tf.constant(rng.randn(32).astype("f")))
        for k in range(2):
            y = tf.nn.bias_add(tf.nn.conv2d(tf.nn.relu(s), tf.constant(rng.randn(3, 3, 32, 32).astype("f")), 1, "SAME"),
                               tf.constant(rng.randn(32).astype("f")))
            s = tf.add(s, y, name=f"add{k}")
        tf.identity(tf.nn.relu(s), name="y")
    return g.as_graph_def(), GrapplerItem(feeds=("x:0",), fetches=("y:0",))


@ONEDNN
def test_the_tensat_pass_passes_grapplers_check_in_the_guards_form():
    """Offline Grappler (tensat_tf/grappler.py, the tensat pass's check) fails on the residual chain, as it did on
    Xception's chain once rule F39 gave it static shapes; the guard's form passes, and the pass returns that form
    unless the user turned the guard off."""
    from tensat_tf import grappler
    from tensat_tf.passes.tensat import TensatPass
    gd, item = _residual_chain()
    assert "Mutation::Apply error" in (grappler.runtime_error(gd, item) or "")
    assert grappler.runtime_error(remapper_guard.optimize(gd, item), item) is None
    p = TensatPass()
    out = p.optimize(gd, item)
    assert p.stats.rules_applied and p.stats.remapper_guarded and not p.stats.kept_input
    assert grappler.runtime_error(out, item) is None and "Maximum" in {n.op for n in out.node}
    feeds = [np.random.RandomState(1).randn(2, 4, 4, 32).astype("f")]
    np.testing.assert_allclose(run_graph(out, item, feeds)[0], run_graph(gd, item, feeds)[0], rtol=1e-4, atol=1e-3)
    off = TensatPass(remapper_guard=False)
    out = off.optimize(gd, item)
    assert not off.stats.remapper_guarded and "Maximum" not in {n.op for n in out.node}


@ONEDNN
def test_an_input_grappler_passes_gives_way_to_the_guards_form_not_back(monkeypatch):
    """Xception's case: the input passes Grappler's check (its shapes unknown to it), the pass's output fails it. The
    output in the guard's form is returned; with the guard off, the input."""
    from tensat_tf import grappler
    from tensat_tf.passes.tensat import TensatPass
    gd, item = _residual_chain()
    check = grappler.runtime_error
    monkeypatch.setattr(grappler, "runtime_error", lambda g, *a: None if g is gd else check(g, *a))
    p = TensatPass()
    out = p.optimize(gd, item)
    assert out is not gd and p.stats.remapper_guarded and "Maximum" in {n.op for n in out.node}
    off = TensatPass(remapper_guard=False)
    assert off.optimize(gd, item) is gd
    assert off.stats.kept_input.startswith("TF's Grappler fails") and not off.stats.rules_applied


SERVE = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf
    f = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    spec = f.structured_input_signature[1]
    f(**{k: tf.constant(np.ones([1] + s.shape.as_list()[1:], s.dtype.as_numpy_dtype)) for k, s in spec.items()})
""")


def _remapper_failed(path) -> bool:
    """Serve `path` once in a fresh process with TF's error log on: did the remapper fail?"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    r = subprocess.run([sys.executable, "-c", SERVE, path], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return "remapper failed" in r.stderr


@pytest.mark.slow
@ONEDNN
@pytest.mark.parametrize("activation", ["Relu", "Relu6", "Elu", "LeakyRelu"])
def test_served_output_keeps_the_remapper(tmp_path, activation):
    """The original model makes TF's remapper fail when served (so a TF release that fixes it fails this test, and
    the guard can go); the converted one, through the guard alone (no rules), does not. Served, not checked offline:
    offline Grappler does not fail on the original, and it took a served check to see that the remapper turns
    Maximum(x, alpha x) back into a LeakyRelu."""
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    act = ACTIVATIONS[activation]

    class M(tf.Module):
        def __init__(self):
            rng = np.random.RandomState(0)
            self.wa, self.wb = (tf.Variable(rng.randn(1, 1, 8, 8).astype("f")) for _ in range(2))
            self.b = tf.Variable(rng.randn(8).astype("f"))

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 8], tf.float32)])
        def serve(self, x):
            s = tf.nn.conv2d(x, self.wa, 1, "SAME") + tf.nn.bias_add(tf.nn.conv2d(x, self.wb, 1, "SAME"), self.b)
            return {"y": act(s) + tf.nn.avg_pool2d(s, 1, 1, "SAME")}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "src"), signatures={"serving_default": m.serve})
    assert _remapper_failed(str(tmp_path / "src"))
    rep = convert(str(tmp_path / "src"), str(tmp_path / "out"),
                  Options(profile=False, warmup=False, engine=EngineOptions(enable_rules=[])))
    assert [p["name"] for p in rep["signatures"]["serving_default"]["passes"]][-1] == "remapper_guard"
    assert not _remapper_failed(str(tmp_path / "out"))
    if activation == "Relu":
        off = convert(str(tmp_path / "src"), str(tmp_path / "off"),
                      Options(profile=False, warmup=False, remapper_guard=False, engine=EngineOptions(enable_rules=[])))
        assert off["verification"]["passed"] and _remapper_failed(str(tmp_path / "off"))


def _depthwise_graph(bias_readers=1, add="AddV2"):
    """x -> DepthwiseConv2dNative -> BiasAdd -> add with x (-> Relu -> y); the bias read once more when asked."""
    g = tf.Graph()
    rng = np.random.RandomState(2)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 8], name="x")
        d = tf.nn.depthwise_conv2d(x, tf.constant(rng.randn(3, 3, 8, 1).astype("f")), [1, 1, 1, 1], "SAME", name="dw")
        b = tf.nn.bias_add(d, tf.constant(rng.randn(8).astype("f")), name="bias")
        s = tf.math.add_n([b, x], name="add") if add == "AddN" else tf.add(b, x, name="add")
        fetches = [tf.identity(tf.nn.relu(s), name="y").name]
        if bias_readers > 1:
            fetches.append(tf.identity(b * 2.0, name="w").name)
    return g.as_graph_def(), GrapplerItem(feeds=("x:0",), fetches=tuple(fetches))


def test_a_depthwise_convs_bias_before_an_add_becomes_an_addv2():
    for add in ("AddV2", "AddN"):
        gd, item = _depthwise_graph(add=add)
        assert remapper_guard.depthwise_bias_hazards(gd, item) == ["bias"] and remapper_guard.hazards(gd, item) == []
        out = remapper_guard.optimize(gd, item)
        assert {n.name: n.op for n in out.node}["bias"] == "AddV2"
        feeds = [np.random.RandomState(3).randn(2, 6, 6, 8).astype("f")]
        # equal up to rounding: the session may fuse the original's conv and bias into one oneDNN kernel
        np.testing.assert_allclose(run_graph(out, item, feeds)[0], run_graph(gd, item, feeds)[0], rtol=1e-5, atol=1e-5)
    gd, item = _depthwise_graph(bias_readers=2)     # the remapper fuses nothing into a bias read twice
    assert remapper_guard.depthwise_bias_hazards(gd, item) == [] and remapper_guard.optimize(gd, item) is gd


@pytest.mark.slow
@ONEDNN
def test_a_served_depthwise_conv_bias_and_residual_keep_grapplers_rewrites(tmp_path):
    """Keras' Conv2D(groups=channels) with a bias before a residual Add: the call inlined as a depthwise conv
    (passes/grouped_conv.py), TF's remapper leaves a node without an op and TF serves the function without any of
    Grappler's rewrites; the served check now sees that (TFG's failure), and the guard's AddV2 avoids it."""
    import keras
    from keras import layers

    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    keras.utils.set_random_seed(6)
    inp = keras.Input((8, 8, 16), name="x")
    conv = layers.Conv2D(16, 3, padding="same", groups=16)
    y = layers.Add()([inp, conv(inp)])
    conv.bias.assign(np.random.RandomState(4).randn(16).astype("f"))
    keras.Model(inp, y).export(str(tmp_path / "src"), verbose=False)
    only = dict(signatures=["serving_default"], served_check=True, engine=EngineOptions(enable_rules=[]))
    off = convert(str(tmp_path / "src"), str(tmp_path / "off"), Options(remapper_guard=False, **only))
    sc = off["signatures"]["serving_default"]["served_check"]
    assert {f["optimizer"] for f in sc["failures"]} == {"tfg_optimizer"} and sc["published"] == "original"
    on = convert(str(tmp_path / "src"), str(tmp_path / "on"), Options(**only))
    s = on["signatures"]["serving_default"]
    assert s["served_check"] == {"failures": [], "published": "optimized"}
    assert s["ops_after"]["DepthwiseConv2dNative"] == 1 and "BiasAdd" not in s["ops_after"]
