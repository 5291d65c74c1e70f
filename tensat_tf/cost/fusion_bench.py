"""Time TF's fused contraction patterns against their parts on this machine (the numbers behind cost/fusion.py).

    python -m tensat_tf.cost.fusion_bench      (or `tensat_tf calibrate --fusion`)

For each pattern (conv+bias, conv+AddV2 bias, conv+bias+relu, matmul+bias+relu, depthwise+bias+relu6, conv+bias+tanh)
one graph holds R copies of it side by side (distinct weights, so nothing is merged), run with Grappler ON and one
intra-op / inter-op thread, as a served SavedModel runs. The contraction alone is timed the same way; the epilogue
ops (BiasAdd, Relu, ...) alone on a tensor of the contraction's output shape are timed with Grappler OFF (single ops:
nothing to fuse, and copies must not be merged). Each time is per copy, minus a base graph with the same input and
read-out. All graphs of a size are timed in interleaved blocks and the fastest block of each counts, so other jobs
on the machine (which only ever add time) disturb ratios little. The kernels that actually ran (from a traced run)
are listed, which is how fusion.py's pattern list was checked.

Prints one JSON object: per pattern the fused time, the contraction alone, the fused epilogue (difference), the sum
of the epilogue ops run separately and the kernels seen; plus the per-node overhead (a [1]-element Relu).
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from typing import Optional

R = 8              # copies per graph
BLOCKS = 7         # interleaved timing blocks; the fastest counts
RUNS = 20          # Session.run calls per block

# name -> (contraction, epilogue ops after it, bias form)
PATTERNS = {
    "conv+bias": ("conv", ("BiasAdd",)),
    "conv+addv2": ("conv", ("AddV2",)),
    "conv+bias+relu": ("conv", ("BiasAdd", "Relu")),
    "conv+bias+tanh": ("conv", ("BiasAdd", "Tanh")),
    "matmul+bias+relu": ("matmul", ("BiasAdd", "Relu")),
    "matmul+bias+tanh": ("matmul", ("BiasAdd", "Tanh")),
    "depthwise+bias+relu6": ("depthwise", ("BiasAdd", "Relu6")),
}
# 1x1 conv at 14x14x32 by default: a small op, so the epilogue is visible; TENSAT_FUSION_BENCH_C changes the channels
CHANNELS = int(os.environ.get("TENSAT_FUSION_BENCH_C", "32"))
CONV_IN = (1, 14, 14, CHANNELS)


def _graphs(tf, np):
    """name -> (graph, feed tensor, fetch, grappler on?, input shape)."""
    tf1 = tf.compat.v1
    rng = np.random.default_rng(0)
    c = CHANNELS

    def contraction(kind, x):
        if kind == "conv":
            return tf.nn.conv2d(x, tf.constant(rng.standard_normal((1, 1, c, c)).astype("f4") * 0.2), 1, "SAME")
        if kind == "depthwise":
            return tf.nn.depthwise_conv2d(x, tf.constant(rng.standard_normal((3, 3, c, 1)).astype("f4") * 0.2),
                                          [1, 1, 1, 1], "SAME")
        return tf.matmul(x, tf.constant(rng.standard_normal((c, c)).astype("f4") * 0.2))

    def epilogue(op, y):
        b = tf.constant(rng.standard_normal((c,)).astype("f4"))
        if op == "BiasAdd":
            return tf.nn.bias_add(y, b)
        if op == "AddV2":
            return tf.raw_ops.AddV2(x=y, y=b)
        if op in ("Tanh", "Sigmoid"):
            return getattr(tf.raw_ops, op)(x=y)
        return getattr(tf.raw_ops, op)(features=y)

    def build(shape, body, grappler):
        g = tf.Graph()
        with g.as_default():
            x = tf1.placeholder(tf.float32, shape, name="x")
            outs = []
            for r in range(R):
                y = body(x, r)
                outs.append(tf.reduce_sum(tf.reshape(y, [-1])[:1]))
            fetch = tf.add_n(outs)
        return g, x, fetch, grappler, shape

    mm_in = (CONV_IN[1] * CONV_IN[2], c)
    shape_of = {"conv": CONV_IN, "depthwise": CONV_IN, "matmul": mm_in}
    out = {"base/conv": build(CONV_IN, lambda x, r: x, True), "base/matmul": build(mm_in, lambda x, r: x, True),
           "overhead/relu[1]": build((1,), lambda x, r: tf.nn.relu(x), False), "base/[1]": build((1,), lambda x, r: x,
                                                                                              False)}
    for kind in ("conv", "depthwise", "matmul"):
        out[f"alone/{kind}"] = build(shape_of[kind], lambda x, r, k=kind: contraction(k, x), True)
    for name, (kind, eps) in PATTERNS.items():
        def body(x, r, kind=kind, eps=eps):
            y = contraction(kind, x)
            for op in eps:
                y = epilogue(op, y)
            return y
        out[name] = build(shape_of[kind], body, True)
    for op in ("BiasAdd", "AddV2", "Relu", "Relu6", "Tanh"):
        for kind in ("conv", "matmul"):
            out[f"part/{op}/{kind}"] = build(shape_of[kind], lambda x, r, op=op: epilogue(op, x), False)
    return out


def measure() -> dict:
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    from tensat_tf.latency import traced_kernels
    tf.compat.v1.disable_eager_execution()
    sessions = {}
    kernels = {}
    for name, (g, x, fetch, grappler, shape) in _graphs(tf, np).items():
        cfg = config_pb2.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        if not grappler:
            cfg.graph_options.rewrite_options.disable_meta_optimizer = True
        s = tf.compat.v1.Session(graph=g, config=cfg)
        feed = {x: np.random.default_rng(1).random(shape).astype("f4")}
        for _ in range(3):
            s.run(fetch, feed)
        if name in PATTERNS:
            md = config_pb2.RunMetadata()
            s.run(fetch, feed, options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE),
                  run_metadata=md)
            ran = collections.Counter(op for op, _ in traced_kernels(md))
            kernels[name] = sorted(op for op, k in ran.items() if k >= R)   # the per-copy kernels
        sessions[name] = (s, fetch, feed)
    best = {name: float("inf") for name in sessions}
    for _ in range(BLOCKS):
        for name, (s, fetch, feed) in sessions.items():
            t = time.perf_counter()
            for _ in range(RUNS):
                s.run(fetch, feed)
            best[name] = min(best[name], (time.perf_counter() - t) / RUNS / R * 1e6)
    us = lambda name, base: round(best[name] - best[base], 2)       # noqa: E731
    result = {"overhead_us_per_node": us("overhead/relu[1]", "base/[1]"), "patterns": {}}
    for name, (kind, eps) in PATTERNS.items():
        base = "base/matmul" if kind == "matmul" else "base/conv"
        fused, alone = us(name, base), us(f"alone/{kind}", base)
        parts = round(sum(us(f"part/{op}/{'matmul' if kind == 'matmul' else 'conv'}", base) for op in eps), 2)
        result["patterns"][name] = {"fused_us": fused, "contraction_us": alone, "epilogue_fused_us":
                                    round(fused - alone, 2), "epilogue_separate_us": parts,
                                    "kernels": kernels[name]}
    result["setup"] = {"conv_input": CONV_IN, "channels": CHANNELS, "copies": R, "blocks": BLOCKS, "runs": RUNS,
                       "tf": tf.__version__, "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}
    return result


def run_in_worker(timeout_s: float = 600.0, onednn: Optional[bool] = None) -> dict:
    """measure() in a fresh process with one compute thread (see cost/measured.py on TF's global thread pool), with
    oneDNN's ops on or off (TF_ENABLE_ONEDNN_OPTS; None: as this process's environment says)."""
    from tensat_tf.cost.measured import WORKER_ENV
    env = os.environ | WORKER_ENV
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    proc = subprocess.run([sys.executable, "-m", "tensat_tf.cost.fusion_bench"], capture_output=True, text=True,
                          env=env, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"fusion benchmark failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(), sort_keys=True))
