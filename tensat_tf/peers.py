"""Peer runtimes side by side: one SavedModel signature under TF, ONNX Runtime and OpenVINO, timed in the same blocks.

tools/bench.py asks one question per model: how fast is the original and how fast is our graph, under each runtime a
CPU user could pick? All subjects run in one clean worker process (`python -m tensat_tf.peers`, one intra-op and one
inter-op thread, TF_OVERRIDE_GLOBAL_THREADPOOL, as tensat_tf/latency.py's worker), on the same seeded inputs, in
blocks of `runs` calls per subject with the order rotated from block to block; each subject's block medians come
back, so any two subjects measured together give a paired decision (tensat_tf/speedup.py's compare()). The load
order is counterbalanced as in tensat_tf/latency.py: a second worker loads each runtime's subjects in reverse, and a
subject's block i is the geometric mean of its two block-i medians.

OpenVINO reads a SavedModel directly (`openvino.convert_model(DIR)`: the serving_default signature) and runs with
one inference thread and f32 precision: on CPUs with bf16 or AMX units it would otherwise compute in bf16 (measured
here: 8e-2 max abs difference on the real_vit zoo model), which is not the same model. OpenVINO is an optional
dependency (`pip install -e ".[bench]"`); openvino_missing() says so in one line.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Optional, Sequence

from tensat_tf import latency
from tensat_tf.options import UNKNOWN_DIM

BLOCKS, WARMUP = 12, 5
BLOCK_SECONDS = 0.1     # calls per block: the slowest subject's share of one block takes about this (3 to 50 calls)
MAX_RUNS = 50


def openvino_missing() -> Optional[str]:
    """None when OpenVINO can be imported, else the one line to show instead of its columns."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return 'OpenVINO is not installed (pip install -e ".[bench]", or pip install openvino==2026.4.1)'
    return None


def compile_openvino(saved_model_dir: str, threads: int = 1):
    """The serving_default signature of a SavedModel, compiled by OpenVINO for the CPU (f32, `threads` threads;
    0: OpenVINO's default)."""
    import openvino as ov
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    return ov.Core().compile_model(ov.convert_model(saved_model_dir), "CPU", config)


def _openvino_call(compiled, feeds: dict):
    """An argument-less callable running `compiled` on feeds (numpy, by input key)."""
    names = [i.get_any_name() for i in compiled.inputs]
    if len(names) == 1 and len(feeds) == 1:
        args = list(feeds.values())
    else:
        missing = [n for n in names if n not in feeds]
        if missing:
            raise ValueError(f"OpenVINO inputs {names} do not match the signature's {sorted(feeds)}")
        args = [feeds[n] for n in names]
    request = compiled.create_infer_request()
    return lambda: request.infer(args)


def _ort_call(path: str, feeds: dict, threads: int):
    sess = latency.ort_session(path, threads)
    names = {i.name for i in sess.get_inputs()}
    np_feeds = {k: v for k, v in feeds.items() if k in names}
    if set(np_feeds) != names:
        raise ValueError(f"ONNX inputs {sorted(names)} do not match the signature's {sorted(feeds)}")
    return lambda: sess.run(None, np_feeds)


def time_blocks(fns: Sequence, blocks: int, runs: Optional[int], warmup: int) -> tuple[list, int]:
    """-> (per subject: its block medians in ms, runs per block). The order of the subjects rotates each block
    (tensat_tf/latency.py's Timings, as convert's own decision measures)."""
    slowest = latency.warm(fns, warmup, probes=3)
    if runs is None:
        runs = max(3, min(MAX_RUNS, int(BLOCK_SECONDS * 1e3 / max(slowest, 1e-3))))
    timings = latency.Timings(len(fns))
    for b in range(blocks):
        timings.block(fns, runs, b)
    return [[round(x, 5) for x in m] for m in timings.medians], runs


