"""--emit_onnx: OUT.onnx beside the SavedModel, from the optimized signature, matching it under onnxruntime."""
import os

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf

from tensat_tf import errors, onnx_export
from tensat_tf.convert import convert
from tensat_tf.options import Options
from tensat_tf.verify import random_inputs

from conftest import save_dense_gelu


def _max_rel(ref, got):
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(ref - got)) / max(np.max(np.abs(ref)), 1e-30))


@pytest.mark.parametrize("name,signature", [("bert_tiny", None), ("keras_cnn", None), ("mlp", "logits")])
def test_emit_onnx_matches_saved_model(zoo_cache, tmp_path, name, signature):
    out = str(tmp_path / "out")
    report = convert(f"zoo:{name}", out, Options(profile=False, emit_onnx=True, onnx_signature=signature))
    path = out + ".onnx"
    assert os.path.isfile(path) and report["onnx"]["path"] == path
    assert not [f for f in os.listdir(out) if f.endswith(".onnx")]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tensat_tf-")]     # no temporary file left
    assert report["onnx"]["max_rel_diff"] <= 1e-5
    sig_name = report["onnx"]["signature"]
    assert sig_name == (signature or "serving_default")

    # independent check: the published SavedModel against onnxruntime, signature keys as ONNX names
    fn = tf.saved_model.load(out).signatures[sig_name]
    specs = report["signatures"][sig_name]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in sess.get_inputs()) == sorted(specs["inputs"])
    assert sorted(o.name for o in sess.get_outputs()) == sorted(specs["outputs"])
    from tensat_tf.io.load import TensorSpec
    in_specs = [TensorSpec(k, k, tf.as_dtype(v["dtype"]), tuple(v["shape"])) for k, v in specs["inputs"].items()]
    for batch in (1, 3):
        feeds = random_inputs(in_specs, batch, seed=100 + batch)
        ref = fn(**feeds)
        got = sess.run(None, {k: v.numpy() for k, v in feeds.items()})
        for o, value in zip(sess.get_outputs(), got):
            assert _max_rel(ref[o.name].numpy(), value) <= 1e-5, (name, o.name, batch)


def test_emit_onnx_failed_check_writes_nothing(zoo_cache, tmp_path, monkeypatch):
    def bad_check(*args, **kwargs):
        raise errors.ExportFailed("ONNX check: simulated mismatch")

    monkeypatch.setattr(onnx_export, "check", bad_check)
    out = str(tmp_path / "out")
    with pytest.raises(errors.ExportFailed):
        convert("zoo:mlp", out, Options(profile=False, emit_onnx=True))
    assert os.listdir(tmp_path) == []


def test_emit_onnx_refuses_existing_file_and_unknown_signature(zoo_cache, tmp_path):
    out = str(tmp_path / "out")
    (tmp_path / "out.onnx").write_bytes(b"")
    with pytest.raises(errors.OutputExists):
        convert("zoo:mlp", out, Options(profile=False, emit_onnx=True))
    os.remove(out + ".onnx")
    with pytest.raises(errors.UnknownName, match="onnx_signature"):
        convert("zoo:mlp", out, Options(profile=False, emit_onnx=True, onnx_signature="nope"))
    assert os.listdir(tmp_path) == []


def _fake_decide(tf_keep: bool, onnx_keep: bool):
    from tensat_tf import speedup

    def decide(paths, signature, batch_sizes, threads=(1, 0), onnx=(), **kwargs):
        keep = onnx_keep if onnx else tf_keep
        d = speedup.Decision(1.2 if keep else 1.0, 1.1 if keep else 0.9, 1.3, 12, "faster" if keep else "no difference")
        settings = [{"batch_size": b, "threads": str(t), "runs": 3, "decision": d.to_json(), "original": {"ms": 1.0},
                     "candidate": {"ms": 1.0}} for b in batch_sizes for t in threads]
        return {"device": "CPU", "keep": keep, "settings": settings, "seconds": 0.0, "stopped": {},
                "reason": "stubbed decision"}
    return decide


def _onnx_ops(path):
    import onnx
    from collections import Counter
    return Counter(n.op_type for n in onnx.load(path).graph.node)


