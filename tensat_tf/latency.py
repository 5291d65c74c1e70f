"""Latency of SavedModel signatures (and ONNX models), measured the way serving runs them, in a clean worker process.

Why a worker: TF sizes its thread pools when the first device is created, and once a process has run eager ops a
one-thread session still spreads work over both cores (measured while building the cost model), so timings taken
inside `convert` are not comparable. The worker starts fresh with its thread setting applied before TF creates a
device: `threads=1` is one intra-op and one inter-op thread (and TF_OVERRIDE_GLOBAL_THREADPOOL), `threads=0` is TF's
default pools (what serving uses); ONNX Runtime sessions get the same setting. On a GPU TF places the ops there.

Method: load each SavedModel, call its signature (a concrete function; Grappler on, as in
serving) on the same seeded inputs, warm up, then run the subjects back to back in blocks of `runs` calls each, the
order rotating from block to block (A B, B A, ...: the first subject of a block is not always the same), and report
per subject the block medians, their minimum and the p10-p90 spread of all calls. With `xla`, each signature is also
wrapped in `tf.function(jit_compile=True)`; its first call (compilation) is reported apart.

Load order is counterbalanced: in one process the SavedModel loaded later can run faster than the same SavedModel
loaded first (measured on large CNNs: ResNet50V2 against itself came out 1.16x "faster" when loaded second;
BENCHMARKS.md, "A/A load-order bias"), which would lean every comparison towards the subject loaded last. So every
measurement runs two workers, one after the other: one loads the subjects in the order given, the other in reverse
(`reverse_groups`). Block i of a subject is the geometric mean of its block-i medians in the two workers
(`balance`), so the ratio of two subjects in block i is the geometric mean of their two in-worker ratios, and a
factor that favours a load position cancels.

Two entry points:
  - `measure(paths, signature, batch_size, ...)`: fixed blocks, latencies only (`tensat_tf profile`, tools/bench.py);
  - `decide(paths, signature, batch_sizes, threads, ...)`: is subject 1 faster than subject 0 in every setting (batch
    size x thread setting)? Blocks are added while the paired decision (tensat_tf/speedup.py) is undecided, at fixed
    looks (n0, 2 n0, 4 n0 blocks) and within a time budget (the first look whatever it takes); a pair of workers (both
    load orders) per thread setting, each look run by one then the other, the next setting skipped once a setting is
    "slower". All intervals of one decision share one error budget (Bonferroni over settings x looks), so a candidate
    that is not faster is kept on a false "faster" with probability below 1 - level, whatever the number of settings.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence

from tensat_tf import speedup
from tensat_tf.options import UNKNOWN_DIM

BLOCKS, RUNS, WARMUP = 10, 15, 5       # measure(): fixed blocks; runs per block at most RUNS
BLOCK_SECONDS = 0.3     # measure() with runs=None: calls per block so one block of the first model takes about this
# decide(): shorter blocks, more of them (the sign test counts blocks, not calls); calls per block so that one
# subject's part of a block takes about DECIDE_BLOCK_SECONDS, between DECIDE_MIN_RUNS and DECIDE_RUNS. One call per
# block for models over 20 ms: with a floor of 3, DenseNet121 (15 ms at batch 1) got 7 blocks in its share of the
# default 8 s, fewer than the 12 any interval needs, and its 1.47x was published as "no difference"
DECIDE_BLOCK_SECONDS, DECIDE_MIN_RUNS, DECIDE_RUNS = 0.02, 1, 50
FIRST_LOOK = 12         # blocks at the first look (at least speedup.min_blocks of the per-test level)
LOOKS = 3               # looks at FIRST_LOOK, 2x and 4x as many blocks
LEVEL = 0.99            # decide(): one decision (all settings and looks together) errs with probability <= 1 - LEVEL
THREADS = (1, 0)        # 1: one intra-op + one inter-op thread; 0: TF's (and ONNX Runtime's) default thread pools
WARM_SECONDS = 1.0      # warm(): its warm-up calls, and its probes, stop after about this long (at least 2 and 1)


def threads_label(threads: int) -> str:
    return "default" if threads == 0 else str(threads)


@dataclasses.dataclass
class Latency:
    ms: float                     # min over blocks of the block median
    p10: float
    p90: float
    block_medians: list
    compile_s: Optional[float] = None     # XLA: first call

    def to_json(self) -> dict:
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


# ------------------------------------------------------------------ worker side (fresh process)
def _percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def force(out) -> None:
    for v in (out.values() if isinstance(out, dict) else out if isinstance(out, list) else [out]):
        if hasattr(v, "numpy"):
            v.numpy()


def call_ms(fn) -> float:
    t = time.perf_counter()
    force(fn())
    return (time.perf_counter() - t) * 1e3


class Timings:
    """Per subject: the median of each block and every call's time."""

    def __init__(self, n: int):
        self.medians = [[] for _ in range(n)]
        self.calls = [[] for _ in range(n)]

    def block(self, fns: list, runs: int, index: int) -> None:
        """One block: `runs` calls of each subject (argument-less callables), the order rotated by `index`."""
        import numpy as np
        k = len(fns)
        for j in range(k):
            s = (j + index) % k                 # rotate the order: no subject always runs first
            times = [call_ms(fns[s]) for _ in range(runs)]
            self.calls[s] += times
            self.medians[s].append(float(np.median(times)))

    def latencies(self) -> list[Latency]:
        return [Latency(min(m), _percentile(c, 0.1), _percentile(c, 0.9), [round(x, 5) for x in m])
                for m, c in zip(self.medians, self.calls)]


