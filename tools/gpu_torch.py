"""The GPU half of a run on a host without TensorFlow: tools/gpu_pack.py's ONNX graphs timed on the GPU under PyTorch.

    python tools/gpu_torch.py --from_pack=.gpu_pack --out=DIR [--minutes=7] [--blocks=10] [--runs=20]

What it measures, on the first CUDA device, in one process:
  1. The constants of the analytic cost model's GPU profile that the pack was converted for (tensat_tf/cost/
     devices.py, from datasheets; tools/gpu_pack.py copies them into the manifest: this host has no TensorFlow,
     which the cost package imports), measured: the fixed cost of one small kernel as the runtime issues them back
     to back (a chain of tiny adds: launch-bound), bandwidth (a large elementwise add), FP32 and TF32 matmul
     throughput, and the fixed cost of a small cuDNN convolution and cuBLAS matmul.
  2. Per packed model: original / no-rules / optimized converted by onnx2torch, checked in strict FP32 (TF32 off)
     against TensorFlow's outputs stored in the pack (or, for a model packed without its weights, against ONNX
     Runtime's on the CPU with the same refilled weights), then
     timed side by side in paired blocks, in rotated order (tensat_tf/speedup.py's compare(): median of per-block
     ratios and its interval), at batch 1 with TF32 allowed (what TF does on this GPU by default):
       - eager: one cuDNN / cuBLAS / elementwise kernel per op, launched from Python (the runtime TASO and TENSAT
         measured on: one kernel per graph node);
       - CUDA graph: the same kernels replayed from one captured graph (launch overhead gone);
       - compiled: torch.compile (TorchInductor: fuses elementwise chains into generated kernels; the analogue of
         XLA), while the time budget lasts.
Writes DIR/gpu_torch.json (every number) and DIR/gpu_torch.md (the tables). Stops starting work at the deadline.
This is not TensorFlow on a GPU: the kernels are PyTorch's, and a model's op count is tf2onnx's, not TF's.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tensat_tf import speedup  # noqa: E402  (numpy only; the GPU host has no TensorFlow)

STRIPPED = "tensat_gpu_stripped"      # tools/gpu_pack.py marks stripped initializers so
VARIANTS = ("original", "no_rules", "optimized")
# TENSAT's speedups over the original graph on a T4 GPU under TASO's runtime (its paper's Table 1)
TENSAT_PAPER = {"nasrnn_taso": ("NasRNN", 1.689), "nasnet_a": ("NasNet-A", 1.073), "squeezenet": ("SqueezeNet", 1.245)}

flags.DEFINE_string("from_pack", None, "tools/gpu_pack.py's folder.")
flags.DEFINE_string("out", None, "Folder for gpu_torch.json and gpu_torch.md.")
flags.DEFINE_float("minutes", 7.0, "Wall-clock budget.")
flags.DEFINE_integer("blocks", 10, "Paired timing blocks per model and mode.")
flags.DEFINE_integer("runs", 20, "Timed calls per subject per block (the block's value is their median).")
flags.DEFINE_list("models", None, "Packed models to time, in this order (default: the pack's order).")
flags.DEFINE_list("modes", ["eager", "compiled"], "Runtimes to time (eager, cuda_graph, compiled).")
flags.DEFINE_integer("min_compile_s", 40, "A graph is compiled only with at least this many seconds left.")
flags.DEFINE_bool("static_shapes", True, "Make the constant shapes of onnx2torch's Reshape and Split Python constants "
                  "(static_shape_args) before timing.")
flags.DEFINE_string("torch_device", "cuda", "torch device (cpu only to test this script).")
FLAGS = flags.FLAGS


def _sync(torch, dev):
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def _median_ms(torch, dev, fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        _sync(torch, dev)
        t = time.perf_counter()
        fn()
        _sync(torch, dev)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def calibrate(torch, dev: str) -> dict:
    """The profile's constants measured on this device (see the module doc)."""
    big = 1 << 26 if dev.startswith("cuda") else 1 << 20
    res = {}
    x = torch.zeros(1, device=dev)
    chain = 1000

    def tiny():
        y = x
        for _ in range(chain):
            y = y + 1
    res["elementwise_kernel_us"] = _median_ms(torch, dev, tiny, 7) * 1e3 / chain
    a, b = torch.randn(big, device=dev), torch.randn(big, device=dev)
    ms = _median_ms(torch, dev, lambda: a + b, 15)
    res["bandwidth_gbs"] = 3 * 4 * big / (ms * 1e-3) / 1e9
    n = 8192 if dev.startswith("cuda") else 512
    m1, m2 = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    for key, tf32 in (("matmul_fp32_gflops", False), ("matmul_tf32_gflops", True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = _median_ms(torch, dev, lambda: m1 @ m2, 7)
        res[key] = 2 * n ** 3 / (ms * 1e-3) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = False
    s1, s2 = torch.randn(16, 16, device=dev), torch.randn(16, 16, device=dev)
    res["small_matmul_us"] = _median_ms(torch, dev, lambda: [s1 @ s2 for _ in range(100)], 7) * 10
    conv = torch.nn.Conv2d(8, 8, 3, padding=1).to(dev)
    img = torch.randn(1, 8, 8, 8, device=dev)
    with torch.inference_mode():
        res["small_conv_us"] = _median_ms(torch, dev, lambda: [conv(img) for _ in range(100)], 7) * 10
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}


def static_shape_args(torch, gm) -> int:
    """onnx2torch's Reshape and Split take their shape / sizes as tensors and read them back (`tolist`, a test of
    the values) on every call: with the tensors on the GPU, a host synchronization per op, which no graph runtime
    pays, and which breaks CUDA-graph capture and torch.compile. Where the shape is a constant of the graph, it is
    made a Python constant of the call. -> calls rewritten."""
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.node_converters.split import OnnxSplit13
    made = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or len(node.args) != 2 or getattr(node.args[1], "op", None) != "get_attr":
            continue
        mod = gm.get_submodule(node.target)
        value = [int(v) for v in gm.get_buffer(node.args[1].target).tolist()] \
            if isinstance(mod, (OnnxReshape, OnnxSplit13)) else None
        if value is None or (isinstance(mod, OnnxReshape) and 0 in value):
            continue                    # ONNX's 0 in a Reshape copies the input's dim: left to onnx2torch
        with gm.graph.inserting_after(node):
            if isinstance(mod, OnnxReshape):
                new = gm.graph.call_method("reshape", (node.args[0], tuple(value)))
            else:
                new = gm.graph.call_function(torch.split, (node.args[0], value), {"dim": mod.axis})
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        made += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return made


def _module(path: str, seed: int):
    """onnx2torch module of one packed ONNX file, stripped initializers refilled with seeded values."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import onnx2torch
    model = onnx.load(path)
    rng = np.random.default_rng(seed)
    for i, init in enumerate(model.graph.initializer):
        if init.doc_string == STRIPPED:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
            arr = (0.05 * rng.standard_normal(tuple(init.dims))).astype(dtype)
            filled = numpy_helper.from_array(arr, init.name)
            model.graph.initializer[i].CopyFrom(filled)
    for node in model.graph.node:
        # onnx2torch 1.5.15 reads a CumSum without a `reverse` attribute as reverse=1; ONNX's default is 0
        if node.op_type == "CumSum" and not any(a.name == "reverse" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("reverse", 0))
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    reference = onnx.ModelProto()
    reference.CopyFrom(model)           # what the conversion is checked against (prepare)
    gm = onnx2torch.convert(model)
    made = {}
    if FLAGS.static_shapes:
        import torch
        made["static_shape_args"] = static_shape_args(torch, gm)
    return gm, inputs, outputs, reference, made


def _rel(ref, got) -> float:
    import numpy as np
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.shape != got.shape:
        return math.inf
    return float(np.max(np.abs(ref - got)) / max(float(np.max(np.abs(ref))), 1e-30)) if ref.size else 0.0


def time_paired(torch, dev, fns: list, blocks: int, runs: int) -> list[list[float]]:
    """Per subject, per block, the median ms of `runs` synchronized calls; subjects rotate their order per block."""
    for fn in fns:
        for _ in range(3):
            fn()
    per = [[] for _ in fns]
    for b in range(blocks):
        order = [(b + i) % len(fns) for i in range(len(fns))]
        for i in order:
            per[i].append(_median_ms(torch, dev, fns[i], runs))
    return per


def _graphed(torch, fn):
    """fn replayed from a captured CUDA graph (static inputs and outputs)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def prepare(torch, dev: str, pack: str, entry: dict):
    """(row, modules, inputs) of one packed model: its three graphs on the device, checked against TensorFlow's
    outputs in strict FP32 unless it travelled without its weights."""
    import numpy as np
    name = entry["model"]
    ref = np.load(os.path.join(pack, f"{name}.ref.npz"))
    row = {"model": name, "stripped": entry["stripped"], "check": {}, "ms": {}, "gain": {}, "errors": {}}
    mods, protos = {}, {}
    row["rewrites"] = {}
    for v in VARIANTS:
        mod, ins, outs, protos[v], row["rewrites"][v] = _module(os.path.join(pack, entry["files"][v]), seed=1)
        mods[v] = (mod.to(dev).eval(), ins, outs)
    feeds = {k[3:]: torch.from_numpy(ref[k]).to(dev) for k in ref.files if k.startswith("in:")}
    args = {v: [feeds[i] for i in ins] for v, (_, ins, _) in mods.items()}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # a model that travelled without its weights is checked against ONNX Runtime (CPU) on the same refilled
    # weights and the graph as packed: that checks onnx2torch's conversion and static_shape_args, not
    # tf2onnx's conversion (the pack checked that one)
    row["check_against"] = "onnxruntime" if entry["stripped"] else "tensorflow"
    with torch.inference_mode():
        for v, (mod, ins, outs) in mods.items():
            if entry["stripped"]:
                import onnxruntime
                sess = onnxruntime.InferenceSession(protos[v].SerializeToString(), providers=["CPUExecutionProvider"])
                want = dict(zip(outs, sess.run(outs, {i: a.cpu().numpy() for i, a in zip(ins, args[v])})))
            else:
                want = {o: ref[f"out:{o}"] for o in outs}
            got = mod(*args[v])
            got = got if isinstance(got, (tuple, list)) else [got]
            row["check"][v] = max(_rel(want[o], g.float().cpu().numpy()) for o, g in zip(outs, got))
    return row, {v: m for v, (m, _, _) in mods.items()}, args


def time_mode(torch, dev: str, row: dict, mods: dict, args: dict, mode: str, deadline: float) -> None:
    """One runtime's paired blocks of the three graphs into row (ms, gain), or why not into row["errors"]."""
    # TF enables TF32 for matmuls and convolutions on GPUs that have it (tf.config.experimental
    # .enable_tensor_float_32_execution defaults to True): time what TF would run
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        with torch.inference_mode():
            fns, t = [], time.perf_counter()
            for v in VARIANTS:
                if deadline - time.monotonic() < (FLAGS.min_compile_s if mode == "compiled" else 5):
                    row["errors"][mode] = "no time left in the budget"
                    return
                mod = torch.compile(mods[v]) if mode == "compiled" else mods[v]
                fn = (lambda m, a: (lambda: m(*a)))(mod, args[v])
                if mode == "cuda_graph":
                    fn = _graphed(torch, fn)
                fn()
                fns.append(fn)
            prep_s = time.perf_counter() - t
            per = time_paired(torch, dev, fns, FLAGS.blocks, FLAGS.runs)
    except Exception as e:  # noqa: BLE001 - a runtime that cannot run this graph is reported, the rest go on
        row["errors"][mode] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
        return
    row["ms"][mode] = {v: round(statistics.median(p), 4) for v, p in zip(VARIANTS, per)}
    row["ms"][mode]["prepare_s"] = round(prep_s, 2)
    row["gain"][mode] = {"optimized": speedup.compare(per[0], per[2]).to_json(),
                         "egraph": speedup.compare(per[1], per[2]).to_json(),
                         "no_rules": speedup.compare(per[0], per[1]).to_json()}


def _iv(d) -> str:
    if not d:
        return "-"
    hi = "inf" if d["high"] is None else f"{d['high']:.3f}"
    return f"{d['ratio']:.3f}x [{d['low']:.3f}, {hi}]"


def _predicted(entry: dict) -> str:
    c = entry.get("cost") or {}
    if not c.get("cost_before") or not c.get("cost_after"):
        return "-"
    return f"{c['cost_before'] / c['cost_after']:.3f}x"


def markdown(result: dict) -> str:
    cal, lines = result["calibration"], []
    p = result["profile"]
    lines += [f"Device: {result['device']} (PyTorch {result['torch']}, onnx2torch {result['onnx2torch']}).", "",
              f"| constant | {p['name']} profile (tensat_tf/cost/devices.py) | measured here |", "|---|---|---|",
              f"| fixed cost of a small elementwise kernel, us | {p['op_overhead_us']:g} | "
              f"{cal['elementwise_kernel_us']:.2f} |",
              f"| fixed cost of a small cuDNN conv, us | {p['Conv2D_us']:g} | {cal['small_conv_us']:.2f} |",
              f"| fixed cost of a small cuBLAS matmul, us | {p['MatMul_us']:g} | {cal['small_matmul_us']:.2f} |",
              f"| bandwidth, GB/s | {p['bandwidth_gbs']:g} | {cal['bandwidth_gbs']:.0f} |",
              f"| FP32 matmul, GFLOP/s | {p['peak_gflops']:g} | {cal['matmul_fp32_gflops']:.0f} (TF32: "
              f"{cal['matmul_tf32_gflops']:.0f}) |", ""]
    modes = result["modes"]
    head = "| model | TENSAT (paper, T4) | predicted e-graph gain | " + " | ".join(
        f"{m}: original / optimized | {m}: e-graph gain" for m in modes) + " | ms (original, no rules, optimized) |"
    lines += [head, "|" + "---|" * (3 + 2 * len(modes) + 1)]
    entries = {e["model"]: e for e in result["manifest_models"]}
    for row in result["rows"]:
        paper = TENSAT_PAPER.get(row["model"])
        cells = [row["model"] + (" (weights random)" if row["stripped"] else ""),
                 f"{paper[1]:.3f}x ({paper[0]})" if paper else "-", _predicted(entries[row["model"]])]
        for m in modes:
            g = row["gain"].get(m)
            if g:
                cells += [_iv(g["optimized"]), _iv(g["egraph"])]
            else:
                cells += [row["errors"].get(m, "-")[:60], "-"]
        ms = row["ms"].get("eager")
        cells.append(", ".join(f"{ms[v]:.3f}" for v in VARIANTS) + " (eager)" if ms else "-")
        lines.append("| " + " | ".join(cells) + " |")
    for against, what in (("tensorflow", "TensorFlow's outputs (stored in the pack)"),
                          ("onnxruntime", "ONNX Runtime's on the same random weights (models packed without theirs)")):
        checks = [f"{r['model']} {max(r['check'].values()):.1e}" for r in result["rows"]
                  if r["check"] and r.get("check_against", "tensorflow") == against]
        if checks:
            lines += ["", f"Largest relative difference from {what}, FP32 with TF32 off, all three graphs: "
                      + ", ".join(checks)]
    if result["skipped"]:
        lines += ["", "Not measured: " + "; ".join(f"{k} ({v})" for k, v in result["skipped"].items())]
    lines += ["", f"Wall time {result['wall_s']:.0f} s of a {FLAGS.minutes:g}-minute budget; "
              f"{FLAGS.blocks} blocks x {FLAGS.runs} calls per subject and mode."]
    return "\n".join(lines) + "\n"


def write(result: dict, t0: float) -> str:
    """Both files, after every model: a run stopped from outside keeps what it measured."""
    result["wall_s"] = time.monotonic() - t0
    os.makedirs(FLAGS.out, exist_ok=True)
    with open(os.path.join(FLAGS.out, "gpu_torch.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = markdown(result)
    with open(os.path.join(FLAGS.out, "gpu_torch.md"), "w") as f:
        f.write(text)
    return text


def main(argv) -> int:
    del argv
    t0 = time.monotonic()
    deadline = t0 + 60.0 * FLAGS.minutes
    import importlib.metadata
    import torch
    dev = FLAGS.torch_device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        print("tools/gpu_torch.py: PyTorch sees no CUDA device on this host; nothing measured.")
        return 3
    with open(os.path.join(FLAGS.from_pack, "manifest.json")) as f:
        manifest = json.load(f)
    result = {"device": torch.cuda.get_device_name(0) if dev.startswith("cuda") else "CPU",
              "torch": torch.__version__, "onnx2torch": importlib.metadata.version("onnx2torch"),
              "profile": manifest["profile"],
              "pack_command": manifest.get("command"), "modes": list(FLAGS.modes),
              "command": "python tools/gpu_torch.py " + " ".join(sys.argv[1:]),
              "calibration": calibrate(torch, dev), "rows": [], "skipped": dict(manifest.get("failed", {})),
              "manifest_models": manifest["models"]}
    print(json.dumps(result["calibration"]), flush=True)
    fast, slow = [m for m in FLAGS.modes if m != "compiled"], [m for m in FLAGS.modes if m == "compiled"]
    held = []
    # every model under the quick runtimes first, then compilation (tens of seconds per graph) while time lasts
    by_name = {e["model"]: e for e in manifest["models"]}
    for name in FLAGS.models or list(by_name):
        if name not in by_name:
            result["skipped"][name] = result["skipped"].get(name, "not in the pack")
            continue
        entry = by_name[name]
        if time.monotonic() > deadline - 20:
            result["skipped"][entry["model"]] = "no time left in the budget"
            continue
        t = time.monotonic()
        try:
            row, mods, args = prepare(torch, dev, FLAGS.from_pack, entry)
        except Exception as e:  # noqa: BLE001 - a model onnx2torch cannot convert is reported, the rest measured
            result["skipped"][entry["model"]] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
            print(f"{entry['model']}: {result['skipped'][entry['model']]}", flush=True)
            continue
        for mode in fast:
            time_mode(torch, dev, row, mods, args, mode, deadline)
        row["seconds"] = round(time.monotonic() - t, 1)
        result["rows"].append(row)
        held.append((row, mods, args))
        print(json.dumps(row), flush=True)
        write(result, t0)
    for row, mods, args in held:
        for mode in slow:
            t = time.monotonic()
            time_mode(torch, dev, row, mods, args, mode, deadline)
            row["seconds"] = round(row["seconds"] + time.monotonic() - t, 1)
            print(json.dumps({"model": row["model"], mode: row["gain"].get(mode) or row["errors"].get(mode)}),
                  flush=True)
            write(result, t0)
    print(write(result, t0))
    return 0 if result["rows"] else 1


if __name__ == "__main__":
    flags.mark_flags_as_required(["from_pack", "out"])
    app.run(main)
