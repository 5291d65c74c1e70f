"""One prepared GPU run (issue 11, item 4): the zoo and the real-exports suite under TF and XLA on a GPU, the GPU cost
profile calibrated on the way, within a wall-clock budget (8 minutes by default).

    python tools/gpu.py [--minutes=8] [--gpu_models=...] [--out=gpu.md] [--gpu_json=gpu.json]

On a host where TensorFlow sees no GPU it prints one line saying so and exits 3, having measured nothing. --allow_cpu
runs the same steps on the CPU instead (how this script is tested on a machine without a GPU; the table then says
CPU).

For each model, in the order given, while the budget lasts (a model starts only with --min_model_s left, and is
stopped at the deadline):
  1. `tensat_tf calibrate zoo:M`: every distinct op of M timed on this device into the measured cost model's cache,
     which is keyed by the device's name (tensat_tf/cost/measured.py): the GPU cost profile;
  2. tools/bench.py --models=M --cost_model=measured --xla --noonnx --noopenvino --batch_sizes=1: the conversion priced
     with that profile and the no-rules conversion, then original / no-rules / optimized side by side under TF and
     under XLA, in paired blocks (ratios with intervals, tensat_tf/speedup.py).
Then it writes two tables: TENSAT's published GPU speedups (its paper, T4 GPU, where we have them) beside ours for
the same models, and tools/bench.py's full table of every model measured. Models left out for time are listed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import bench  # noqa: E402  (tools/bench.py: its flags, and its markdown table for the rows measured here)

# Quick ones first, so a short budget still measures something of each kind; TENSAT's own benchmarks after them.
DEFAULT_MODELS = ["bert_tiny", "inception_block", "nasrnn", "squeezenet", "real_mobilenet", "real_vit", "real_decoder",
                  "real_encoder", "real_efficientnet_b0", "real_resnet50v2", "nasnet_a", "nasrnn_taso", "resnext50",
                  "inception_v3", "vgg19", "bert_taso"]
# TENSAT's speedups over the original graph on a T4 GPU under TASO's runtime (the paper's Table 1; the other models'
# bars in its Fig. 4 are not given as numbers). Zoo name -> (paper's model name, speedup).
TENSAT_PAPER = {"nasrnn_taso": ("NasRNN", 1.689), "nasnet_a": ("NasNet-A", 1.073), "squeezenet": ("SqueezeNet", 1.245)}
NO_GPU_EXIT = 3

flags.DEFINE_float("minutes", 8.0, "Wall-clock budget for everything, calibration included.")
flags.DEFINE_list("gpu_models", DEFAULT_MODELS, "Zoo models, in the order they are run.")
flags.DEFINE_integer("min_model_s", 45, "A model starts only with at least this many seconds of the budget left.")
flags.DEFINE_integer("gpu_blocks", 8, "Timing blocks per model (tools/bench.py --blocks).")
flags.DEFINE_bool("allow_cpu", False, "Run on the CPU when there is no GPU (to test this script).")
flags.DEFINE_string("out", None, "Write the markdown tables here (they also go to stdout).")
flags.DEFINE_string("gpu_json", None, "Write every measured row (tools/bench.py's --out_json rows) here.")
FLAGS = flags.FLAGS


def gpu_name() -> str | None:
    """The first GPU TensorFlow sees, by its device name; None when there is none."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name)


def _run(args: list[str], deadline: float) -> tuple[bool, str]:
    """Run until the deadline; (finished with exit 0, last line of its stderr when not)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False, "stopped at the deadline"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return False, tail[:200]
    return True, ""


def measure(models: list[str], deadline: float, tmp: str) -> tuple[list[dict], dict[str, str]]:
    """(tools/bench.py rows of the models measured, model -> why it was not)."""
    rows, skipped = [], {}
    for name in models:
        if deadline - time.monotonic() < FLAGS.min_model_s:
            skipped[name] = "no time left in the budget"
            continue
        ok, why = _run([sys.executable, "-m", "tensat_tf.cli.main", "calibrate", f"zoo:{name}"], deadline)
        if not ok:
            skipped[name] = f"calibrate: {why}"
            continue
        out = os.path.join(tmp, f"{name}.json")
        ok, why = _run([sys.executable, os.path.join(TOOLS, "bench.py"), f"--models={name}", "--cost_model=measured",
                        "--xla", "--noonnx", "--noopenvino", "--batch_sizes=1", f"--blocks={FLAGS.gpu_blocks}",
                        f"--out_json={out}"], deadline)
        if not ok:
            skipped[name] = f"bench: {why}"
            continue
        with open(out) as f:
            rows += json.load(f)["rows"]
    return rows, skipped


def beside_tensat(rows: list[dict], device: str) -> str:
    """Ours on this device next to TENSAT's published speedups: original / optimized under TF and XLA, and the
    e-graph's own gain (no-rules / optimized), batch 1, serving_default (or the model's one signature)."""
    lines = [f"Device: {device}. Speedups are original / optimized (median of paired per-block ratios, 95 % "
             "interval); TENSAT's are from its paper (T4 GPU, TASO's runtime).", "",
             "| model | TENSAT (paper) | ours, TF | ours, XLA | e-graph gain, TF |", "|---|---|---|---|---|"]
    for row in rows:
        sigs = row["signatures"]
        sig = "serving_default" if "serving_default" in sigs else sorted(sigs)[0]
        lat = next(iter(sigs[sig]["latency"].values()), {})
        paper = TENSAT_PAPER.get(row["model"])
        xla = lat.get("xla") or {}
        lines.append(f"| {row['model']} | {f'{paper[1]:.3f}x ({paper[0]})' if paper else '-'} "
                     f"| {bench._iv(lat.get('optimized')) if 'error' not in lat else lat['error'][:60]} "
                     f"| {bench._iv(xla.get('optimized')) if 'optimized' in xla else xla.get('error', '-')[:60]} "
                     f"| {bench._iv(lat.get('egraph_gain'))} |")
    return "\n".join(lines)


def main(argv) -> int:
    del argv
    t0 = time.monotonic()
    deadline = t0 + 60.0 * FLAGS.minutes
    device = gpu_name()
    if device is None and not FLAGS.allow_cpu:
        print("tools/gpu.py: TensorFlow sees no GPU on this host (tf.config.list_physical_devices('GPU') is empty); "
              "nothing measured.")
        return NO_GPU_EXIT
    device = device or "CPU (--allow_cpu)"
    with tempfile.TemporaryDirectory(prefix="tensat_gpu_") as tmp:
        rows, skipped = measure(list(FLAGS.gpu_models), deadline, tmp)
    command = "python tools/gpu.py " + " ".join(sys.argv[1:])
    text = [beside_tensat(rows, device), "", bench.markdown(rows, command) if rows else "(no model measured)"]
    if skipped:
        text += ["", "Not measured: " + "; ".join(f"{k} ({v})" for k, v in skipped.items())]
    text += ["", f"Wall time {time.monotonic() - t0:.0f} s of a {FLAGS.minutes:g}-minute budget."]
    out = "\n".join(text) + "\n"
    print(out)
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            f.write(out)
    if FLAGS.gpu_json:
        with open(FLAGS.gpu_json, "w") as f:
            json.dump({"device": device, "command": command, "rows": rows, "skipped": skipped}, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    app.run(main)