def traced_kernels(run_metadata) -> list[tuple[str, float]]:
    """(op, microseconds) for every kernel of a Session.run traced with RunOptions.FULL_TRACE: the op TF ran after
    Grappler's and oneDNN's rewrites (`_MklNativeFusedConv2D`, ...), read from the timeline label "name = Op(inputs)";
    a node without one (the executor's _SOURCE) is named by its node name."""
    kernels = []
    for dev in run_metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            label = ns.timeline_label
            op = label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else ns.node_name
            kernels.append((op, float(ns.all_end_rel_micros)))
    return kernels


def warm(fns: list, warmup: int, probes: int = 5, seconds: float = WARM_SECONDS) -> float:
    """Warm every subject up: `warmup` calls, then `probes` timed calls; -> the slowest subject's fastest probe (ms).
    Each of the two runs stops early once it has taken `seconds`, after at least two warm-up calls (the first builds
    the kernels) and one probe: a ConvNeXt-Small original at 224 pixels takes 3.7 s a call at batch 4, and ten such
    calls in each of a decision's four workers were a quarter of its profile stage (BENCHMARKS.md)."""
    slowest, limit_ms = 0.0, seconds * 1e3
    for fn in fns:
        spent_ms = 0.0
        for i in range(warmup):
            if i >= 2 and spent_ms >= limit_ms:
                break
            spent_ms += call_ms(fn)
        times: list = []
        while len(times) < probes and (not times or sum(times) < limit_ms):
            times.append(call_ms(fn))
        slowest = max(slowest, min(times))      # min: a busy machine inflates the rest
    return slowest


def _measure(fns: list, blocks: int, runs, warmup: int) -> list[Latency]:
    for fn in fns:
        for _ in range(warmup):
            force(fn())
    if runs is None:
        runs = max(3, min(RUNS, int(BLOCK_SECONDS * 1e3 / max(call_ms(fns[0]), 1e-3))))
    timings = Timings(len(fns))
    for i in range(blocks):
        timings.block(fns, runs, i)
    return timings.latencies()


