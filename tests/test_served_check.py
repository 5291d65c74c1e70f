"""tensat_tf/served_check.py and convert's use of it: a Grappler optimizer that fails only when TF serves the written
SavedModel (it logs the failure and runs the function without that optimizer's rewrites) sends the signature back
to the original graph, unless the original's served call fails the same way."""
import os

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf import served_check
from tensat_tf.convert import convert
from tensat_tf.io.load import TensorSpec
from tensat_tf.options import EngineOptions, Options

ONEDNN = pytest.mark.skipif(os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0",
                            reason="oneDNN off: TF's remapper has no conv + bias + add + activation fusion")


def test_failures_are_read_between_the_markers():
    log = "\n".join([
        "E0000 00:00:1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error",    # before any marker
        served_check.MARK + "serve",
        "E0000 00:00:2 meta_optimizer.cc:967] remapper failed: INVALID_ARGUMENT: Mutation::Apply error: fanout",
        "W0000 00:00:3 some_other.cc:1] layout failed: not from meta_optimizer",
        served_check.MARK + "serving_default",
        "E0000 00:00:4 meta_optimizer.cc:967] layout failed: INVALID_ARGUMENT: Size of values 0",
        "E0000 00:00:5 meta_optimizer.cc:967] remapper failed: INVALID_ARGUMENT: x",
        served_check.MARK + "other",
        "E0000 00:00:7 tfg_optimizer_hook.cc:135] tfg_optimizer{any(tfg-consolidate-attrs,tfg-toposort)} failed: "
        "INVALID_ARGUMENT: Node a/Add has an empty op name",
        "W0000 00:00:8 optimize_function_graph_utils.cc:634] Ignoring multi-device function optimization failure",
        served_check.MARK,
        "E0000 00:00:6 meta_optimizer.cc:967] remapper failed: after the end marker",
    ])
    got = served_check.parse(log, ["serve", "serving_default", "other"])
    assert got == {"serve": [{"optimizer": "remapper",
                              "error": "INVALID_ARGUMENT: Mutation::Apply error: fanout"}],
                   "serving_default": [{"optimizer": "layout", "error": "INVALID_ARGUMENT: Size of values 0"},
                                       {"optimizer": "remapper", "error": "INVALID_ARGUMENT: x"}],
                   "other": [{"optimizer": "tfg_optimizer",
                              "error": "INVALID_ARGUMENT: Node a/Add has an empty op name"}]}


def test_a_check_that_cannot_run_says_why_in_one_line(tmp_path):
    with pytest.raises(served_check.CheckError, match="served check of .* failed: ") as e:
        served_check.failures(str(tmp_path), {"serving_default": []}, unknown_dim=8)
    assert "\n" not in str(e.value)


