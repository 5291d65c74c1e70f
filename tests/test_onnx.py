"""--emit_onnx: OUT.onnx beside the SavedModel, from the optimized signature, matching it under onnxruntime."""
import os

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf

from tensat_tf import errors, onnx_export
from tensat_tf.convert import Options, convert
from tensat_tf.verify import random_inputs


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
