"""The Beam form of the batch (DirectRunner). apache-beam is optional (it pins protobuf < 7): skipped without it."""
import json
import shutil
import subprocess
import sys

import pytest

from tensat_tf import errors, zoo

pytest.importorskip("apache_beam")


def test_beam_batch_direct_runner(zoo_cache, tmp_path):
    models = tmp_path / "models"
    for name in ("mlp", "inception_block"):
        shutil.copytree(zoo.resolve(f"zoo:{name}"), models / name)
    (models / "broken").mkdir()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tensat_tf.cli.batch_beam_cmd", f"--input_glob={models}/*", f"--output_root={out}",
           "--noprofile", "--runner=DirectRunner", "--direct_num_workers=2",
           "--direct_running_mode=multi_processing"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == errors.BatchFailed.exit_code, proc.stderr
    with open(out / "batch.jsonl") as f:
        lines = {v["model"]: v for v in map(json.loads, f)}
    assert {k: v["status"] for k, v in lines.items()} == {"mlp": "ok", "inception_block": "ok", "broken": "failed"}
    assert (out / "mlp" / "saved_model.pb").is_file()
    assert proc.stderr.strip().splitlines()[-1].startswith("tensat_tf: error: 1 of 3 models did not convert")

    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)       # resumes: finished ones skipped
    with open(out / "batch.jsonl") as f:
        lines = {v["model"]: v for v in map(json.loads, f)}
    assert lines["mlp"]["status"] == lines["inception_block"]["status"] == "skipped"


def test_beam_rejects_bad_options_before_the_pipeline(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tensat_tf.cli.batch_beam_cmd", "--input_glob=zoo:mlp", f"--output_root={out}",
           "--rules=no-such-rule", "--runner=DirectRunner"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == errors.UnknownName.exit_code, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "tensat_tf: error: unknown rule or family 'no-such-rule'"
    assert not out.exists()
