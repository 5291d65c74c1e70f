"""What a rewrite of TF public ops can still win on a convolution, on this machine's TF runtime (one thread, batch 1):

  - fusion: a 1x1 or 3x3 conv + BiasAdd (+ Relu) run with Grappler's remapper on (`_FusedConv2D`) against off (Conv2D, BiasAdd,
    Relu), a chain of 8 same-shape convs per graph;
  - Winograd F(2x2, 3x3) written in public ops (input transform, 16 batched matmuls, output transform) against TF's
    Conv2D, 3x3 stride 1 SAME; the input transform as a depthwise conv ("dw") or as ExtractImagePatches + einsum
    ("patches"). The filter transform is a constant, as it would be after folding.

    python tools/bench_conv.py [--shapes=28x128x128,14x256x256] [--blocks=16]

Each row: the median of per-block time ratios (reference / candidate, > 1: the candidate is faster) with its interval,
blocks interleaved in one process (tensat_tf/speedup.py's paired decision). Winograd needs an even spatial size.
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_list("shapes", ["56x64x64", "28x128x128", "14x256x256", "14x512x512"],
                  "HxCINxCOUT: input height = width, input channels, output channels.")
flags.DEFINE_integer("blocks", 16, "Paired blocks per comparison.")
flags.DEFINE_integer("runs", 10, "Runs of each graph per block (the block's median is compared).")
FLAGS = flags.FLAGS

# Winograd F(2x2, 3x3) (Lavin and Gray, 2016): Y = A^T [(G g G^T) * (B^T d B)] A over 4x4 input tiles, stride 2.
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float32)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float32)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float32)


def _winograd(tf, x, w: np.ndarray, h: int, variant: str):
    cin, cout = w.shape[2], w.shape[3]
    th = h // 2
    u = np.einsum("ai,ijck,bj->abck", G, w, G).reshape(16, cin, cout)          # filter transform, [16, C, K]
    xp = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    if variant == "dw":
        taps = np.einsum("ai,bj->ijab", BT, BT).reshape(4, 4, 1, 16)             # tap (i, j) -> transformed (a, b)
        v = tf.nn.depthwise_conv2d(xp, np.tile(taps, (1, 1, cin, 1)), [1, 2, 2, 1], "VALID")   # [1, th, th, C*16]
        v = tf.transpose(tf.reshape(v, [th * th, cin, 16]), [2, 0, 1])          # [16, T, C]
    else:
        p = tf.image.extract_patches(xp, [1, 4, 4, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
        b16 = np.einsum("ai,bj->abij", BT, BT).reshape(16, 16)
        v = tf.einsum("ji,tic->jtc", b16, tf.reshape(p, [th * th, 16, cin]))
    m = tf.linalg.matmul(v, u)                                                  # [16, T, K]
    a16 = np.einsum("ai,bj->abij", AT, AT).reshape(4, 16)
    y = tf.reshape(tf.linalg.matmul(a16, tf.reshape(m, [16, th * th * cout])), [2, 2, th, th, cout])
    return tf.reshape(tf.transpose(y, [2, 0, 3, 1, 4]), [1, h, h, cout])


def _session(tf, graph, remapping: bool):
    from tensorflow.core.protobuf import rewriter_config_pb2
    cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    toggle = rewriter_config_pb2.RewriterConfig
    cfg.graph_options.rewrite_options.remapping = toggle.ON if remapping else toggle.OFF
    return tf.compat.v1.Session(graph=graph, config=cfg)


def _paired(runs: list) -> tuple:
    """runs: [reference, candidate] zero-argument callables. -> (Decision, reference ms per run)."""
    from tensat_tf import speedup
    for f in runs:
        for _ in range(3):
            f()
    medians = [[], []]
    for _ in range(FLAGS.blocks):
        for k, f in enumerate(runs):
            times = []
            for _ in range(FLAGS.runs):
                t = time.perf_counter()
                f()
                times.append(time.perf_counter() - t)
            medians[k].append(1e3 * float(np.median(times)))
    return speedup.compare(medians[0], medians[1]), float(np.median(medians[0]))


def _fusion_row(tf, h: int, cin: int, cout: int, k: int, relu: bool) -> str:
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, h, h, cin])
        y = x
        for i in range(8 if cin == cout else 1):
            w = (0.1 * rng.standard_normal((k, k, y.shape[-1], cout))).astype(np.float32)
            y = tf.nn.bias_add(tf.nn.conv2d(y, w, 1, "SAME"), rng.standard_normal(cout).astype(np.float32))
            y = tf.nn.relu(y) if relu else y
        out = tf.identity(y)
    feed = {x: rng.standard_normal((1, h, h, cin)).astype(np.float32)}
    sessions = [_session(tf, graph, False), _session(tf, graph, True)]
    d, ms = _paired([lambda s=s: s.run(out, feed) for s in sessions])
    form = f"conv{k}x{k} + BiasAdd" + (" + Relu" if relu else "")
    return f"| {h}x{h}x{cin} -> {cout} | {form}: unfused / fused | {ms:.3f} | {d.ratio:.3f} [{d.low:.3f}, {d.high:.3f}] | - |"


def _winograd_row(tf, h: int, cin: int, cout: int, variant: str) -> str:
    rng = np.random.default_rng(0)
    w = (0.1 * rng.standard_normal((3, 3, cin, cout))).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, h, h, cin])
        ref, win = tf.nn.conv2d(x, w, 1, "SAME"), _winograd(tf, x, w, h, variant)
    feed = {x: rng.standard_normal((1, h, h, cin)).astype(np.float32)}
    s = _session(tf, graph, True)
    a, b = s.run([ref, win], feed)
    err = float(np.abs(a - b).max() / np.abs(a).max())
    d, ms = _paired([lambda: s.run(ref, feed), lambda: s.run(win, feed)])
    return (f"| {h}x{h}x{cin} -> {cout} | Conv2D / Winograd F(2x2,3x3), {variant} | {ms:.3f} | "
            f"{d.ratio:.3f} [{d.low:.3f}, {d.high:.3f}] | {err:.1e} |")


def main(argv):
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    print("| input -> output channels | reference / candidate | reference ms | ratio [interval] | max rel. error |")
    print("|---|---|---|---|---|")
    for spec in FLAGS.shapes:
        h, cin, cout = (int(v) for v in spec.split("x"))
        for k in (1, 3):
            for relu in (False, True):
                print(_fusion_row(tf, h, cin, cout, k, relu), flush=True)
        if h % 2 == 0:
            for variant in ("dw", "patches"):
                print(_winograd_row(tf, h, cin, cout, variant), flush=True)


if __name__ == "__main__":
    app.run(main)
