"""Pack models for a GPU host that has no TensorFlow (the first half of tools/gpu_torch.py's run).

    python tools/gpu_pack.py --pack=.gpu_pack [--gpu_models=squeezenet,nasrnn_taso,...] [--device=gpu-h100]

Why: the GPU host this project is lent (tools README: an image with PyTorch, JAX and ONNX but no TensorFlow) cannot
run tools/gpu.py, and TensorFlow's GPU build cannot travel to it (its wheel is 573 MB and needs CUDA 12's cuDNN,
cuBLAS and cuFFT wheels, about 2 GB more; a run carries at most 64 MiB). So the graphs travel as ONNX instead:
for each zoo model, here on the CPU,
  1. the conversion priced for a GPU (`--device`, default gpu-h100) and the no-rules conversion (freeze + Grappler
     clean-up + our writer: what the e-graph's gain is measured against), as in tools/bench.py;
  2. original / no-rules / optimized, serving_default (or the one signature), frozen with batch 1 and every other
     unknown dim at --unknown_dim fixed in the graph's inputs (so tf2onnx folds the shape arithmetic away: the GPU
     times the model, not host-side shape ops), converted by tf2onnx (tensat_tf/onnx_export.py, opset 17);
  3. each ONNX file checked under ONNX Runtime against TensorFlow on seeded inputs (tensat_tf/verify.py's), and
     those inputs and TensorFlow's outputs stored (<model>.ref.npz) so the GPU host checks its runtime too;
  4. float initializers of more than --keep_elements elements stripped when the model's files would exceed
     --model_mb or what is left of the pack's budget (--max_mb): their shape and dtype stay, and tools/gpu_torch.py
     refills them with seeded random values (timing does not depend on the values; that model is then checked
     there against ONNX Runtime on the same values instead of against TF's stored outputs).
Writes <pack>/manifest.json and the files it names. Nothing here needs a GPU.
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

# the engine's flags (--device, --unknown_dim, budgets) are the convert command's: one definition in one process
from tensat_tf.cli import engine_flags  # noqa: E402

# TENSAT's benchmarks first (its paper's GPU numbers are for these), then real Keras exports of each kind
DEFAULT_MODELS = ["nasrnn_taso", "squeezenet", "nasnet_a", "resnext50", "inception_v3", "vgg19", "bert_taso",
                  "real_mobilenet", "real_resnet50v2", "real_efficientnet_b0", "real_vit", "real_encoder",
                  "real_decoder"]
VARIANTS = ("original", "no_rules", "optimized")
STRIPPED = "tensat_gpu_stripped"     # doc_string marker of a stripped initializer (tools/gpu_torch.py refills it)

flags.DEFINE_string("pack", None, "Folder to write (created; must be new or empty).")
flags.DEFINE_list("gpu_models", DEFAULT_MODELS, "Zoo models to pack.")
flags.DEFINE_float("max_mb", 56.0, "Pack budget: a model whose files would exceed what is left of it travels without "
                   "its weights.")
flags.DEFINE_float("model_mb", 4.0, "A model whose three ONNX files exceed this travels without its weights.")
flags.DEFINE_integer("keep_elements", 4096, "A stripped model keeps float initializers up to this many elements.")
flags.DEFINE_float("onnx_rtol", 1e-3, "Tolerance of the ONNX Runtime check of each converted graph.")
flags.DEFINE_string("one", None, "Internal: pack only this model (the parent runs one process per model).")
FLAGS = flags.FLAGS
GPU_PROFILE = "gpu-h100"             # what --device means here unless given: the conversion is priced for the GPU


def device() -> str:
    return FLAGS.device if FLAGS["device"].present else GPU_PROFILE


def engine(**kw):
    """The engine flags' options, priced for device() (the same options the convert command would take)."""
    import dataclasses
    return dataclasses.replace(engine_flags.engine_options(), device=device(), **kw)