@pytest.mark.parametrize("onnx_keep", [False, True])
def test_emit_onnx_follows_the_never_slower_rule(zoo_cache, tmp_path, monkeypatch, onnx_keep):
    """The SavedModel publishes the optimized graph; the ONNX file is ours only when measured faster than tf2onnx's
    conversion of the user's original, else the original's conversion (checked against the original)."""
    from tensat_tf import latency, zoo
    from tensat_tf.io import load as load_mod
    monkeypatch.setattr(latency, "decide", _fake_decide(True, onnx_keep))
    out = str(tmp_path / "out")
    report = convert("zoo:keras_cnn", out, Options(profile=True, emit_onnx=True))
    assert report["signatures"]["serving_default"]["profile"]["published"] == "optimized"
    choice = report["onnx"]["profile"]
    assert choice["published"] == ("optimized" if onnx_keep else "original") and choice["settings"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tensat_tf-")]     # the other file is gone
    sig = load_mod.load(zoo.resolve("zoo:keras_cnn")).signatures["serving_default"]
    original_ops = _onnx_ops_of(onnx_export.convert_signature(sig, sig.graph_def))
    published_ops = _onnx_ops(out + ".onnx")
    assert (published_ops == original_ops) == (not onnx_keep)
    assert report["onnx"]["ops"] == dict(sorted(published_ops.items()))
    assert report["onnx"]["max_rel_diff"] <= 1e-5


def _onnx_ops_of(model):
    from collections import Counter
    return Counter(n.op_type for n in model.graph.node)


def test_emit_onnx_of_a_signature_that_publishes_the_original(zoo_cache, tmp_path, monkeypatch):
    from tensat_tf import latency
    monkeypatch.setattr(latency, "decide", _fake_decide(False, True))
    report = convert("zoo:mlp", str(tmp_path / "out"), Options(profile=True, emit_onnx=True))
    assert report["signatures"]["serving_default"]["profile"]["published"] == "original"
    assert report["onnx"]["profile"]["published"] == "original" and "settings" not in report["onnx"]["profile"]


@pytest.mark.slow
def test_onnx_aa_is_not_faster(zoo_cache, tmp_path):
    """ONNX Runtime timing in the profile worker: one ONNX file against itself is never "faster"."""
    from tensat_tf import latency
    out = str(tmp_path / "out")
    convert("zoo:mlp", out, Options(profile=False, emit_onnx=True))
    r = latency.decide([], "serving_default", [1, 2], threads=(1,), onnx=[out + ".onnx", out + ".onnx"],
                       spec_path=out, seconds=1.0)
    assert r["keep"] is False and len(r["settings"]) == 2
    assert all(s["decision"]["verdict"] != "faster" and s["original"]["ms"] > 0 for s in r["settings"])


def test_emit_onnx_converts_erfc(tmp_path):
    src = save_dense_gelu(str(tmp_path / "src"), 16, 48)
    out = str(tmp_path / "out")
    report = convert(src, out, Options(profile=False, emit_onnx=True))
    ops = report["onnx"]["ops"]
    assert "Erf" in ops and "Erfc" not in ops           # erfc(x) as 1 - erf(x) (onnx_export.OP_HANDLERS)
    assert report["onnx"]["max_rel_diff"] <= 1e-5
    # independent check, with inputs reaching erfc's tail (|x @ w + b| up to ~20)
    fn = tf.saved_model.load(out).signatures["serving_default"]
    sess = ort.InferenceSession(out + ".onnx", providers=["CPUExecutionProvider"])
    x = (4.0 * np.random.default_rng(1).standard_normal((5, 16))).astype(np.float32)
    ref = fn(x=tf.constant(x))["y"].numpy()
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert _max_rel(ref, got) <= 1e-5


def test_emit_onnx_an_op_onnxruntime_refuses_is_an_export_failure(tmp_path, monkeypatch):
    # without the handler tf2onnx passes Erfc through and onnxruntime refuses the graph: ExportFailed (exit 21,
    # one line), not an internal error, and nothing is written
    monkeypatch.setattr(onnx_export, "OP_HANDLERS", {})
    src = save_dense_gelu(str(tmp_path / "src"), 16, 48)
    out = str(tmp_path / "out")
    with pytest.raises(errors.ExportFailed, match="onnxruntime cannot load"):
        convert(src, out, Options(profile=False, emit_onnx=True))
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_emit_onnx_of_a_kept_xla_call_says_why(tmp_path):
    """Keras runs a grouped Conv3D through an XLA-compiled function TF cannot run natively: the call stays in the
    optimized graph (passes/grouped_conv.py), and the ONNX failure says that is why."""
    import keras
    keras.utils.set_random_seed(7)
    inp = keras.Input((4, 6, 6, 4), name="v")
    keras.Model(inp, keras.layers.Conv3D(4, 3, padding="same", groups=2)(inp)).export(str(tmp_path / "src"),
                                                                                     verbose=False)
    with pytest.raises(errors.ExportFailed, match="a function call the graph keeps"):
        convert(str(tmp_path / "src"), str(tmp_path / "out"), Options(profile=False, emit_onnx=True))
    assert sorted(os.listdir(tmp_path)) == ["src"]
