"""TF Serving mode: version numbering, atomic publish inside BASE, warm-up records replayed through the TF1 loader."""
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf import errors, serving, zoo
from tensat_tf.convert import convert
from tensat_tf.options import Options
from tensat_tf.io import save as save_mod

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]


def _mkdirs(base, *names):
    for n in names:
        os.makedirs(os.path.join(base, n))


def test_versions_empty_base(tmp_path):
    base = str(tmp_path)
    assert serving.versions(base) == []
    with pytest.raises(errors.MissingPath, match="no numeric version folder"):
        serving.resolve(base)
    src, out, version = serving.resolve(base, "zoo:mlp")
    assert (src, out, version) == ("zoo:mlp", os.path.join(base, "1"), 1)
    with pytest.raises(errors.MissingPath):
        serving.resolve(str(tmp_path / "absent"))


def test_versions_numeric_order_and_other_names_ignored(tmp_path):
    base = str(tmp_path)
    _mkdirs(base, "1", "2", "9", "10", "v11", "12.tmp", ".tensat_tf-abc", "0.1", "assets", "-3")
    (tmp_path / "99").write_text("a file, not a version folder")
    (tmp_path / "10.report.json").write_text("{}")
    assert serving.versions(base) == [1, 2, 9, 10]          # numeric, not lexicographic: 10 > 9
    src, out, version = serving.resolve(base)
    assert src == os.path.join(base, "10") and out == os.path.join(base, "11") and version == 11


def test_versions_leading_zeros(tmp_path):
    base = str(tmp_path)
    _mkdirs(base, "007", "3")
    src, out, version = serving.resolve(base)
    assert src == os.path.join(base, "007") and out == os.path.join(base, "8") and version == 8


@pytest.fixture()
def base_with_v1(zoo_cache, tmp_path):
    base = tmp_path / "mlp"
    base.mkdir()
    shutil.copytree(zoo.resolve("zoo:mlp"), base / "1")
    (base / "notes").mkdir()                                # non-numeric folders are left alone
    return str(base)


def _replay_tf1(export_dir):
    """Independent of tensat_tf.serving: parse the warm-up TFRecords and run each PredictRequest through a TF1
    Session with the SavedModel loaded by tf.compat.v1.saved_model.loader.load (what TF Serving and
    `saved_model_cli run` use)."""
    from tensorflow_serving.apis import prediction_log_pb2
    path = os.path.join(export_dir, "assets.extra", "tf_serving_warmup_requests")
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    out = []
    with tf.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], export_dir)
        for log in logs:
            req = log.predict_log.request
            sd = meta.signature_def[req.model_spec.signature_name]
            feeds = {k: tf.make_ndarray(v) for k, v in req.inputs.items()}
            got = sess.run({k: v.name for k, v in sd.outputs.items()}, {sd.inputs[k].name: v for k, v in feeds.items()})
            out.append((req, feeds, got))
    return out


def test_serving_convert_writes_next_version_with_warmup(base_with_v1):
    src, out, version = serving.resolve(base_with_v1)
    assert version == 2
    report = convert(src, out, Options(profile=False, warmup=True, warmup_model_name="mlp"))
    assert sorted(os.listdir(base_with_v1)) == ["1", "2", "notes"]
    assert serving.versions(base_with_v1) == [1, 2]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~_umask()     # as mkdir makes it, not mkdtemp's 0700
    assert report["warmup"]["records"] == 4 and report["warmup"]["replayed"] == 4   # 2 signatures x batch 1, 4

    original = tf.saved_model.load(os.path.join(base_with_v1, "1"))
    replayed = _replay_tf1(out)
    assert sorted((r.model_spec.signature_name, feeds["x"].shape[0]) for r, feeds, _ in replayed) == [
        ("logits", 1), ("logits", 4), ("serving_default", 1), ("serving_default", 4)]
    for req, feeds, got in replayed:
        assert req.model_spec.name == "mlp"
        ref = original.signatures[req.model_spec.signature_name](**{k: tf.constant(v) for k, v in feeds.items()})
        assert set(got) == set(ref)
        for k, v in got.items():
            ref_v = ref[k].numpy()
            assert np.max(np.abs(ref_v - v)) <= 1e-5 * max(np.max(np.abs(ref_v)), 1e-30)


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_interrupted_publish_leaves_no_version(base_with_v1, monkeypatch):
    """A failure (or a kill) between staging and the rename leaves no new numeric folder: the staging folder lives
    inside BASE under a name TF Serving ignores, and is removed on failure."""
    before = sorted(os.listdir(base_with_v1))
    seen = {}

    def interrupted(staged, output_dir, overwrite):
        seen["staged"] = staged
        seen["listing"] = sorted(os.listdir(base_with_v1))
        seen["versions"] = serving.versions(base_with_v1)
        raise KeyboardInterrupt("simulated interrupt between staging and rename")

    monkeypatch.setattr(save_mod, "publish", interrupted)
    src, out, _ = serving.resolve(base_with_v1)
    with pytest.raises(KeyboardInterrupt):
        convert(src, out, Options(profile=False, warmup=True))
    # at the moment of the rename, the staged version was complete, inside BASE, and invisible to TF Serving
    assert os.path.dirname(seen["staged"]) == os.path.abspath(base_with_v1)
    assert not os.path.basename(seen["staged"]).isdigit()
    assert seen["versions"] == [1]
    assert os.path.basename(seen["staged"]) in seen["listing"]
    # afterwards: nothing new at all
    assert sorted(os.listdir(base_with_v1)) == before
    assert serving.versions(base_with_v1) == [1]


@pytest.mark.slow
def test_cli_serving_mode(base_with_v1):
    """`convert --model_base_path=BASE`: 1 -> 2 with warm-up, then `--nowarmup` 2 -> 3; reports beside versions."""
    proc = subprocess.run(CLI + ["convert", f"--model_base_path={base_with_v1}", "--noprofile"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warm-up: 4 records" in proc.stdout
    assert os.path.isfile(os.path.join(base_with_v1, "2", "assets.extra", "tf_serving_warmup_requests"))
    assert os.path.isfile(os.path.join(base_with_v1, "2.report.json"))
    assert "\r" not in proc.stderr                          # no status line when stderr is not a terminal

    proc = subprocess.run(CLI + ["convert", f"--model_base_path={base_with_v1}", "--noprofile", "--nowarmup"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warm-up" not in proc.stdout
    assert serving.versions(base_with_v1) == [1, 2, 3]
    # --nowarmup writes none; assets.extra of the source (version 2, with its warm-up file) is copied as is
    with open(os.path.join(base_with_v1, "2", "assets.extra", "tf_serving_warmup_requests"), "rb") as a, \
            open(os.path.join(base_with_v1, "3", "assets.extra", "tf_serving_warmup_requests"), "rb") as b:
        assert a.read() == b.read()

    proc = subprocess.run(CLI + ["convert", "zoo:mlp", f"--model_base_path={base_with_v1}",
                                 f"--output_dir={base_with_v1}/x"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "exclude each other" in proc.stderr