def worker(request: dict) -> dict:
    import tensorflow as tf
    threads = request.get("threads", 1)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from tensat_tf.io.load import TensorSpec
    from tensat_tf.verify import random_inputs
    sig_name, batch = request["signature"], request["batch_size"]
    subjects, fns = [], []
    feeds = None
    for path in request.get("tf", []):
        fn = tf.saved_model.load(path).signatures[sig_name]
        if feeds is None:
            specs = [TensorSpec(k, k, s.dtype, None if s.shape.rank is None else
                                tuple(-1 if d is None else d for d in s.shape.as_list()))
                     for k, s in sorted(fn.structured_input_signature[1].items())]
            feeds = random_inputs(specs, batch, seed=0, unknown_dim=request.get("unknown_dim", UNKNOWN_DIM))
        fns.append(lambda fn=fn: fn(**feeds))
        subjects.append({"runtime": "tf", "path": path})
    if feeds is None:
        raise ValueError("the first subjects must include a SavedModel (it gives the inputs)")
    np_feeds = {k: v.numpy() for k, v in feeds.items()}
    # a peer runtime that cannot load or run a model (tf2onnx writes graphs ONNX Runtime rejects; OpenVINO lacks
    # some TF ops) loses that subject only, with its one-line reason; the others are timed
    timed = list(range(len(fns)))
    for runtime, key, make in (("onnxruntime", "onnx", lambda p: _ort_call(p, np_feeds, threads)),
                               ("openvino", "openvino", lambda p: _openvino_call(compile_openvino(p, threads),
                                                                                 np_feeds))):
        for path in request.get(key, []):
            subject = {"runtime": runtime, "path": path}
            subjects.append(subject)
            try:
                fn = make(path)
                latency.force(fn())
            except Exception as e:  # noqa: BLE001 - any failure of a peer runtime is reported, not raised
                first = (str(e).strip().splitlines() or [""])[0]
                subject["error"] = f"{type(e).__name__}: {first}"[:1000]
                continue
            fns.append(fn)
            timed.append(len(subjects) - 1)
    medians, runs = time_blocks(fns, request.get("blocks", BLOCKS), request.get("runs"),
                                request.get("warmup", WARMUP))
    import numpy as np
    for i, m in zip(timed, medians):
        subjects[i]["block_ms"] = m
        subjects[i]["ms"] = round(float(np.median(m)), 5)
    return {"signature": sig_name, "batch_size": batch, "threads": threads, "runs": runs,
            "blocks": len(medians[0]), "subjects": subjects}


class PeerError(RuntimeError):
    pass


def measure(tf_paths: Sequence[str], signature: str, batch_size: int = 1, onnx: Sequence[str] = (),
            openvino: Sequence[str] = (), blocks: int = BLOCKS, runs: Optional[int] = None, threads: int = 1,
            timeout_s: float = 900.0, unknown_dim: int = UNKNOWN_DIM) -> dict:
    """Time `signature` of each SavedModel in tf_paths under TF, each ONNX file under ONNX Runtime and each SavedModel
    in `openvino` under OpenVINO, in the same blocks, in a fresh worker process. Every unknown dim but the batch is
    unknown_dim long.

    -> {"signature", "batch_size", "threads", "runs", "blocks", "subjects": [{"runtime", "path", "block_ms", "ms"}]}
    in the order tf_paths, onnx, openvino; "ms" is the median of the block medians. A peer subject that could not be
    loaded or run (in either load order) has "error" (one line) instead of timings. "runs" is the first worker's."""
    groups = {"tf": [os.path.abspath(p) for p in tf_paths], "onnx": [os.path.abspath(p) for p in onnx],
              "openvino": [os.path.abspath(p) for p in openvino]}
    request = dict(groups, signature=signature, batch_size=batch_size, blocks=blocks, runs=runs, threads=threads,
                   unknown_dim=unknown_dim)
    what = f"timing {signature}"
    first = latency.run_worker("tensat_tf.peers", request, timeout_s, what, PeerError, 200)
    sizes = [len(v) for v in groups.values()]
    if not latency.reorders(sizes):
        return first
    second = latency.run_worker("tensat_tf.peers", dict(request, **{k: v[::-1] for k, v in groups.items()}),
                                timeout_s, what, PeerError, 200)
    import numpy as np
    for subject, other in zip(first["subjects"], latency.reverse_groups(second["subjects"], sizes)):
        if "error" in other and "error" not in subject:
            subject.pop("block_ms", None), subject.pop("ms", None)
            subject["error"] = other["error"]
        if "error" not in subject:
            subject["block_ms"] = latency.geometric_blocks(subject["block_ms"], other["block_ms"])
            subject["ms"] = round(float(np.median(subject["block_ms"])), 5)
    first["blocks"] = min(first["blocks"], second["blocks"])
    return first


def pooled(rounds: list) -> dict:
    """`measure` results of the same subjects, one per round of fresh workers, as one: every subject's blocks
    concatenated in round order (block i of a round is paired across subjects, so the pooled blocks stay paired), its
    ms their median; a subject that failed in any round keeps that round's error. The same numbers from one round."""
    out = dict(rounds[0], subjects=[dict(s) for s in rounds[0]["subjects"]], blocks=sum(r["blocks"] for r in rounds))
    for k, subject in enumerate(out["subjects"]):
        errors = [r["subjects"][k]["error"] for r in rounds if "error" in r["subjects"][k]]
        if errors:
            subject.pop("block_ms", None), subject.pop("ms", None)
            subject["error"] = errors[0]
            continue
        subject["block_ms"] = [x for r in rounds for x in r["subjects"][k]["block_ms"]]
        subject["ms"] = round(float(statistics.median(subject["block_ms"])), 5)
    return out


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.stdin.read()))))
