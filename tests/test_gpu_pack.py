"""tools/gpu_pack.py and tools/gpu_torch.py, the GPU run for a host without TensorFlow: the pack holds original /
no-rules / optimized as ONNX checked against TensorFlow (weights stripped, shapes kept, when a model is too big to
travel), and the GPU half imports no TensorFlow and renders what it measured."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

TOOLS = os.path.join(os.path.dirname(__file__), "..", "tools")


_LOADED = {}


def _tool(name):
    # once per process: each script defines its absl flags on import
    if name in _LOADED:
        return _LOADED[name]
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", os.path.join(TOOLS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _LOADED[name] = mod
    return mod


def test_strip_drops_large_float_values_and_keeps_shapes_and_integers():
    import onnx
    from onnx import helper, numpy_helper
    pack = _tool("gpu_pack")
    big = numpy_helper.from_array(np.ones((64, 100), np.float32), "w")
    small = numpy_helper.from_array(np.ones((10,), np.float32), "b")
    shape = numpy_helper.from_array(np.arange(70000, dtype=np.int64), "idx")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
                              initializer=[big, small, shape])
    model = helper.make_model(graph)
    saved = pack.strip(model, keep_elements=4096)
    assert saved == 64 * 100 * 4
    w, b, idx = model.graph.initializer
    assert list(w.dims) == [64, 100] and not w.raw_data and w.doc_string == pack.STRIPPED
    assert numpy_helper.to_array(b).tolist() == [1.0] * 10 and b.doc_string == ""
    assert numpy_helper.to_array(idx)[-1] == 69999 and idx.doc_string == ""


def test_the_gpu_half_imports_without_tensorflow():
    # the GPU host has PyTorch and ONNX but no TensorFlow: importing the script must not need it
    code = ("import sys, importlib.util; sys.modules['tensorflow'] = None; "
            f"spec = importlib.util.spec_from_file_location('g', {os.path.join(TOOLS, 'gpu_torch.py')!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "assert m.STRIPPED == 'tensat_gpu_stripped'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-800:]


def test_both_halves_agree_on_the_marker_and_the_variants():
    # gpu_torch.py cannot import gpu_pack.py (it imports TensorFlow through tensat_tf): the two copies must match
    pack, gpu = _tool("gpu_pack"), _tool("gpu_torch")
    assert pack.STRIPPED == gpu.STRIPPED and pack.VARIANTS == gpu.VARIANTS


def _result(rows):
    return {"device": "X", "torch": "t", "onnx2torch": "o", "modes": ["eager", "compiled"],
            "profile": {"name": "gpu-h100", "op_overhead_us": 5.0, "bandwidth_gbs": 3350.0, "peak_gflops": 67000.0,
                        "Conv2D_us": 10.0, "MatMul_us": 8.0},
            "calibration": {"elementwise_kernel_us": 2.5, "small_conv_us": 9.0, "small_matmul_us": 4.0,
                            "bandwidth_gbs": 4000.0, "matmul_fp32_gflops": 50000.0, "matmul_tf32_gflops": 300000.0},
            "rows": rows, "skipped": {"vgg19": "no time left in the budget"}, "wall_s": 12.0,
            "manifest_models": [{"model": "squeezenet", "cost": {"cost_before": 2.0, "cost_after": 1.6}}]}


def test_markdown_has_the_calibration_the_gains_and_what_was_not_measured():
    gpu = _tool("gpu_torch")
    gpu.FLAGS(["x", "--from_pack=p", "--out=o"])
    gain = {"ratio": 1.25, "low": 1.2, "high": 1.3, "blocks": 10, "verdict": "faster"}
    same = {"ratio": 1.0, "low": 0.98, "high": 1.02, "blocks": 10, "verdict": "no difference"}
    rows = [{"model": "squeezenet", "stripped": False, "check": {"original": 1e-7, "optimized": 3e-7},
             "ms": {"eager": {"original": 1.0, "no_rules": 1.0, "optimized": 0.8}},
             "gain": {"eager": {"optimized": gain, "egraph": gain, "no_rules": same}},
             "errors": {"compiled": "RuntimeError: boom"}}]
    text = gpu.markdown(_result(rows))
    assert "| fixed cost of a small elementwise kernel, us | 5 | 2.50 |" in text
    assert "| squeezenet | 1.245x (SqueezeNet) | 1.250x | 1.250x [1.200, 1.300] | 1.250x [1.200, 1.300] " \
           "| RuntimeError: boom | - | 1.000, 1.000, 0.800 (eager) |" in text
    assert "TensorFlow's outputs (stored in the pack), FP32 with TF32 off, all three graphs: squeezenet 3.0e-07" in text
    assert "Not measured: vgg19 (no time left in the budget)" in text


@pytest.mark.slow
def test_pack_then_time_on_the_cpu(tmp_path, zoo_cache):
    # the whole path on a small model, the GPU half on the CPU (where PyTorch and onnx2torch are installed)
    pack = tmp_path / "pack"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_pack.py"), f"--pack={pack}",
                           "--gpu_models=mlp,no_such_model", "--model_mb=0.001"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-1500:]
    manifest = json.loads((pack / "manifest.json").read_text())
    (entry,) = manifest["models"]
    assert entry["model"] == "mlp" and entry["stripped"] and set(entry["files"]) == {"original", "no_rules",
                                                                                      "optimized"}
    assert max(entry["onnx_check_max_rel"].values()) < 1e-5
    assert "no_such_model" in manifest["failed"] and manifest["profile"]["name"] == "gpu-h100"
    ref = np.load(pack / f"mlp.ref.npz")
    assert any(k.startswith("in:") for k in ref.files) and any(k.startswith("out:") for k in ref.files)
    pytest.importorskip("torch")
    pytest.importorskip("onnx2torch")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_torch.py"), f"--from_pack={pack}", f"--out={out}",
                           "--torch_device=cpu", "--modes=eager", "--blocks=6", "--runs=3"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-1500:]
    (row,) = json.loads((out / "gpu_torch.json").read_text())["rows"]
    assert row["stripped"] and row["check_against"] == "onnxruntime" and row["gain"]["eager"]["egraph"]["blocks"] == 6
    assert set(row["check"]) == {"original", "no_rules", "optimized"} and max(row["check"].values()) < 1e-5