def ort_session(path: str, threads: int):
    """An ONNX Runtime CPU session of `path`, all graph optimizations on, `threads` intra- and inter-op threads
    (0: ONNX Runtime's defaults)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        so.intra_op_num_threads = so.inter_op_num_threads = threads
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _set_threads(threads: int) -> None:
    import tensorflow as tf
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def _subjects(request: dict, threads: int):
    """-> (TF signatures, feeds_for, subjects, loaded): feeds_for(batch) makes the seeded inputs of a batch size;
    subjects(feeds) gives one argument-less callable per subject (the TF signatures of request["paths"], then ONNX
    Runtime sessions of request["onnx"]) on those inputs."""
    import tensorflow as tf
    from tensat_tf.io.load import TensorSpec
    from tensat_tf.verify import random_inputs
    sig_name = request["signature"]
    loaded = [tf.saved_model.load(p) for p in request["paths"]]
    fns = [m.signatures[sig_name] for m in loaded]
    if not fns:
        loaded.append(tf.saved_model.load(request["spec_path"]))
    spec_fn = loaded[0].signatures[sig_name]
    specs = [TensorSpec(k, k, s.dtype, None if s.shape.rank is None else tuple(-1 if d is None else d
                                                                                 for d in s.shape.as_list()))
             for k, s in sorted(spec_fn.structured_input_signature[1].items())]
    sessions = []
    for path in request.get("onnx") or []:
        sess = ort_session(path, threads)
        names = {i.name for i in sess.get_inputs()}
        if not names <= {s.key for s in specs}:
            raise ValueError(f"ONNX inputs {sorted(names)} do not match the signature's {[s.key for s in specs]}")
        sessions.append((sess, names))

    def feeds_for(batch: int) -> dict:
        return random_inputs(specs, batch, seed=0, unknown_dim=request.get("unknown_dim", UNKNOWN_DIM))

    def subjects(feeds: dict) -> list:
        out = [(lambda fn=fn: fn(**feeds)) for fn in fns]
        for sess, names in sessions:
            # numpy inputs made once per batch size, not per call: the call is what is timed
            np_feeds = {k: v.numpy() for k, v in feeds.items() if k in names}
            out.append(lambda sess=sess, np_feeds=np_feeds: sess.run(None, np_feeds))
        return out

    return fns, feeds_for, subjects, loaded


class Blocks:
    """decide()'s measuring loop in a worker: `run(to, seconds)` adds blocks (one of each batch size per round) until
    there are `to`, or until one more would take the measuring time past `seconds` (a stop that depends on time only,
    never on the ratios seen so far). Warm-up waits for the first run: several workers load at the same time, but
    only one measures at a time."""

    def __init__(self, request: dict, feeds_for, subjects):
        self.request, self.feeds_for, self.subjects = request, feeds_for, subjects
        self.state, self.n, self.spent = {}, 0, 0.0

    def _warm(self) -> None:
        for b in self.request["batch_sizes"]:
            if b not in self.state:
                fns = self.subjects(self.feeds_for(b))
                slowest = warm(fns, self.request.get("warmup", WARMUP))
                runs = self.request.get("runs") or max(
                    DECIDE_MIN_RUNS, min(DECIDE_RUNS, int(DECIDE_BLOCK_SECONDS * 1e3 / max(slowest, 1e-3))))
                self.state[b] = (fns, runs, Timings(len(fns)))

    def run(self, to: int, seconds: float) -> dict:
        """-> {"blocks", "seconds" (measuring time so far), "budget" (stopped by it), "settings": [{"batch_size",
        "runs", "latency": [Latency json per subject]}]}"""
        self._warm()
        budget = False
        while self.n < to:
            if seconds is not None and self.n and self.spent + self.spent / self.n > seconds:
                budget = True
                break
            t = time.perf_counter()
            for b in self.request["batch_sizes"]:
                fns, runs, timings = self.state[b]
                timings.block(fns, runs, self.n)
            self.spent += time.perf_counter() - t
            self.n += 1
        return {"blocks": self.n, "seconds": round(self.spent, 3), "budget": budget,
                "settings": [{"batch_size": b, "runs": runs, "latency": [x.to_json() for x in timings.latencies()]}
                             for b, (_, runs, timings) in self.state.items()]}


def _serve(request: dict, feeds_for, subjects, device: str) -> dict:
    """decide()'s worker, after loading: say "ready", then answer each order {"to", "seconds"} with Blocks.run's
    reply, until the caller says stop."""
    print(json.dumps({"ready": True, "device": device}), flush=True)
    blocks = Blocks(request, feeds_for, subjects)
    while True:
        order = json.loads(sys.stdin.readline() or '{"stop": true}')
        if order.get("stop"):
            return {"stopped": True}
        print(json.dumps(blocks.run(order["to"], order["seconds"])), flush=True)


def worker(request: dict) -> dict:
    threads = request.get("threads", 1)
    _set_threads(threads)
    import tensorflow as tf
    tf_fns, feeds_for, subjects, _loaded = _subjects(request, threads)     # _loaded keeps the variables alive
    result = {"device": "GPU" if tf.config.list_physical_devices("GPU") else "CPU", "signature": request["signature"],
              "threads": threads}
    if "batch_sizes" in request:
        return _serve(request, feeds_for, subjects, result["device"])
    batch = request["batch_size"]
    blocks, runs, warmup = request.get("blocks", BLOCKS), request.get("runs", RUNS), request.get("warmup", WARMUP)
    result["batch_size"] = batch
    # TF and ONNX Runtime calls alternate in the same blocks, so both see the same machine state
    feeds = feeds_for(batch)
    fns = subjects(feeds)
    lat = _measure(fns, blocks, runs, warmup)
    result["tf"] = [x.to_json() for x in lat[:len(tf_fns)]]
    if len(fns) > len(tf_fns):
        result["onnxruntime"] = [x.to_json() for x in lat[len(tf_fns):]]
    if request.get("xla"):
        xcalls, compile_s = [], []
        for fn in tf_fns:
            xfn = tf.function(lambda fn=fn, **kw: fn(**kw), jit_compile=True)
            t = time.perf_counter()
            force(xfn(**feeds))
            compile_s.append(time.perf_counter() - t)
            xcalls.append(lambda xfn=xfn: xfn(**feeds))
        lat = _measure(xcalls, blocks, runs, 2)
        for x, c in zip(lat, compile_s):
            x.compile_s = round(c, 3)
        result["xla"] = [x.to_json() for x in lat]
    return result


# ------------------------------------------------------------------ caller side
class ProfileError(RuntimeError):
    pass


def _env(threads: int) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    # decide() starts one worker per thread setting at once: on a GPU the first would otherwise take all its memory
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    if threads:
        env["TF_OVERRIDE_GLOBAL_THREADPOOL"] = "1"
    else:
        env.pop("TF_OVERRIDE_GLOBAL_THREADPOOL", None)
    return env


class _Worker:
    """A worker process spoken to in JSON lines: the request, then (after its "ready") a go or a stop."""

    def __init__(self, request: dict):
        self.signature = request["signature"]
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "tensat_tf.latency"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     env=_env(request.get("threads", 1)))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.send(request)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass                # it died: receive() says why

    def receive(self, deadline: float) -> dict:
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise ProfileError(f"profiling {self.signature} took too long") from None
            if line is None:
                self.proc.wait()
                self.err.seek(0)
                tail = (self.err.read().strip().splitlines() or ["no output"])[-1]
                raise ProfileError(f"profiling {self.signature} failed: {tail}")
            if line.startswith("{"):
                return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def reverse_groups(items: Sequence, sizes: Sequence[int]) -> list:
    """`items` with each consecutive group of `sizes` reversed in place (SavedModels, then ONNX models, ...): the
    second load order of a counterbalanced measurement. Its own inverse, so it also maps the second worker's results
    back to the subjects' order. Runtimes keep their order: only subjects of one runtime are compared."""
    out, i = [], 0
    for k in sizes:
        out += list(items[i:i + k])[::-1]
        i += k
    return out + list(items[i:])


