"""tensat_tf/egraph/runtime_names.py: the exact GELU the cost model prices fused is fused by TF's runtime."""
import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf import grappler
from tensat_tf.egraph import runtime_names
from tensat_tf.io import load as load_mod
from tensat_tf.options import EngineOptions
from tensat_tf.passes import canonicalize, pipeline
from tensat_tf.passes.tensat import TensatPass

from conftest import save_dense_gelu


ONEDNN = pytest.mark.skipif(os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0",
                            reason="oneDNN off: TF's remapper fuses no GELU (cost/fusion.py, Without oneDNN)")


@pytest.fixture(scope="module")
def dense_gelu_path(tmp_path_factory):
    return save_dense_gelu(str(tmp_path_factory.mktemp("dense_gelu") / "m"), 64, 256, 64)


@pytest.fixture(scope="module")
def dense_gelu(dense_gelu_path):
    loaded = load_mod.load(dense_gelu_path, tags=None, only=["serving_default"], allow_ops=())
    sig = loaded.signatures["serving_default"]
    return sig.graph_def, sig.item


def _at_run_time(graph_def, item):
    """(Erfc kernels, fused op lists of the _Fused* kernels) after TF's Grappler as a served call runs it."""
    g = grappler.runtime_graph(graph_def, item)
    ops = collections.Counter(n.op for n in g.node)
    fused = sorted(tuple(x.decode() for x in n.attr["fused_ops"].list.s) for n in g.node if n.op.startswith("_Fused"))
    return ops["Erfc"], fused


@ONEDNN
def test_the_extracted_gelu_fuses_at_run_time_as_priced(dense_gelu, monkeypatch):
    gd, item = dense_gelu
    p = TensatPass(EngineOptions(min_gain=0.0))
    out, _ = pipeline.run(gd, item, [canonicalize, p])
    assert p.stats.rules_applied                      # the GELU regrouped (F31 or the reassociations) and priced fused
    assert _at_run_time(out, item) == (0, [("BiasAdd", "GeluExact")])
    assert any("/." in n.name and n.name.endswith("_gelu") for n in out.node)
    # the control: the same choice emitted with the emitter's own names; TF's arithmetic optimizer regroups the
    # product before the remapper sees it (this pins the behaviour runtime_names.py works around: if a TF release
    # changes it, this line says so)
    monkeypatch.setattr(runtime_names, "precede", lambda g, orders: 0)
    p = TensatPass(EngineOptions(min_gain=0.0))
    plain, _ = pipeline.run(gd, item, [canonicalize, p])
    assert _at_run_time(plain, item) == (1, [("BiasAdd",)])


@ONEDNN
def test_no_name_order_where_the_program_runs_the_pattern_alone(dense_gelu, monkeypatch):
    """The emitter renames only the nodes the extracted program runs fused (Emitter.precedences asks
    extract/dag.py unfused); with every fused node taken as running alone nothing is renamed."""
    from tensat_tf.egraph import emit as emit_mod
    gd, item = dense_gelu
    p = TensatPass(EngineOptions(min_gain=0.0))
    out, _ = pipeline.run(gd, item, [canonicalize, p])
    assert any(n.name.endswith("_gelu") for n in out.node)
    monkeypatch.setattr(emit_mod, "unfused", lambda g, choice, needed=None: set(g.fused))
    p = TensatPass(EngineOptions(min_gain=0.0))
    out, _ = pipeline.run(gd, item, [canonicalize, p])
    assert p.stats.rules_applied and not any(n.name.endswith("_gelu") for n in out.node)


@ONEDNN
@pytest.mark.parametrize("device", ["cpu-eigen", "gpu"])
def test_the_names_do_not_depend_on_the_device_priced(dense_gelu, device):
    """A model converted for a device whose profile prices no GELU fusion (Eigen's CPU kernels, a GPU) and served
    where TF's oneDNN remapper runs still fuses: the name orders come from TF's patterns, not from the prices. The
    remapper's grouping is forced here (the rewritten forms priced 10x cheaper than the input's)."""
    gd, item = dense_gelu
    rules = ["F05-add-to-bias", "F22-mul-scalar-right", "F31-gelu-remapper-grouping", "F31b-gelu-remapper-grouping"]
    p = TensatPass(EngineOptions(min_gain=0.0, device=device, original_cost_factor=10.0, enable_rules=rules))
    out, _ = pipeline.run(gd, item, [canonicalize, p])
    assert p.stats.rules_applied.get("F31-gelu-remapper-grouping") or p.stats.rules_applied.get(
        "F31b-gelu-remapper-grouping")
    assert _at_run_time(out, item) == (0, [("BiasAdd", "GeluExact")])


@ONEDNN
def test_the_names_survive_saving(dense_gelu_path, tmp_path):
    """What convert publishes, loaded back as a server loads it, still fuses the GELU."""
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    out = str(tmp_path / "out")
    report = convert(dense_gelu_path, out, Options(profile=False, engine=EngineOptions(min_gain=0.0)))
    assert report["verification"]["passed"]
    sig = load_mod.load(out, tags=None, only=["serving_default"], allow_ops=()).signatures["serving_default"]
    assert any(n.name.endswith("_gelu") and "/." in n.name for n in sig.graph_def.node)
    assert _at_run_time(sig.graph_def, sig.item) == (0, [("BiasAdd", "GeluExact")])


def test_only_the_emitters_own_nodes_are_renamed_to_sort_first():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
        w = tf.constant(np.ones((8, 8), np.float32))
        y = tf.nn.bias_add(tf.matmul(x, w), tf.constant(np.ones(8, np.float32)), name="tensat/BiasAdd_0")
        e = tf.math.erfc(tf.math.negative(y) * 0.7071)
        inner = tf.multiply(0.5, e, name="tensat/Mul_3")
        tf.identity(tf.multiply(inner, y, name="tensat/Mul_4"), name="out")
        other = tf.multiply(0.5, tf.math.erfc(tf.math.negative(y) * 0.7071), name="kept/Mul")
        tf.identity(tf.multiply(other, y), name="out2")
        tf.identity(y, name="tensat/.BiasAdd_0_gelu")      # the first name taken: the rename takes a suffix
    gd = g.as_graph_def()
    orders = [("tensat/Mul_3", "tensat/BiasAdd_0", "gelu"), ("kept/Mul", "tensat/BiasAdd_0", "gelu"),
              ("tensat/Mul_4", "x", "gelu"), ("tensat/missing", "tensat/BiasAdd_0", "gelu")]
    assert runtime_names.precede(gd, orders) == 1
    names = {n.name for n in gd.node}
    assert "tensat/.BiasAdd_0_gelu_1" in names and "tensat/Mul_3" not in names and "kept/Mul" in names
    assert "tensat/Mul_4" in names                            # already sorted before "x"
    assert "tensat/.BiasAdd_0_gelu_1" < "tensat/BiasAdd_0"
    root = next(n for n in gd.node if n.name == "tensat/Mul_4")
    assert list(root.input) == ["tensat/.BiasAdd_0_gelu_1", "tensat/BiasAdd_0"]
    assert runtime_names.precede(gd, [("tensat/.BiasAdd_0_gelu_1", "tensat/BiasAdd_0", "gelu")]) == 0
    tf.graph_util.import_graph_def(gd, name="")             # still a valid graph