def strip(model, keep_elements: int) -> int:
    """Drop the values of float initializers over keep_elements elements, keeping dims and dtype; -> bytes saved.
    Integer initializers (shapes, axes, indices) always keep their values: the graph's meaning depends on them."""
    from onnx import TensorProto
    saved = 0
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        if init.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE) or n <= keep_elements:
            continue
        saved += len(init.raw_data) + 4 * (len(init.float_data) + len(init.double_data)) + 4 * len(init.int32_data)
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.ClearField("double_data")
        init.ClearField("int32_data")
        init.doc_string = STRIPPED
    return saved


def fixed_graph(sig, batch: int, unknown_dim: int):
    """The signature's frozen GraphDef with its Placeholders' unknown dims fixed (batch for dim 0)."""
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(sig.graph_def)
    inputs = {s.tensor.split(":")[0] for s in sig.inputs}
    for node in gd.node:
        if node.op == "Placeholder" and node.name in inputs and "shape" in node.attr:
            shape = node.attr["shape"].shape
            if shape.unknown_rank:
                continue
            for i, d in enumerate(shape.dim):
                if d.size < 0:
                    d.size = batch if i == 0 else unknown_dim
    return gd


def export(path: str, sig_name: str, unknown_dim: int, seed: int):
    """(ONNX ModelProto, input table, feeds, TF outputs) of one signature of a SavedModel at batch 1, checked under
    ONNX Runtime against TensorFlow's outputs on the same seeded inputs."""
    from tensat_tf import onnx_export, verify
    from tensat_tf.io.load import load
    sig = load(path, only=[sig_name]).signatures[sig_name]
    model = onnx_export.convert_signature(sig, fixed_graph(sig, 1, unknown_dim))
    feeds = verify.random_inputs(sig.inputs, 1, seed, unknown_dim)
    ref = sig.function(**feeds)
    # looser than verification's 1e-5: tf2onnx's convolutions run under ONNX Runtime's kernels, whose float32
    # rounding differs from TF's by up to a few 1e-4 on deep CNNs; this check is for a wrong conversion, not rounding
    check = onnx_export.check(model.SerializeToString(), sig, lambda **kw: sig.function(**kw), [1], seed,
                              tolerances={f"{sig_name}/{s.key}": FLAGS.onnx_rtol for s in sig.outputs},
                              unknown_dim=unknown_dim)
    table = [{"name": s.key, "dtype": s.dtype.name, "shape": list(feeds[s.key].shape)} for s in sig.inputs]
    outputs = {s.key: ref[s.key].numpy() for s in sig.outputs}
    return model, table, {k: v.numpy() for k, v in feeds.items()}, outputs, check["max_rel_diff"]


def pack_model(name: str, pack: str, tmp: str, budget_left: float) -> dict:
    import numpy as np
    from tensat_tf import zoo
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    src = zoo.resolve(f"zoo:{name}")
    out, plain = os.path.join(tmp, name), os.path.join(tmp, name + "-norules")
    t = time.perf_counter()
    rep = convert(src, out, Options(engine=engine()))
    convert_s = time.perf_counter() - t
    convert(src, plain, Options(engine=engine(enable_rules=())))
    sigs = rep["signatures"]
    sig_name = "serving_default" if "serving_default" in sigs else sorted(sigs)[0]
    s = sigs[sig_name]
    entry = {"model": name, "signature": sig_name, "device_profile": device(), "convert_s": round(convert_s, 2),
             "nodes_before": s.get("nodes_before"), "nodes_after": s.get("nodes_after"),
             "rules_applied": s.get("rules_applied"),
             "cost": {k: (s.get("extraction") or {}).get(k) for k in ("cost_before", "cost_after", "status")},
             "files": {}, "onnx_check_max_rel": {}}
    models = {}
    for variant, path in zip(VARIANTS, (src, plain, out)):
        model, table, feeds, outputs, rel = export(path, sig_name, FLAGS.unknown_dim, seed=0)
        models[variant] = model
        entry["inputs"] = table
        entry["onnx_check_max_rel"][variant] = rel
        if variant == "original":
            np.savez(os.path.join(pack, f"{name}.ref.npz"),
                     **{f"in:{k}": v for k, v in feeds.items()}, **{f"out:{k}": v for k, v in outputs.items()})
            entry["outputs"] = sorted(outputs)
    total = sum(m.ByteSize() for m in models.values()) / 2 ** 20
    entry["stripped"] = total > min(budget_left, FLAGS.model_mb)
    for variant, model in models.items():
        if entry["stripped"]:
            strip(model, FLAGS.keep_elements)
        fname = f"{name}.{variant}.onnx"
        with open(os.path.join(pack, fname), "wb") as f:
            f.write(model.SerializeToString())
        entry["files"][variant] = fname
    return entry