def test_the_call_is_made_at_verifications_first_batch_and_its_error_is_named(tmp_path):
    """A graph network's edges index its batch of nodes: the user verifies it at --verify_batch_sizes=2,4, and the
    served call is made at 2. At 1 it fails, and the line says why (TF's own last line names only a node)."""
    class Gather(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def f(self, x):
            return {"y": tf.gather(x, [1]) * 2.0}
    m = Gather()
    tf.saved_model.save(m, str(tmp_path), signatures={"serving_default": m.f})
    specs = {"serving_default": [TensorSpec("x", "", tf.float32, (-1, 3))]}
    assert served_check.failures(str(tmp_path), specs, unknown_dim=8, batch_size=2) == {"serving_default": []}
    with pytest.raises(served_check.CheckError) as e:
        served_check.failures(str(tmp_path), specs, unknown_dim=8, batch_size=1)
    assert "signature serving_default at batch 1: op GatherV2 (node " in str(e.value)
    assert "InvalidArgumentError: indices[0] = 1 is not in [0, 1)" in str(e.value) and "\n" not in str(e.value)


def test_a_check_that_cannot_finish_publishes_the_original(tmp_path, monkeypatch, zoo_cache):
    def broken(path, signatures, **kw):
        raise served_check.CheckError("the served check of x ran past 1 s")
    monkeypatch.setattr(served_check, "failures", broken)
    rep = convert("zoo:mlp", str(tmp_path / "out"), Options(served_check=True))
    for s in rep["signatures"].values():
        assert s["served_check"]["published"] == "original" and "ran past" in s["served_check"]["error"]
        assert s["nodes_after"] == s["nodes_before"]


def _save_folded_hazard(path):
    """conv(relu(x)) + (conv(x) * s + b), read by a ReLU and an average pool. The original has no conv + bias +
    add + activation for TF's remapper (a Mul sits between the conv and its bias); once rule F02 folds the scale
    into the filter it has, and the remapper fails on it when served (passes/remapper_guard.py)."""
    class M(tf.Module):
        def __init__(self):
            rng = np.random.RandomState(0)
            self.w = {f"c{c}": [tf.Variable(rng.randn(1, 1, c, c).astype("f")) for _ in range(2)]
                      + [tf.Variable(rng.rand(c).astype("f") + 0.5), tf.Variable(rng.randn(c).astype("f"))]
                      for c in (8, 16)}

        def block(self, x, c):
            wa, wb, scale, bias = self.w[f"c{c}"]
            s = tf.nn.conv2d(tf.nn.relu(x), wa, 1, "SAME") + (tf.nn.conv2d(x, wb, 1, "SAME") * scale + bias)
            return {"y": tf.nn.relu(s) + tf.nn.avg_pool2d(s, 1, 1, "SAME")}

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 8], tf.float32)])
        def serve(self, x):
            return self.block(x, 8)

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 16], tf.float32)])
        def other(self, x):
            return self.block(x, 16)
    m = M()
    # two signatures of one function, as Keras 3's export writes serve and serving_default, and a third of another
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve, "serve": m.serve, "other": m.other})


# F39 would write the model's 1x1 convs of 4x4 images as MatMuls, which no remapper pattern takes: no hazard left
NO_F39 = EngineOptions(disable_rules=["F39-conv1x1-as-matmul"])


@pytest.mark.slow
@ONEDNN
def test_a_remapper_failure_of_the_output_alone_publishes_the_original(tmp_path):
    _save_folded_hazard(str(tmp_path / "src"))
    rep = convert(str(tmp_path / "src"), str(tmp_path / "off"),
                  Options(served_check=True, remapper_guard=False, engine=NO_F39))
    # every signature: TF logs one such failure a minute per process, so a second graph served in the same process
    # would have shown none (convert serves each distinct graph in a process of its own)
    for name in ("other", "serve", "serving_default"):
        sc = rep["signatures"][name]["served_check"]
        assert [f["optimizer"] for f in sc["failures"]] == ["remapper"] and sc["original_failures"] == []
        assert sc["published"] == "original" and "remapper" in sc["reason"]
        assert rep["signatures"][name]["ops_after"].get("Mul") == 1      # the user's graph, scale and all
    from tensat_tf.cli.convert_cmd import _table
    assert "  served check: remapper failed: INVALID_ARGUMENT: Mutation::Apply error" in _table(rep)
    for name, c in (("other", 16), ("serve", 8), ("serving_default", 8)):
        specs = {name: [TensorSpec("x", "", tf.float32, (-1, 4, 4, c))]}
        assert served_check.failures(str(tmp_path / "off"), specs, unknown_dim=8) == {name: []}
    # with the guard (the default) the optimized graph is served without a failure and published
    rep = convert(str(tmp_path / "src"), str(tmp_path / "on"), Options(served_check=True, engine=NO_F39))
    for name in ("other", "serve", "serving_default"):
        assert rep["signatures"][name]["served_check"] == {"failures": [], "published": "optimized"}
    assert "Maximum" in rep["signatures"]["serving_default"]["ops_after"]