def reorders(sizes: Sequence[int]) -> bool:
    """Does the second load order differ from the first (some runtime has two subjects or more)?"""
    return any(k > 1 for k in sizes)


def geometric_blocks(a: Sequence[float], b: Sequence[float]) -> list:
    """Block i of one subject from the two load orders: the geometric mean of its block-i medians in each (the
    blocks both have)."""
    return [round(math.sqrt(x * y), 5) for x, y in zip(a, b)]


def balanced(first: list, second: list, sizes: Sequence[int]) -> list:
    """Every subject's Latency json from the two workers' lists: `second` is in the reversed load order
    (reverse_groups), so it is mapped back before each subject is `balance`d."""
    return [balance(a, b) for a, b in zip(first, reverse_groups(second, sizes))]


def balance(a: dict, b: dict) -> dict:
    """One subject's Latency json from its two workers (load orders): geometric means of the block medians
    (geometric_blocks), of p10 and of p90; the compile time's mean."""
    blocks = geometric_blocks(a["block_medians"], b["block_medians"])
    compile_s = None if a.get("compile_s") is None else round((a["compile_s"] + b["compile_s"]) / 2, 3)
    return Latency(min(blocks) if blocks else 0.0, math.sqrt(a["p10"] * b["p10"]), math.sqrt(a["p90"] * b["p90"]),
                   blocks, compile_s).to_json()


