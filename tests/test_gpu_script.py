"""tools/gpu.py, the prepared GPU run: without a GPU it says so in one line and measures nothing; with --allow_cpu
the same steps run on the CPU, within the budget, and a model the time left cannot fit is listed, not started."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "tools", "gpu.py")


def _run(args, tmp_path, timeout):
    # no GPU, whatever the host has; the measured cost cache in the test's folder, not the user's
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TENSAT_TF_COST_CACHE=str(tmp_path / "costs"))
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def test_without_a_gpu_it_says_so_and_measures_nothing(tmp_path):
    out = tmp_path / "gpu.md"
    proc = _run([f"--out={out}", f"--gpu_json={tmp_path / 'gpu.json'}"], tmp_path, 300)
    assert proc.returncode == 3, proc.stderr[-500:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "no GPU" in lines[0] and "nothing measured" in lines[0]
    assert not out.exists() and not (tmp_path / "gpu.json").exists()


@pytest.mark.slow
def test_allow_cpu_measures_within_the_budget_and_lists_what_did_not_fit(tmp_path, zoo_cache):
    out, js = tmp_path / "gpu.md", tmp_path / "gpu.json"
    # mlp starts with 240 s less TensorFlow's import left (>= 220 s); calibrating and benchmarking it (two processes,
    # two conversions) takes more than 20 s, so less than the 220 s a model needs is left and inception_block is listed
    proc = _run(["--allow_cpu", "--gpu_models=mlp,inception_block", "--minutes=4", "--min_model_s=220",
                 "--gpu_blocks=4", f"--out={out}", f"--gpu_json={js}"], tmp_path, 600)
    assert proc.returncode == 0, proc.stderr[-1000:]
    data = json.loads(js.read_text())
    assert data["device"] == "CPU (--allow_cpu)"
    assert [r["model"] for r in data["rows"]] == ["mlp"]
    assert data["skipped"] == {"inception_block": "no time left in the budget"}
    lat = data["rows"][0]["signatures"]["serving_default"]["latency"]
    (r,) = lat.values()
    assert r["optimized"]["ratio"] > 0 and r["xla"]["optimized"]["ratio"] > 0
    text = out.read_text()
    assert "| mlp | - |" in text and "Not measured: inception_block (no time left in the budget)" in text
