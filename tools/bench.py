"""Side-by-side benchmark: our optimizer against TF, XLA and ONNX Runtime, per zoo model, in one process.

    python tools/bench.py --quick                      # three small models (< 5 minutes on 2 cores)
    python tools/bench.py --models=bert_tiny,nasrnn    # chosen models
    python tools/bench.py                              # every model of the benchmark suite
    flags: --batch_sizes=1,8 --xla --onnx --out_json=bench.json --markdown=bench.md, and every engine flag

Per model:
  - conversion with the engine flags and --profile (as the CLI does), seconds per stage, e-graph size and stop reason,
    extraction status, predicted cost before/after;
  - a "no rules" conversion (freeze + Grappler clean-up + our writer only), to separate what the rules win from what
    freezing wins;
  - latency of original / no-rules / optimized SavedModels, interleaved in one clean worker per batch size
    (tensat_tf.profile: one intra- and inter-op thread, Grappler on, min of block medians, p10-p90), under TF and
    (--xla) under XLA jit with the compile time apart;
  - (--onnx) the ORIGINAL model converted by tf2onnx and run by ONNX Runtime (ORT_ENABLE_ALL, one thread) in the same
    blocks: the peer a CPU user would pick instead.
Writes a markdown table (stdout and --markdown) and the raw numbers (--out_json).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

from tensat_tf.cli import engine_flags  # noqa: E402

QUICK = ["bert_tiny", "inception_block", "nasrnn"]
# TENSAT's benchmark models (NasNet-A and VGG-19 reduced, see tensat_tf/zoo) and the Keras applications
SUITE = ["bert_tiny", "inception_block", "nasrnn", "keras_cnn", "squeezenet", "nasrnn_taso", "bert_taso", "resnext50",
         "nasnet_a", "inception_v3", "vgg19", "resnet50", "mobilenet_v2"]

flags.DEFINE_list("models", None, "Zoo models (default: the whole suite, or the quick set with --quick).")
flags.DEFINE_bool("quick", False, f"Only {', '.join(QUICK)}.")
flags.DEFINE_list("batch_sizes", ["1", "4"], "Batch sizes for unknown leading dimensions (batch 1 and a serving "
                                              "batch).")
flags.DEFINE_bool("xla", True, "Also time under XLA jit.")
flags.DEFINE_bool("onnx", True, "Also time the original under ONNX Runtime (via tf2onnx).")
flags.DEFINE_string("out_json", None, "Write every number here.")
flags.DEFINE_string("markdown", None, "Write the markdown table here.")
flags.DEFINE_string("from_json", None, "Only render the markdown table of an earlier run's --out_json file.")
FLAGS = flags.FLAGS


def _tf2onnx(src: str, signature: str, out: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", src, "--signature_def",
                           signature, "--tag", "serve", "--opset", "17", "--output", out],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
    if proc.returncode != 0:
        errs = [line for line in proc.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(f"tf2onnx failed (exit {proc.returncode})" + (f": {errs[-1][:160]}" if errs else ""))
    return out


def bench_model(name: str, engine, batch_sizes, tmp: str) -> dict:
    from tensat_tf import zoo
    from tensat_tf import profile as profile_mod
    from tensat_tf.convert import Options, convert
    from tensat_tf.passes.tensat import EngineOptions
    src = zoo.resolve(f"zoo:{name}")
    out, plain = os.path.join(tmp, name), os.path.join(tmp, name + "-norules")
    t = time.perf_counter()
    # the product's own conversion: with --profile, so a signature not faster at the first batch size keeps its
    # original graph (what a user gets)
    rep = convert(src, out, Options(engine=engine, profile=True, profile_batch_size=batch_sizes[0]))
    seconds = time.perf_counter() - t
    convert(src, plain, Options(engine=EngineOptions(enable_rules=[])))
    row = {"model": name, "convert_s": round(seconds, 2), "timing_s": rep["timing_s"], "signatures": {}}
    for sig_name, s in sorted(rep["signatures"].items()):
        entry = {k: s[k] for k in ("nodes_before", "nodes_after", "egraph", "extraction", "rules_applied",
                                   "profile")}
        entry["egraph"] = {k: v for k, v in entry["egraph"].items() if k != "saturation"}
        onnx = []
        if FLAGS.onnx:
            try:
                onnx = [_tf2onnx(src, sig_name, os.path.join(tmp, f"{name}-{sig_name}.onnx"))]
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                entry["onnx_error"] = str(e)[:200]
        entry["latency"] = {}
        for b in batch_sizes:
            try:
                r = profile_mod.measure([src, plain, out], sig_name, b, xla=FLAGS.xla, onnx=onnx)
            except profile_mod.ProfileError as e:
                entry["latency"][b] = {"error": str(e)}
                continue
            entry["latency"][b] = r
        row["signatures"][sig_name] = entry
    return row


def _ratio(a, b):
    return a / b if a and b else float("nan")


def markdown(rows: list, command: str) -> str:
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, one intra-op and one "
        f"inter-op thread; TF {_tf_version()}. Speedup = original ms / optimized ms (min of block medians).",
        "",
        "| model | batch | original ms (TF) | optimized ms | speedup TF | no-rules speedup | XLA orig -> opt ms "
        "(speedup; compile s) | ORT ms (ours / ORT) | optimizer s | e-nodes (stop) | extraction | predicted "
        "ms before -> after | nodes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for sig, e in row["signatures"].items():
            label = row["model"] if len(row["signatures"]) == 1 else f"{row['model']}:{sig}"
            for b, r in e["latency"].items():
                if "error" in r:
                    lines.append(f"| {label} | {b} | error: {r['error'][:80]} |")
                    continue
                o, p, n = (x["ms"] for x in r["tf"])
                xla = r.get("xla")
                xla_txt = (f"{xla[0]['ms']:.3f} -> {xla[2]['ms']:.3f} ({_ratio(xla[0]['ms'], xla[2]['ms']):.3f}x; "
                           f"{xla[0]['compile_s']:.2f} / {xla[2]['compile_s']:.2f})") if xla else "-"
                ort = r.get("onnxruntime")
                ort_txt = (f"{ort[0]['ms']:.3f} ({_ratio(n, ort[0]['ms']):.2f})" if ort
                           else _onnx_error(e.get("onnx_error")))
                eg, ex = e["egraph"], e["extraction"]
                lines.append(
                    f"| {label} | {b} | {o:.3f} | {n:.3f} | {_ratio(o, n):.3f}x | {_ratio(o, p):.3f}x | {xla_txt} "
                    f"| {ort_txt} | {row['timing_s'].get('tensat', 0):.2f} | {eg['enodes']} ({eg['stop_reason']}) "
                    f"| {ex.get('method')} {ex.get('status')} | {ex['cost_before']:.4f} -> {ex['cost_after']:.4f} "
                    f"| {e['nodes_before']} -> {e['nodes_after']}"
                    + (" (original kept)" if (e.get("profile") or {}).get("kept_original") else "") + " |")
    return "\n".join(lines)


def _onnx_error(err) -> str:
    if not err:
        return "-"
    # runs before this check recorded the last stderr line of tf2onnx, which is not always the error
    return err if err.startswith("tf2onnx failed") else "tf2onnx failed"


def _tf_version() -> str:
    import tensorflow as tf
    return tf.__version__


def main(argv):
    if FLAGS.from_json:
        with open(FLAGS.from_json) as f:
            data = json.load(f)
        rows, command = (data["rows"], data["command"]) if isinstance(data, dict) else (data, "python tools/bench.py")
        print(markdown(rows, command))
        return
    models = FLAGS.models or (QUICK if FLAGS.quick else SUITE)
    engine = engine_flags.engine_options()
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            print(f"[{time.perf_counter() - t0:7.1f} s] {name}", file=sys.stderr)
            rows.append(bench_model(name, engine, batch_sizes, tmp))
    command = "python tools/bench.py " + " ".join(a for a in sys.argv[1:] if not a.startswith(("--out_json",
                                                                                          "--markdown")))
    text = markdown(rows, command.strip()) + f"\n\nTotal benchmark time: {time.perf_counter() - t0:.0f} s.\n"
    print(text)
    if FLAGS.markdown:
        with open(FLAGS.markdown, "w") as f:
            f.write(text)
    if FLAGS.out_json:
        with open(FLAGS.out_json, "w") as f:
            json.dump({"command": command.strip(), "seconds": round(time.perf_counter() - t0, 1), "rows": rows}, f,
                      indent=1, default=str)


if __name__ == "__main__":
    app.run(main)
