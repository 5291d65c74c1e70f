"""passes/grouped_conv.py: Keras 3's grouped convolutions, which TF runs on CPU through an XLA-compiled function call,
become DepthwiseConv2dNative when they are depthwise (groups = input channels), computing the same values; other
grouped convolutions are inlined where TF runs a grouped Conv2D itself (native_groups), and keep their call where it
does not."""
import collections

import numpy as np
import pytest
from conftest import run_graph

from tensat_tf.convert import convert
from tensat_tf.cost import devices
from tensat_tf.io import load
from tensat_tf.options import EngineOptions, Options
from tensat_tf.passes import canonicalize, grouped_conv


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """[N, 9, 9, 4] -> depthwise as groups=4 (multiplier 2) -> groups=2 (stride 2) -> groups=8 with unequal strides
    (depthwise, but DepthwiseConv2dNative needs equal ones) -> groups=8 dilated (SpaceToBatchND in the function)."""
    import keras
    from keras import layers
    keras.utils.set_random_seed(3)
    inp = keras.Input((9, 9, 4), name="x")
    y = layers.Conv2D(8, 3, groups=4, padding="same", name="dw")(inp)
    y = layers.Conv2D(8, 3, groups=2, strides=2, name="grouped")(y)
    y = layers.Conv2D(8, 1, groups=8, strides=(1, 2), name="dw_uneven")(y)
    y = layers.Conv2D(8, 2, groups=8, padding="same", dilation_rate=2, name="dw_dilated")(y)
    path = str(tmp_path_factory.mktemp("grouped") / "m")
    keras.Model(inp, y).export(path, verbose=False)
    return path


# this runtime runs a grouped Conv2D with its bias fused (oneDNN); TF's Eigen kernels refuse that fusion, so there the
# inlined graphs are only checked for their form
NATIVE = devices.runtime_cpu().grouped_conv


def _ops(gd):
    return collections.Counter(n.op for n in gd.node)


def test_depthwise_calls_become_depthwise_convs_with_the_same_values(grouped):
    sig = load.load(grouped, only=["serving_default"]).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    assert _ops(gd)["StatefulPartitionedCall"] == 4
    out = grouped_conv.optimize(gd, sig.item)
    ops = _ops(out)
    assert ops["DepthwiseConv2dNative"] == 1 and ops["StatefulPartitionedCall"] == 3
    (dw,) = [n for n in out.node if n.op == "DepthwiseConv2dNative"]
    assert list(dw.attr["strides"].list.i) == [1, 1, 1, 1] and dw.attr["padding"].s == b"SAME"
    assert len(out.library.function) == 3         # the replaced call's function went with it
    x = np.random.default_rng(0).standard_normal((2, 9, 9, 4)).astype("f4")
    (want,), (got,) = run_graph(gd, sig.item, [x]), run_graph(out, sig.item, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert grouped_conv.optimize(out, sig.item) is out     # nothing left to do: the graph itself comes back


def test_native_groups_inline_every_other_call_with_the_same_values(grouped):
    """The grouped conv, the depthwise one of unequal strides and the dilated one (SpaceToBatchND + Conv2D +
    BatchToSpaceND in its function) inlined, their functions gone, the values the same."""
    sig = load.load(grouped, only=["serving_default"]).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    out = grouped_conv.Pass(native_groups=True).optimize(gd, sig.item)
    ops = _ops(out)
    assert "StatefulPartitionedCall" not in ops and len(out.library.function) == 0
    assert ops["DepthwiseConv2dNative"] == 1 and ops["Conv2D"] == 3
    assert ops["SpaceToBatchND"] == 1 and ops["BatchToSpaceND"] == 1
    names = {n.name for n in out.node}
    assert all(n.name in names for n in gd.node if n.op == "StatefulPartitionedCall")    # consumers read the same names
    if NATIVE:
        x = np.random.default_rng(1).standard_normal((3, 9, 9, 4)).astype("f4")
        (want,), (got,) = run_graph(gd, sig.item, [x]), run_graph(out, sig.item, [x])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    kept = grouped_conv.Pass(native_groups=False).optimize(gd, sig.item)
    assert _ops(kept)["StatefulPartitionedCall"] == 3


def test_a_grouped_conv1d_on_a_dynamic_length_is_inlined(tmp_path):
    """Keras' Conv1D(groups=...) function: ExpandDims of the input and of the filter, the Conv2D, a Squeeze; dilated,
    SpaceToBatchND / BatchToSpaceND around it, their paddings computed from the dynamic length in the function."""
    import keras
    from keras import layers
    keras.utils.set_random_seed(4)
    inp = keras.Input((None, 8), name="x")
    y = layers.Conv1D(12, 3, groups=4, padding="same", activation="relu")(inp)
    y = layers.Conv1D(6, 2, groups=2, strides=2)(y)
    y = layers.Conv1D(6, 3, groups=3, dilation_rate=2, padding="causal")(y)
    path = str(tmp_path / "m")
    keras.Model(inp, y).export(path, verbose=False)
    sig = load.load(path, only=["serving_default"]).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    out = grouped_conv.optimize(gd, sig.item, native_groups=True)
    ops = _ops(out)
    assert "StatefulPartitionedCall" not in ops and ops["Conv2D"] == 3 and ops["SpaceToBatchND"] == 1
    # lengths with a non-empty output: on an empty one TF's oneDNN Conv2D returns its input's shape, grouped or not
    # (eager tf.nn.conv2d too), where XLA's call returned the empty tensor
    for length in (2, 7, 20) if NATIVE else ():
        x = np.random.default_rng(length).standard_normal((2, length, 8)).astype("f4")
        (want,), (got,) = run_graph(gd, sig.item, [x]), run_graph(out, sig.item, [x])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_convert_runs_the_pass_and_can_be_told_not_to(grouped, tmp_path):
    only = dict(signatures=["serving_default"], profile=False, engine=EngineOptions(enable_rules=[]))
    rep = convert(grouped, str(tmp_path / "on"), Options(**only))
    s = rep["signatures"]["serving_default"]
    # the calls left are the ones this runtime cannot run natively (none with oneDNN's grouped Conv2D)
    left = 0 if NATIVE else 3
    assert s["ops_after"].get("DepthwiseConv2dNative") == 1 and s["ops_after"].get("StatefulPartitionedCall", 0) == left
    rep = convert(grouped, str(tmp_path / "eigen"), Options(**dict(only, engine=EngineOptions(enable_rules=[],
                                                                                                device="cpu-eigen"))))
    s = rep["signatures"]["serving_default"]
    assert s["ops_after"].get("DepthwiseConv2dNative") == 1 and s["ops_after"].get("StatefulPartitionedCall") == 3
    assert [p["name"] for p in s["passes"]][:2] == ["canonicalize", "grouped_conv"]
    rep = convert(grouped, str(tmp_path / "off"), Options(grouped_conv=False, **only))
    s = rep["signatures"]["serving_default"]
    assert "DepthwiseConv2dNative" not in s["ops_after"] and s["ops_after"].get("StatefulPartitionedCall") == 4
