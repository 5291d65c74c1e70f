"""Time ingest + export + emit of the e-graph pass with no rules, and convert each zoo model.

  python tools/bench_ingest.py                 # synthetic 1,500-node canonical graph + every fast zoo model
  python tools/bench_ingest.py --nozoo --nodes=3000

Prints markdown tables (node counts, seconds per stage). Timings are wall-clock on whatever machine runs it.
"""
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from tensorflow.python.framework import convert_to_constants  # noqa: E402

from tensat_tf import zoo  # noqa: E402
from tensat_tf.convert import convert  # noqa: E402
from tensat_tf.options import Options  # noqa: E402
from tensat_tf.item import GrapplerItem  # noqa: E402
from tensat_tf.passes import canonicalize  # noqa: E402
from tensat_tf.passes.tensat import TensatPass  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("nodes", 1500, "Approximate node count of the synthetic canonical graph.")
flags.DEFINE_bool("zoo", True, "Also convert every fast zoo model.")
flags.DEFINE_integer("repeats", 3, "Timing repeats of the synthetic graph (min is reported).")


def synthetic_graph(target_nodes: int):
    """A residual MLP: every block is MatMul, BiasAdd, Relu, AddV2 and its two weights (6 nodes)."""
    rng = np.random.RandomState(0)
    blocks = max(1, target_nodes // 6)
    weights = [(tf.constant(rng.randn(32, 32).astype("f") * 0.1), tf.constant(rng.randn(32).astype("f")))
               for _ in range(blocks)]

    @tf.function(input_signature=[tf.TensorSpec([None, 32], name="x")])
    def f(x):
        h = x
        for w, b in weights:
            h = h + tf.nn.relu(tf.nn.bias_add(tf.matmul(h, w), b))
        return {"y": h}

    cf = f.get_concrete_function()
    ffn, gd = convert_to_constants.convert_variables_to_constants_v2_as_graph(cf, lower_control_flow=False)
    item = GrapplerItem(tuple(t.name for t in ffn.inputs), tuple(t.name for t in ffn.outputs))
    return canonicalize.optimize(gd, item), item


def time_pass(gd, item) -> dict:
    """The e-graph pass itself, with the stage times it records (ingest includes loading egglog)."""
    tensat_pass = TensatPass()
    t0 = time.perf_counter()
    out = tensat_pass.optimize(gd, item)
    total = time.perf_counter() - t0
    assert len(out.node) == len(gd.node)
    return dict(tensat_pass.stats.timing_s, total=total, enodes=tensat_pass.stats.enodes)


def main(argv):
    gd, item = synthetic_graph(FLAGS.nodes)
    runs = [time_pass(gd, item) for _ in range(FLAGS.repeats)]
    best = min(runs, key=lambda r: r["total"])
    print(f"## e-graph pass, no rules, synthetic canonical graph ({len(gd.node)} nodes, {best['enodes']} e-nodes)\n")
    print("| ingest + egglog load s | prepare s (export, cycle filter, prices) | choose s | emit s | total s |")
    print("|---|---|---|---|---|")
    print(f"| {best['ingest']:.3f} | {best['prepare']:.3f} | {best['extract']:.3f} | {best['emit']:.3f} "
          f"| {best['total']:.3f} |\n")
    if not FLAGS.zoo:
        return
    print("## zoo conversions (no rules)\n")
    print("| model | signature | frozen nodes | canonical | after | e-nodes | load+freeze s | canonicalize s "
          "| tensat s | save s | verify s | total s | max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in zoo.NAMES:
        if name in zoo.SLOW_NAMES and name != "mobilenet_v2":
            continue
        zoo.resolve(f"zoo:{name}")            # build outside the timed conversion
        with tempfile.TemporaryDirectory() as tmp:
            r = convert(f"zoo:{name}", os.path.join(tmp, "out"), Options())
        t = r["timing_s"]
        for sig, s in r["signatures"].items():
            canon = [p for p in s["passes"] if p["name"] == "canonicalize"][0]["nodes_after"]
            print(f"| {name} | {sig} | {s['nodes_before']} | {canon} | {s['nodes_after']} | {s['egraph']['enodes']} "
                  f"| {t['load_freeze']:.2f} | {t['canonicalize']:.2f} | {t['tensat']:.2f} | {t['save']:.2f} "
                  f"| {t['verify']:.2f} | {t['total']:.2f} | {s['verification']['max_rel_diff']:.1e} |")


if __name__ == "__main__":
    app.run(main)