def run_worker(module: str, request: dict, timeout_s: float, what: str, error=None, tail_chars=None) -> dict:
    """Run `python -m module` in a clean process with the request's thread setting (_env), the request as JSON on
    stdin; -> the JSON of its last stdout line. A timeout or a failure raises `error` (ProfileError by default) with
    one line: `what` and the last line of the worker's stderr (at most tail_chars of it)."""
    error = error or ProfileError
    try:
        proc = subprocess.run([sys.executable, "-m", module], input=json.dumps(request) + "\n",
                              capture_output=True, text=True, env=_env(request.get("threads", 1)),
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise error(f"{what} took longer than {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise error(f"{what} failed: {tail[:tail_chars]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(paths: Sequence[str], signature: str, batch_size: int = 1, xla: bool = False, blocks: int = BLOCKS,
            runs: Optional[int] = None, timeout_s: float = 900.0, onnx: Sequence[str] = (),
            threads: int = 1, unknown_dim: int = UNKNOWN_DIM) -> dict:
    """Time `signature` of each SavedModel in `paths` (interleaved, same inputs) in a fresh worker process, and each
    ONNX model in `onnx` under ONNX Runtime (ORT_ENABLE_ALL) in the same blocks. `runs` calls per block (None: as many
    as fill BLOCK_SECONDS for the first model, between 3 and RUNS). `threads`: 1 (one intra-op and one inter-op
    thread) or 0 (TF's and ONNX Runtime's defaults). Every unknown dim but the batch is unknown_dim long.

    Two workers when a runtime has two subjects or more, one per load order (module docstring); each subject's
    latency is then `balance`d over both.

    -> {"device", "batch_size", "signature", "threads", "tf": [Latency json per path], "xla": [...] if xla,
        "onnxruntime": [...] if onnx}."""
    paths, onnx = [os.path.abspath(p) for p in paths], [os.path.abspath(p) for p in onnx]
    request = {"paths": paths, "signature": signature, "batch_size": batch_size, "xla": xla, "blocks": blocks,
               "runs": runs, "onnx": onnx, "threads": threads, "unknown_dim": unknown_dim}
    what = f"profiling {signature}"
    first = run_worker("tensat_tf.latency", request, timeout_s, what)
    if not reorders([len(paths), len(onnx)]):
        return first
    second = run_worker("tensat_tf.latency", dict(request, paths=paths[::-1], onnx=onnx[::-1]), timeout_s, what)
    for key in ("tf", "xla", "onnxruntime"):
        if key in first:
            first[key] = balanced(first[key], second[key], [len(first[key])])
    return first


def looks(tests: int, level: float = LEVEL) -> list[int]:
    """Block counts at which decide() looks, for `tests` settings."""
    first = max(FIRST_LOOK, speedup.min_blocks(speedup.per_test_level(level, tests * LOOKS)))
    return [first << j for j in range(LOOKS)]


def decide(paths: Sequence[str], signature: str, batch_sizes: Sequence[int], threads: Sequence[int] = THREADS,
           onnx: Sequence[str] = (), spec_path: Optional[str] = None, margin: float = speedup.MARGIN,
           level: float = LEVEL, seconds: float = 10.0, timeout_s: float = 900.0,
           unknown_dim: int = UNKNOWN_DIM) -> dict:
    """Is the second subject faster than the first (faster in some setting, slower in none)? Subjects: the
    SavedModels in `paths`, then the
    ONNX models in `onnx` (exactly two in all: original, candidate). `spec_path`: a SavedModel whose signature gives
    the inputs when `paths` is empty. `seconds`: measuring time for all settings together (worker start-up, model
    loading and warm-up not included), shared evenly by the thread settings still to run and by the two load orders
    of each (module docstring); the first look of each setting runs whatever it takes, within timeout_s. Every
    unknown dim but the batch is unknown_dim long.

    -> {"device", "keep": bool (speedup.keep over every setting), "settings": [{"batch_size", "threads",
        "decision": Decision json, "original": Latency json, "candidate": Latency json, "runs"}] (settings that
        were not measured are left out; keep is False then), "level", "per_test_level", "margin", "looks",
        "seconds", "stopped": per thread setting, "reason": one line}."""
    if len(paths) + len(onnx) != 2:
        raise ValueError("decide() compares exactly two subjects")
    batch_sizes = sorted(set(int(b) for b in batch_sizes))
    threads = list(dict.fromkeys(int(t) for t in threads))
    tests = len(batch_sizes) * len(threads)
    lv = speedup.per_test_level(level, tests * LOOKS)
    plan = looks(tests, level)
    out = {"level": level, "per_test_level": round(lv, 6), "margin": margin, "looks": plan, "settings": [],
           "stopped": {}, "seconds": 0.0}
    verdicts: dict = {(b, t): None for b in batch_sizes for t in threads}
    spent = 0.0
    deadline = time.monotonic() + timeout_s
    paths, onnx = [os.path.abspath(p) for p in paths], [os.path.abspath(p) for p in onnx]
    sizes = [len(paths), len(onnx)]
    orders = [(paths, onnx), (paths[::-1], onnx[::-1])] if reorders(sizes) else [(paths, onnx)]
    # a pair of workers per thread setting (both load orders), all started (TF import, model loading) at once; they
    # measure one after another
    workers = [[_Worker({"paths": p, "onnx": o, "spec_path": os.path.abspath(spec_path) if spec_path else None,
                         "signature": signature, "batch_sizes": batch_sizes, "threads": t,
                         "unknown_dim": unknown_dim}) for p, o in orders]
               for t in threads]
    try:
        ready = [w.receive(deadline) for pair in workers for w in pair]      # {"ready": true, "device"}
        out["device"] = ready[0]["device"]
        for i, (t, pair) in enumerate(zip(threads, workers)):
            if speedup.SLOWER in verdicts.values():
                continue                        # the candidate loses somewhere: other settings cannot save it
            budget = max(0.0, seconds - spent) / (len(threads) - i) / len(pair)
            r = _looks(pair, sizes, plan, budget, margin, lv, deadline)
            spent += r["seconds"]
            _collect(out, verdicts, r, t)
    finally:
        for pair in workers:
            for w in pair:
                w.send({"stop": True})
                w.close()
    out["seconds"] = round(spent, 3)
    out["keep"] = speedup.keep(verdicts.values())
    out["reason"] = _reason(verdicts, out["keep"], margin)
    return out


def _looks(pair: list, sizes: Sequence[int], plan: list, budget: float, margin: float, level: float,
           deadline: float) -> dict:
    """One thread setting of decide(): at each look, the first worker runs blocks up to the look (after the first
    look, within `budget` measuring seconds in all), the second (if any: the reversed load order of runtimes of
    `sizes` subjects) as many; the decision is taken on their balanced blocks. -> the setting's {"seconds",
    "stopped", "blocks", "settings": [{"batch_size", "runs", "latency", "decisions"}]}."""
    stopped = "looks"
    for target in plan:
        replies = []
        for w in pair:
            # the first look runs whatever the budget (seconds None): with fewer blocks no interval exists and the
            # original would be kept whatever the candidate's speed (ConvNeXt-Tiny's 4x at 5 blocks in its share of
            # the default 8 s, BENCHMARKS.md); the budget governs the looks after it, the deadline all of them
            w.send({"to": replies[0]["blocks"] if replies else target,
                    "seconds": None if target == plan[0] else budget})
            replies.append(w.receive(deadline))
        settings = []
        for k, s in enumerate(replies[0]["settings"]):
            lat = s["latency"]
            if len(replies) > 1:
                lat = balanced(lat, replies[1]["settings"][k]["latency"], sizes)
            d = speedup.compare(lat[0]["block_medians"], lat[1]["block_medians"], margin, level)
            settings.append({"batch_size": s["batch_size"], "runs": s["runs"], "latency": lat,
                             "decisions": [d.to_json()]})
        if any(r["budget"] for r in replies):
            stopped = "budget"
            break
        if speedup.settled([s["decisions"][0]["verdict"] for s in settings]):
            stopped = "settled"
            break
    return {"seconds": sum(r["seconds"] for r in replies), "stopped": stopped, "blocks": min(r["blocks"] for r in replies),
            "settings": settings}


def _reason(verdicts: dict, keep: bool, margin: float) -> str:
    def where(verdict):
        return ", ".join(f"batch {b} threads {threads_label(t)}" for (b, t), v in verdicts.items() if v == verdict)
    if keep:
        return f"faster in {where(speedup.FASTER)}; slower in none"
    if speedup.SLOWER in verdicts.values():
        return f"slower in {where(speedup.SLOWER)}"
    if None in verdicts.values():
        return f"not measured in {where(None)}"
    return f"faster in no setting by more than the {100 * margin:g} % margin, beyond noise"


def _collect(out: dict, verdicts: dict, r: dict, t: int) -> None:
    out["stopped"][threads_label(t)] = r["stopped"]
    for s in r["settings"]:
        d = s["decisions"][0]
        verdicts[(s["batch_size"], t)] = d["verdict"]
        out["settings"].append({"batch_size": s["batch_size"], "threads": threads_label(t), "decision": d,
                                "original": s["latency"][0], "candidate": s["latency"][1], "runs": s["runs"]})


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.stdin.readline()))), flush=True)
