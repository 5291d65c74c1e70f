"""What oneDNN's weight cache is worth when serving: the original and our output, each served with and without
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1.

    python tools/bench_frozen.py [--models=real_resnet50v2,real_mobilenet,...] [--rounds=6] [--blocks=6]

Where TF runs oneDNN's kernels, a convolution (or matmul) whose filter is not a Const node reorders that filter into
oneDNN's blocked layout on every call; a SavedModel's weights are variables, so every served call pays it. With the
environment variable set, the kernel reorders once and keeps the result (tensorflow's mkl_util.h AreWeightsFrozen).
That is safe for a model whose variables never change while it is served, which holds for every output of this tool
(its signatures only read their weights). TF reads the variable once per process, so the two settings run in
alternating worker processes (tensat_tf.latency.measure: both models in one worker, paired blocks, batch 1, one
thread); the order alternates between rounds. Printed per model: the median over rounds of each worker's ms, ours
over the original within each setting (paired in one process), and off over on for each model (one ratio per round,
median and range over rounds: processes, not blocks, so no finer interval is claimed). A markdown row per model.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

from tensat_tf.cli import engine_flags  # noqa: E402
from tensat_tf.cost.devices import FROZEN_WEIGHTS_VAR as VAR  # noqa: E402

flags.DEFINE_list("models", ["real_resnet50v2", "real_mobilenet", "real_efficientnet_b0", "real_densenet121",
                             "real_vit", "real_encoder"], "Zoo models.")
flags.DEFINE_integer("rounds", 6, "Rounds; each runs one worker per setting.")
flags.DEFINE_integer("blocks", 6, "Paired blocks per worker.")
FLAGS = flags.FLAGS


def _serve(paths, frozen: bool) -> list:
    from tensat_tf import latency, speedup
    if frozen:
        os.environ[VAR] = "1"
    else:
        os.environ.pop(VAR, None)
    try:
        m = latency.measure(paths, "serving_default", blocks=FLAGS.blocks)
    finally:
        os.environ.pop(VAR, None)
    a, b = (x["block_medians"] for x in m["tf"])
    return [m["tf"][0]["ms"], m["tf"][1]["ms"], speedup.compare(a, b).ratio]


def main(argv):
    from tensat_tf import zoo
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    if os.environ.get(VAR):
        sys.exit(f"unset {VAR}: this benchmark sets it per worker")
    opts = Options(engine=engine_flags.engine_options())
    print("| model | original ms (off / on) | ours ms (off / on) | ours vs original, off | ours vs original, on "
          "| original off / on | ours off / on | original off / ours on |")
    print("|---|---|---|---|---|---|---|---|")
    for name in FLAGS.models:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o")
            convert(f"zoo:{name}", out, opts)
            paths = [zoo.resolve(f"zoo:{name}"), out]
            runs = {False: [], True: []}
            for r in range(FLAGS.rounds):
                for frozen in ((False, True) if r % 2 == 0 else (True, False)):
                    runs[frozen].append(_serve(paths, frozen))
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in runs.items()}

        def across(i, j):
            rs = sorted(off[i] / on[j] for off, on in zip(runs[False], runs[True]))
            return f"{statistics.median(rs):.3f}x [{rs[0]:.3f}, {rs[-1]:.3f}]"
        print(f"| {name} | {med[False][0]:.3f} / {med[True][0]:.3f} | {med[False][1]:.3f} / {med[True][1]:.3f} "
              f"| {med[False][2]:.3f}x | {med[True][2]:.3f}x | {across(0, 0)} | {across(1, 1)} | {across(0, 1)} |",
              flush=True)


if __name__ == "__main__":
    app.run(main)