def _one(name: str) -> int:
    """--one: pack one model into --pack and write its manifest entry beside it (<name>.entry.json)."""
    import tempfile
    used = sum(os.path.getsize(os.path.join(FLAGS.pack, f)) for f in os.listdir(FLAGS.pack)) / 2 ** 20
    with tempfile.TemporaryDirectory(prefix="tensat_gpu_pack_") as tmp:
        entry = pack_model(name, FLAGS.pack, tmp, FLAGS.max_mb - used)
    with open(os.path.join(FLAGS.pack, f"{name}.entry.json"), "w") as f:
        json.dump(entry, f, sort_keys=True, default=str)
    return 0


def main(argv) -> int:
    del argv
    import subprocess
    if not FLAGS.pack:
        print("tools/gpu_pack.py: --pack is required")
        return 2
    if FLAGS.one:
        return _one(FLAGS.one)
    os.makedirs(FLAGS.pack, exist_ok=True)
    if os.listdir(FLAGS.pack):
        print(f"tools/gpu_pack.py: {FLAGS.pack} is not empty")
        return 2
    entries, failed = [], {}
    passed = [a for a in sys.argv[1:] if not a.startswith(("--gpu_models", "--one"))]
    for name in FLAGS.gpu_models:
        # one process per model: TensorFlow keeps every loaded graph, and tf2onnx on a large model can take more
        # memory than the machine has; a model that fails or is killed is reported and the rest packed
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--one={name}"] + passed,
                              capture_output=True, text=True)
        entry_path = os.path.join(FLAGS.pack, f"{name}.entry.json")
        if proc.returncode != 0 or not os.path.exists(entry_path):
            errs = [line for line in proc.stderr.splitlines() if "Error:" in line or "Error]" in line]
            failed[name] = (f"killed by signal {-proc.returncode} (the kernel's OOM killer, when memory ran out)"
                            if proc.returncode < 0 else errs[-1][:200] if errs else f"exit {proc.returncode}")
            for f in os.listdir(FLAGS.pack):
                if f.startswith(f"{name}."):
                    os.remove(os.path.join(FLAGS.pack, f))
            print(f"{name}: FAILED {failed[name]}", flush=True)
            continue
        with open(entry_path) as f:
            entry = json.load(f)
        os.remove(entry_path)
        entries.append(entry)
        print(f"{name}: {time.perf_counter() - t:.0f} s, stripped={entry['stripped']}, "
              f"rules={entry['rules_applied']}, onnx check {entry['onnx_check_max_rel']}", flush=True)
    from tensat_tf.cost import devices
    prof = devices.DEVICES[device()]
    profile = {"name": prof.name, "op_overhead_us": prof.op_overhead_us, "bandwidth_gbs": prof.bandwidth_gbs,
               "peak_gflops": prof.peak_gflops, "Conv2D_us": prof.overhead_ms("Conv2D") * 1e3,
               "MatMul_us": prof.overhead_ms("MatMul") * 1e3}
    manifest = {"device_profile": device(), "profile": profile, "unknown_dim": FLAGS.unknown_dim, "batch": 1,
                "command": "python tools/gpu_pack.py " + " ".join(sys.argv[1:]), "models": entries,
                "failed": failed}
    with open(os.path.join(FLAGS.pack, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, default=str)
    return 0 if entries else 1


if __name__ == "__main__":
    app.run(main)
