"""Latency of SavedModel signatures, measured the way serving runs them, in a clean worker process.

Why a worker: TF sizes its thread pools when the first device is created, and once a process has run eager ops a
one-thread session still spreads work over both cores (measured while building the cost model), so timings taken
inside `convert` are not comparable. The worker starts fresh with one intra-op and one inter-op thread (and
TF_OVERRIDE_GLOBAL_THREADPOOL) before TF creates a device; on a GPU TF places the ops there.

Method (research/tf.md §5.1): load each SavedModel, call its signature (a concrete function; Grappler on, as in
serving) on the same seeded inputs, warm up, then alternate A and B in blocks of `runs` calls (interleaving cancels the
second core coming and going), and report per model the minimum of the block medians and the p10-p90 spread of all
calls. With `xla`, each signature is also wrapped in `tf.function(jit_compile=True)`; its first call (compilation) is
reported apart.

`faster(a, b)` is the noise-aware decision `convert --profile` uses: B is faster when it wins at least 80 % of the
paired blocks and its best block median is at least `min_gain` below A's.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Optional, Sequence

BLOCKS, RUNS, WARMUP = 10, 15, 5


@dataclasses.dataclass
class Latency:
    ms: float                     # min over blocks of the block median
    p10: float
    p90: float
    block_medians: list
    compile_s: Optional[float] = None     # XLA: first call

    def to_json(self) -> dict:
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


def faster(a: Latency, b: Latency, min_gain: float = 0.01) -> bool:
    wins = sum(mb < ma for ma, mb in zip(a.block_medians, b.block_medians))
    return wins >= 0.8 * len(a.block_medians) and b.ms <= a.ms * (1.0 - min_gain)


# ------------------------------------------------------------------ worker side (fresh process)
def _percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


BLOCK_SECONDS = 0.3     # with runs=None, calls per block are chosen so one block of the first model takes about this


def _measure(fns: list, feeds: dict, blocks: int, runs, warmup: int) -> list[Latency]:
    import numpy as np
    for fn in fns:
        for _ in range(warmup):
            _force(fn(**feeds))
    if runs is None:
        t = time.perf_counter()
        _force(fns[0](**feeds))
        runs = max(3, min(RUNS, int(BLOCK_SECONDS / max(time.perf_counter() - t, 1e-6))))
    per_fn = [[] for _ in fns]
    medians = [[] for _ in fns]
    for _ in range(blocks):
        for k, fn in enumerate(fns):
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                _force(fn(**feeds))
                times.append((time.perf_counter() - t) * 1e3)
            per_fn[k] += times
            medians[k].append(float(np.median(times)))
    return [Latency(min(m), _percentile(all_, 0.1), _percentile(all_, 0.9), [round(x, 5) for x in m])
            for m, all_ in zip(medians, per_fn)]


def _force(out) -> None:
    for v in (out.values() if isinstance(out, dict) else out if isinstance(out, list) else [out]):
        if hasattr(v, "numpy"):
            v.numpy()


def worker(request: dict) -> dict:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tensat_tf.io.load import TensorSpec
    from tensat_tf.verify import random_inputs
    paths, sig_name, batch = request["paths"], request["signature"], request["batch_size"]
    blocks, runs, warmup = request.get("blocks", BLOCKS), request.get("runs", RUNS), request.get("warmup", WARMUP)
    loaded = [tf.saved_model.load(p) for p in paths]
    fns = [m.signatures[sig_name] for m in loaded]
    specs = [TensorSpec(k, k, s.dtype, None if s.shape.rank is None else tuple(-1 if d is None else d
                                                                                 for d in s.shape.as_list()))
             for k, s in sorted(fns[0].structured_input_signature[1].items())]
    feeds = random_inputs(specs, batch, seed=0)
    result = {"device": "GPU" if tf.config.list_physical_devices("GPU") else "CPU", "batch_size": batch,
              "signature": sig_name}
    onnx_paths = request.get("onnx") or []
    ort_fns = []
    for path in onnx_paths:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        np_feeds = {k: v.numpy() for k, v in feeds.items() if k in names}
        if set(np_feeds) != names:
            raise ValueError(f"ONNX inputs {sorted(names)} do not match the signature's {sorted(feeds)}")
        ort_fns.append(lambda sess=sess, np_feeds=np_feeds, **kw: sess.run(None, np_feeds))
    # TF and ONNX Runtime calls alternate in the same blocks, so both see the same machine state
    lat = _measure(fns + ort_fns, feeds, blocks, runs, warmup)
    result["tf"] = [x.to_json() for x in lat[:len(fns)]]
    if ort_fns:
        result["onnxruntime"] = [x.to_json() for x in lat[len(fns):]]
    if request.get("xla"):
        xfns, compile_s = [], []
        for fn in fns:
            xfn = tf.function(lambda fn=fn, **kw: fn(**kw), jit_compile=True)
            t = time.perf_counter()
            _force(xfn(**feeds))
            compile_s.append(time.perf_counter() - t)
            xfns.append(xfn)
        lat = _measure(xfns, feeds, blocks, runs, 2)
        for x, c in zip(lat, compile_s):
            x.compile_s = round(c, 3)
        result["xla"] = [x.to_json() for x in lat]
    return result


# ------------------------------------------------------------------ caller side
class ProfileError(RuntimeError):
    pass


def measure(paths: Sequence[str], signature: str, batch_size: int = 1, xla: bool = False, blocks: int = BLOCKS,
            runs: Optional[int] = None, timeout_s: float = 900.0, onnx: Sequence[str] = ()) -> dict:
    """Time `signature` of each SavedModel in `paths` (interleaved, same inputs) in a fresh worker process, and each
    ONNX model in `onnx` under ONNX Runtime (ORT_ENABLE_ALL, one thread) in the same blocks. `runs` calls per block
    (None: as many as fill BLOCK_SECONDS for the first model, between 3 and RUNS).

    -> {"device", "batch_size", "signature", "tf": [Latency json per path], "xla": [...] if xla,
        "onnxruntime": [...] if onnx}."""
    request = {"paths": [os.path.abspath(p) for p in paths], "signature": signature, "batch_size": batch_size,
               "xla": xla, "blocks": blocks, "runs": runs, "onnx": [os.path.abspath(p) for p in onnx]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_OVERRIDE_GLOBAL_THREADPOOL="1")
    try:
        proc = subprocess.run([sys.executable, "-m", "tensat_tf.profile"], input=json.dumps(request),
                              capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"profiling {signature} took longer than {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProfileError(f"profiling {signature} failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def latency(d: dict) -> Latency:
    return Latency(d["ms"], d["p10"], d["p90"], d["block_medians"], d.get("compile_s"))


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.stdin.read()))))
