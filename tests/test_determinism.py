"""Conversion is deterministic: the same model and flags give byte-identical files, whatever the output folder's name
and whatever else the process did before (TF's function names and capture names come from a process-wide counter)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf.convert import convert
from tensat_tf.options import Options

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]


def files(path):
    """relative path -> bytes of every file under path."""
    out = {}
    for root, _, names in os.walk(path):
        for name in names:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = f.read()
    return out


def assert_same_files(a, b):
    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb)
    assert {"saved_model.pb", "fingerprint.pb", os.path.join("variables", "variables.index")} <= set(fa)
    assert [k for k in sorted(fa) if fa[k] != fb[k]] == []


@pytest.fixture(scope="module")
def first(zoo_cache, tmp_path_factory):
    """name -> the first in-process conversion of zoo:name (made once, compared against by every test)."""
    done = {}

    def get(name):
        if name not in done:
            done[name] = str(tmp_path_factory.mktemp("first") / "out")
            convert(f"zoo:{name}", done[name], Options())
        return done[name]
    return get


@pytest.mark.parametrize("name", ["bert_tiny", "keras_cnn"])
def test_same_process_different_folders(name, first, tmp_path):
    a = first(name)
    b = str(tmp_path / "a_much_longer_output_name")
    convert(f"zoo:{name}", b, Options())
    assert_same_files(a, b)


@pytest.mark.slow
def test_subprocess_matches_in_process(first, tmp_path):
    """lstm: two Keras signatures, each with its own frozen While cond/body in the library, all renamed."""
    here = first("lstm")
    there = str(tmp_path / "there")
    # --noprofile: the in-process conversion does not profile either, and --profile's keep-or-not decision is a
    # timing measurement (byte-reproducible builds pass --noprofile)
    proc = subprocess.run(CLI + ["convert", "zoo:lstm", f"--output_dir={there}", "--noprofile"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert_same_files(here, there)


def test_fingerprint_matches_the_written_files(first):
    """fingerprint.pb is TF's own, computed for the final saved_model.pb (only its random uuid is made stable)."""
    from tensorflow.core.protobuf import fingerprint_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting
    out = first("keras_cnn")
    with open(os.path.join(out, "fingerprint.pb"), "rb") as f:
        written = fingerprint_pb2.FingerprintDef.FromString(f.read())
    fresh = fingerprint_pb2.FingerprintDef.FromString(fingerprinting.CreateFingerprintDef(out))
    assert written.uuid and written.uuid != fresh.uuid
    written.ClearField("uuid")
    fresh.ClearField("uuid")
    assert written == fresh


def test_tf1_session_loader(first):
    """The renamed functions still load the way TF Serving and saved_model_cli load them: the TF1 loader in a
    Session, restoring the variables through the saver's (renamed) restore function."""
    out = first("lstm")
    rng = np.random.default_rng(0)
    feeds, results = {}, {}
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        meta_graph = tf.compat.v1.saved_model.loader.load(sess, ["serve"], out)
        sigs = {k: v for k, v in meta_graph.signature_def.items() if not k.startswith("__")}
        assert set(sigs) == {"serve", "serving_default"}
        for key, sig in sigs.items():
            feeds[key] = {k: rng.random([2 if d.size < 0 else d.size for d in t.tensor_shape.dim], np.float32)
                          for k, t in sig.inputs.items()}
            results[key] = sess.run({k: t.name for k, t in sig.outputs.items()},
                                    {sig.inputs[k].name: v for k, v in feeds[key].items()})
    loaded = tf.saved_model.load(out)
    for key, outs in results.items():
        expected = loaded.signatures[key](**feeds[key])
        for k, v in outs.items():
            assert np.abs(v).max() > 0
            np.testing.assert_allclose(v, expected[k].numpy(), rtol=1e-6, atol=1e-6)
