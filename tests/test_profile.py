"""Latency profiling: the worker's numbers, the noise-aware decision, and convert --profile keeping the original
graph of a signature that is not faster."""
import subprocess
import sys

import pytest

from tensat_tf import profile, zoo
from tensat_tf.convert import Options, convert


def test_faster_needs_most_blocks_and_a_real_gain():
    a = profile.Latency(1.0, 0.9, 1.2, [1.0, 1.1, 1.0, 1.2, 1.0])
    assert profile.faster(a, profile.Latency(0.8, 0.7, 0.9, [0.8, 0.9, 0.8, 0.9, 0.8]))
    # wins 3 of 5 blocks only: noise
    assert not profile.faster(a, profile.Latency(0.8, 0.7, 1.3, [0.8, 1.3, 0.8, 1.3, 0.9]))
    # wins every block by 0.5 %: below min_gain
    assert not profile.faster(a, profile.Latency(0.995, 0.9, 1.2, [0.995, 1.09, 0.99, 1.19, 0.995]))


def test_convert_profile_reports_latency(zoo_cache, tmp_path):
    rep = convert("zoo:bert_tiny", str(tmp_path / "o"), Options(profile=True))
    prof = rep["signatures"]["serving_default"]["profile"]
    assert prof["device"] in ("CPU", "GPU")
    assert prof["original"]["ms"] > 0 and prof["optimized"]["ms"] > 0
    assert len(prof["original"]["block_medians"]) == profile.BLOCKS
    assert prof["speedup"] == pytest.approx(prof["original"]["ms"] / prof["optimized"]["ms"], rel=1e-3)
    assert prof["kept_original"] == (not prof["faster"])
    assert "profile" in rep["timing_s"]


def test_not_faster_keeps_the_original_graph(zoo_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "faster", lambda a, b, min_gain=0.01: False)
    rep = convert("zoo:keras_cnn", str(tmp_path / "o"), Options(profile=True))
    assert rep["verification"]["passed"]
    for sig in rep["signatures"].values():
        assert sig["profile"]["kept_original"]
        # the published graph is the e-graph pass's input (the frozen original after Grappler's clean-up): the
        # BatchNorm stays unfolded; verified and saved the same way
        tensat = [p for p in sig["passes"] if p["name"] == "tensat"][0]
        assert sig["nodes_after"] == tensat["nodes_before"] > tensat["nodes_after"]
        assert sig["ops_after"].get("Mul", 0) > 0 and sig["ops_after"].get("AddV2", 0) > 0


def test_profile_command_prints_each_signature(zoo_cache):
    proc = subprocess.run([sys.executable, "-m", "tensat_tf.cli.main", "profile", zoo.resolve("zoo:mlp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all(" ms " in line for line in lines)
    assert {line.split(" ")[0] for line in lines} == {"logits", "serving_default"}


def test_keeping_the_original_rewrites_a_model_with_functions(zoo_cache, tmp_path, monkeypatch):
    """The LSTM's While body is a library function: writing the fallback graph a second time in one process must
    not register a conflicting function (it failed that way when the fallback was the frozen graph)."""
    monkeypatch.setattr(profile, "faster", lambda a, b, min_gain=0.01: False)
    rep = convert("zoo:lstm", str(tmp_path / "o"), Options(profile=True))
    assert rep["verification"]["passed"]
    assert all(s["profile"]["kept_original"] for s in rep["signatures"].values())
