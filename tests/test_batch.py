"""`tensat_tf batch`: spawned workers, a broken model among good ones, resume, time and memory limits."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tensat_tf import batch, errors, zoo
from tensat_tf.cost.analytic import CPU

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]
MODELS = ["mlp", "keras_cnn", "bert_tiny", "inception_block", "lstm"]


def run_batch(*args, timeout=240):
    proc = subprocess.run(CLI + ["batch"] + list(args), capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, {v["model"]: v for v in lines}


@pytest.fixture(scope="module")
def models(zoo_cache, tmp_path_factory):
    """Five zoo SavedModels in one folder, plus `broken`: a copy of mlp whose saved_model.pb is garbage."""
    root = tmp_path_factory.mktemp("batch_models")
    for name in MODELS:
        shutil.copytree(zoo.resolve(f"zoo:{name}"), root / name)
    shutil.copytree(root / "mlp", root / "broken")
    (root / "broken" / "saved_model.pb").write_bytes(b"\x00 not a protobuf \xff" * 10)
    (root / "README.txt").write_text("files are not models")
    return root


@pytest.mark.slow
def test_batch_finishes_the_others_and_reports_the_broken_one(models, tmp_path):
    out = tmp_path / "out"
    flagfile = tmp_path / "batch.flags"
    flagfile.write_text(f"--input_glob={models}/*\n--output_root={out}\n--jobs=2\n--noprofile\n")
    proc, lines = run_batch(f"--flagfile={flagfile}")
    assert proc.returncode == errors.BatchFailed.exit_code, proc.stderr
    assert set(lines) == set(MODELS) | {"broken"}
    for name in MODELS:
        v = lines[name]
        assert v["status"] == "ok", v
        assert set(v) >= {"model", "status", "speedup", "seconds"}
        assert v["speedup"] is None                         # --noprofile: not measured
        assert v["predicted_speedup"] >= 1.0
        assert os.path.isfile(out / name / "saved_model.pb")
        with open(f"{out / name}.report.json") as f:
            assert json.load(f)["verification"]["passed"]
    assert lines["broken"]["status"] == "failed"
    assert lines["broken"]["exit_code"] == errors.CorruptSavedModel.exit_code
    assert not os.path.exists(out / "broken")
    # the summary table (stderr) lists every model, then the one-line error names the broken one
    table = proc.stderr
    for name in MODELS + ["broken"]:
        assert name in table
    assert "6 models in" in table and "5 ok" in table and "1 failed" in table
    assert proc.stderr.strip().splitlines()[-1].startswith("tensat_tf: error: 1 of 6 models did not convert: broken")

    # resume: finished models are skipped; mlp lost its report (killed before it was written), so it runs again
    # and here hits a 1-second limit; the broken one fails again
    os.remove(f"{out / 'mlp'}.report.json")
    proc, lines = run_batch(f"--flagfile={flagfile}", "--model_timeout=1")
    assert proc.returncode == errors.BatchFailed.exit_code, proc.stderr
    for name in ["keras_cnn", "bert_tiny", "inception_block", "lstm"]:
        assert lines[name]["status"] == "skipped" and lines[name]["predicted_speedup"] >= 1.0
    assert lines["mlp"]["status"] == "timeout", lines["mlp"]
    assert lines["broken"]["status"] in ("failed", "timeout")


def test_batch_memory_limit(models, tmp_path):
    proc, lines = run_batch(f"--input_glob={models}/mlp", f"--output_root={tmp_path}", "--model_memory_mb=300",
                            "--noprogress")
    assert proc.returncode == errors.BatchFailed.exit_code, proc.stderr
    assert lines["mlp"]["status"] == "memory", lines["mlp"]
    assert not os.path.exists(tmp_path / "mlp")


def test_discover_names(tmp_path, monkeypatch):
    for p in ["a/1", "a/2", "b/1", "c"]:
        os.makedirs(tmp_path / "m" / p)
    (tmp_path / "m" / "file").write_text("")
    jobs = batch.discover([f"{tmp_path}/m/*/1", "zoo:mlp"], "/out")
    assert [(j.name, j.output_dir, j.report) for j in jobs] == [
        ("a/1", "/out/a/1", "/out/a/1.report.json"), ("b/1", "/out/b/1", "/out/b/1.report.json"),
        ("mlp", "/out/mlp", "/out/mlp.report.json")]
    assert [j.name for j in batch.discover([f"{tmp_path}/m/*"], "/out")] == ["a", "b", "c"]
    assert [j.name for j in batch.discover([f"{tmp_path}/m/c"], "/out")] == ["c"]
    with pytest.raises(errors.MissingPath):
        batch.discover([f"{tmp_path}/nothing*"], "/out")
    monkeypatch.chdir(tmp_path / "m")
    assert [j.name for j in batch.discover(["*"], "/out")] == ["a", "b", "c"]
    with pytest.raises(errors.BadInput, match="same output name"):
        batch.discover([f"{tmp_path}/m/a/*", f"{tmp_path}/m/b/*"], "/out")


def test_speedups_from_report():
    report = {"signatures": {
        "a": {"profile": {"speedup": 1.5, "kept_original": False}, "extraction": {"cost_before": 3.0, "cost_after": 2.0}},
        "b": {"profile": {"speedup": 0.9, "kept_original": True}, "extraction": {"cost_before": 1.0, "cost_after": 1.0}},
        "c": {"profile": {"skipped": "graph unchanged"}, "extraction": None}}}
    speed, predicted = batch.speedups(report)
    assert speed == pytest.approx((1.5 * 1.0) ** 0.5, rel=1e-3)         # b published its original graph: 1.0
    call = CPU.call_overhead_us * 1e-3 * 2                              # one call of each priced signature
    assert predicted == pytest.approx((4.0 + call) / (3.0 + call), rel=1e-3) and CPU.call_overhead_us > 0
    assert batch.speedups({"signatures": {}}) == (None, None)
