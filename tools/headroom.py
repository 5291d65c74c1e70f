"""How much of a served call's kernel time is contractions (convolutions, matmuls, einsums): the ceiling on what a
rewrite that keeps the contractions as they are can still win.

    python tools/headroom.py [--models=real_vit,real_resnet50v2 | --paths=DIR,...] [engine flags: --unknown_dim, ...]

Each SavedModel's serving_default runs, in a fresh process, as TF Serving runs it (a TF1 session on the loaded
MetaGraph, so TF's own Grappler, remapper fusions included, rewrites the graph first), batch 1, one intra-op and one
inter-op thread, every unknown dim but the batch --unknown_dim long. Untimed warm-up, then --blocks blocks of --runs
untraced calls (the wall column: the median block's ms per call, one model alone, not paired), then --traced calls
with a full trace whose kernels are summed by the op TF ran (`_MklNativeFusedConv2D`, `Mul`, ...). A contraction is a
kernel whose op names a Conv, MatMul or Einsum.

"headroom" is traced kernel time over traced contraction time: the speed-up if every other kernel took no time and
the contractions ran as they do. It overstates what is left, as tracing adds a fixed cost to every kernel (the traced
sum exceeds the untraced wall time on models of many small ops), which inflates the many small ones more than the
few large ones. A rewrite can still go past it where it makes a contraction itself faster (a one-pixel conv as a
batch matmul, a pad folded into the conv, fewer weight elements to reorder).

--models are zoo names: each is converted twice (no rules, then with the engine flags' rules, the default ones unless
given; both without --profile, as tools/bench.py --noconvert_profile) and both outputs are measured. --paths are
SavedModels measured as they are.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# a one-thread session after an eager op (these inputs, a conversion) would otherwise shard its kernels over the
# eager context's pool of a thread per core (tensat_tf/cost/measured.py WORKER_ENV; measured here: ViT 3x slower)
os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")

from absl import app, flags  # noqa: E402

from tensat_tf.cli import engine_flags  # noqa: E402

flags.DEFINE_list("models", [], "Zoo models: converted with no rules and with the engine flags' rules, both measured.")
flags.DEFINE_list("paths", [], "SavedModels measured as they are.")
flags.DEFINE_integer("blocks", 5, "Untraced timing blocks.")
flags.DEFINE_integer("runs", 20, "Calls per untraced block.")
flags.DEFINE_integer("traced", 10, "Traced calls (kernel times are their mean).")
flags.DEFINE_string("worker", None, "Internal: measure this SavedModel here, print its kernel times as JSON.")
FLAGS = flags.FLAGS

CONTRACTION = re.compile(r"Conv|MatMul|Einsum")


def kernel_ms(path: str, unknown_dim: int, blocks: int, runs: int, traced: int) -> dict:
    """{"wall_ms", "kernels": {op: ms per call}} for serving_default of the SavedModel at `path`."""
    import numpy as np
    import tensorflow as tf

    from tensat_tf.io.load import TensorSpec
    from tensat_tf.latency import traced_kernels
    from tensat_tf.verify import random_inputs
    from tensorflow.python.saved_model import loader_impl
    tf1 = tf.compat.v1
    sig = next(mg for mg in loader_impl.parse_saved_model(path).meta_graphs
               if "serve" in mg.meta_info_def.tags).signature_def["serving_default"]
    specs = [TensorSpec(k, t.name, tf.as_dtype(t.dtype), None if t.tensor_shape.unknown_rank
                        else tuple(d.size for d in t.tensor_shape.dim)) for k, t in sorted(sig.inputs.items())]
    # verification's inputs (seeded; integer inputs 0 or 1, valid ids for any embedding)
    feeds = {sig.inputs[k].name: v.numpy() for k, v in random_inputs(specs, 1, 0, unknown_dim).items()}
    g = tf.Graph()
    cfg = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    with g.as_default(), tf1.Session(graph=g, config=cfg) as sess:
        tf1.saved_model.load(sess, ["serve"], path)
        fetches = [t.name for _, t in sorted(sig.outputs.items())]
        for _ in range(max(20, runs)):
            sess.run(fetches, feeds)
        walls = []
        for _ in range(blocks):
            t = time.perf_counter()
            for _ in range(runs):
                sess.run(fetches, feeds)
            walls.append((time.perf_counter() - t) / runs * 1e3)
        kernels = collections.defaultdict(float)
        opts = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        for _ in range(traced):
            md = tf1.RunMetadata()
            sess.run(fetches, feeds, options=opts, run_metadata=md)
            for op, us in traced_kernels(md):
                kernels[op] += us / 1e3 / traced
    return {"wall_ms": float(np.median(walls)), "kernels": dict(kernels)}


def measured(path: str) -> dict:
    """kernel_ms of `path` in a fresh process: in one that has converted a model, TF's CPU pools are already made
    (a one-thread session ran ViT 2x slower after a conversion in the same process, whatever the environment)."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--worker={path}",
                           f"--unknown_dim={FLAGS.unknown_dim}", f"--blocks={FLAGS.blocks}", f"--runs={FLAGS.runs}",
                           f"--traced={FLAGS.traced}"], capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"measuring {path} failed: {(proc.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(lines[-1])


def summary(m: dict) -> dict:
    total = sum(m["kernels"].values())
    contraction = sum(v for k, v in m["kernels"].items() if CONTRACTION.search(k))
    others = sorted(((v, k) for k, v in m["kernels"].items() if not CONTRACTION.search(k)), reverse=True)[:3]
    return {"wall_ms": m["wall_ms"], "kernel_ms": total, "contraction_ms": contraction,
            "share": contraction / total if total else 0.0,
            "headroom": total / contraction if contraction else float("inf"),
            "top_others": ", ".join(f"{k} {v:.3f}" for v, k in others)}


def row(label: str, s: dict) -> str:
    return (f"| {label} | {s['wall_ms']:.3f} | {s['kernel_ms']:.3f} | {s['contraction_ms']:.3f} | {s['share']:.0%} | "
            f"{s['headroom']:.2f}x | {s['top_others']} |")


def main(argv):
    del argv
    if FLAGS.worker:
        print(json.dumps(kernel_ms(FLAGS.worker, FLAGS.unknown_dim, FLAGS.blocks, FLAGS.runs, FLAGS.traced)))
        return
    from tensat_tf import zoo
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    print("| model | wall ms | traced kernels ms | contractions ms | contraction share | headroom "
          "| largest others (ms) |")
    print("|---|---|---|---|---|---|---|")
    for path in FLAGS.paths:
        print(row(path, summary(measured(path))), flush=True)
    engine = engine_flags.engine_options()
    with tempfile.TemporaryDirectory() as tmp:
        for name in FLAGS.models:
            only = ["serving_default"] if name in zoo.SUITE_NAMES else None
            for label, eng in (("no rules", dataclasses.replace(engine, enable_rules=[])), ("rules", engine)):
                out = os.path.join(tmp, f"{name}-{label.replace(' ', '')}")
                print(f"converting {name} ({label})", file=sys.stderr, flush=True)
                convert(zoo.resolve(f"zoo:{name}"), out, Options(signatures=only, engine=eng, profile=False))
                s = summary(measured(out))
                print(row(f"{name}, {label}", s), flush=True)


if __name__ == "__main__":
    app.run(main)
