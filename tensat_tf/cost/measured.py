"""Measured per-e-node cost: time each distinct (term, literals, input shapes) on this device, cache it on disk.

The micro-benchmark (each choice with its reason):
  - Inputs are resource variables initialised in-graph with seeded random values, so a run feeds nothing and the
    GraphDef stays small whatever the tensor sizes.
  - The op is built by tensat_tf.egraph.nodedef.build (the emitter's own builder) R times side by side on the same
    inputs; a NoOp-like fetch depends on all copies. Per-op time = (time(R copies) - time(inputs only)) / R, which
    removes Session.run's ~80-300 us call overhead and leaves what the op costs inside a graph.
  - Grappler and the classic graph optimizer are OFF: with them on, copies are merged (CSE) or folded and the numbers
    are meaningless ("Transpose 12 us").
  - One intra-op and one inter-op thread (how the project benchmarks; the second vCPU of the test VM comes and goes),
    warm-up runs (oneDNN primitive creation), then several rounds with the base and the op graph interleaved; the
    fastest round of each counts (other processes only ever add time).
  - Timing runs in a fresh worker process (`python -m tensat_tf.cost.measured`) with TF_OVERRIDE_GLOBAL_THREADPOOL=1.
    TF's CPU devices share ONE process-wide compute pool sized by whoever created the first device: after any eager
    op (loading the SavedModel, say) it has a thread per core, and a session asking for one thread still shards
    kernels over it. On the 2-vCPU VM that made a [4,32,4,16] Transpose take 70 us instead of 5 us. A fresh process
    also keeps the numbers independent of what the caller did before.
Results are cached as JSON in `<cache dir>/<device>-tf<version>.json` (cache dir: $TENSAT_TF_COST_CACHE or
~/.cache/tensat_tf/costs), keyed by term, literals, input shapes and dtype; a cost read back from the cache is the
same float, so extraction is reproducible once calibrated. The oneDNN setting is recorded in the file because it
changes some ops several-fold.
"""
from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from typing import Optional, Sequence

import tensorflow as tf

from tensat_tf import ops
from tensat_tf.cost import analytic
from tensat_tf.egraph import nodedef
from tensat_tf.egraph.export import Exported
from tensat_tf.options import UNKNOWN_DIM

CACHE_ENV = "TENSAT_TF_COST_CACHE"
CACHE_FORMAT = 1

# Benchmark sizing: enough copies that the op dominates the run, enough inner calls that the timer resolution and
# Session.run jitter average out, and a bound on both so one huge op cannot take minutes.
TARGET_RUN_MS = 4.0          # aim for this much op time per Session.run
MAX_COPIES = 64
MIN_SAMPLE_MS = 3.0          # one timing sample spans at least this long
ROUNDS = 5
PASSES = 2                   # the worker times the whole list this many times, apart in time; the fastest counts
WARMUP = 2
FLOOR_MS = 1e-5              # a cost is never <= 0 (noise can make the difference negative for the tiniest ops)
WORKER_ENV = {"TF_OVERRIDE_GLOBAL_THREADPOOL": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}


# ---------------------------------------------------------------------------------------------- device identity
def device_name() -> str:
    """The GPU's name when TF sees one, else the CPU model string from /proc/cpuinfo."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return details.get("device_name", "gpu")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def machine_device() -> analytic.Device:
    """The analytic Device of this machine, for the estimates the measured model falls back on: GPU when TF sees one,
    else the CPU profile of this process's runtime (devices.runtime_cpu)."""
    return analytic.GPU if tf.config.list_physical_devices("GPU") else analytic.runtime_cpu()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tensat_tf", "costs")


def default_cache_path() -> str:
    return os.path.join(cache_dir(), f"{_slug(device_name())}-tf{tf.__version__}.json")


def entry_key(term: str, payload, in_shapes: Sequence[Sequence[int]], dtype: str = "float32") -> str:
    """The cache key of one benchmark: canonical JSON, so equal ops give equal keys across runs."""
    lits = [list(v) if isinstance(v, (tuple, list)) else v for v in (payload or ())]
    return json.dumps([term, lits, [list(s) for s in in_shapes], dtype], separators=(",", ":"))


# ---------------------------------------------------------------------------------------------- the micro-benchmark
def _session_config() -> tf.compat.v1.ConfigProto:
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1,
                                      use_per_session_threads=True)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_common_subexpression_elimination = False
    config.graph_options.optimizer_options.do_function_inlining = False
    return config


def _copies_for(estimate_ms: float) -> int:
    return max(2, min(MAX_COPIES, math.ceil(TARGET_RUN_MS / max(estimate_ms, 1e-4))))


def time_op(spec: ops.OpSpec, payload: tuple, in_shapes: Sequence[Sequence[int]], dtype: tf.DType = tf.float32,
            copies: Optional[int] = None, rounds: int = ROUNDS, seed: int = 0,
            device: analytic.Device = analytic.CPU) -> float:
    """Milliseconds one execution of `spec` with `payload` on inputs of `in_shapes` takes inside a graph.

    Trustworthy only in a process whose first TF device was created with one intra-op thread or with
    TF_OVERRIDE_GLOBAL_THREADPOOL=1 (the worker; see the module docstring). `copies` defaults to what fills about
    TARGET_RUN_MS by the analytic estimate under `device`.
    Raises whatever TF raises when the op cannot be built or run at these shapes (the caller falls back).
    """
    if copies is None:
        copies = _copies_for(analytic.node_cost(spec.term, payload, in_shapes, None, 1, device))
    in_shapes = [tuple(int(d) for d in s) for s in in_shapes]
    g = tf.Graph()
    with g.as_default():
        reads = []
        for i, shape in enumerate(in_shapes):
            init = tf.random.stateless_normal(shape, seed=[seed, i], dtype=dtype)
            var = tf.compat.v1.Variable(init, name=f"in{i}", use_resource=True, trainable=False)
            reads.append(var.read_value())
        gd = tf.compat.v1.GraphDef()
        for i in range(len(in_shapes)):
            ph = gd.node.add(name=f"ph{i}", op="Placeholder")
            ph.attr["dtype"].type = dtype.as_datatype_enum
        for r in range(copies):
            node, extra = nodedef.build(spec, tuple(payload), f"op{r}", [f"ph{i}" for i in range(len(in_shapes))],
                                        dtype)
            gd.node.extend(extra + [node])
        tf.graph_util.import_graph_def(gd, input_map={f"ph{i}:0": t for i, t in enumerate(reads)}, name="bench")
        op_nodes = [g.get_operation_by_name(f"bench/op{r}") for r in range(copies)]
        # Fetch a scalar that depends on the work: fetching a device tensor also waits for an asynchronous GPU.
        with tf.control_dependencies([t.op for t in reads]):
            base = tf.identity(tf.constant(0.0), name="base")
        with tf.control_dependencies(op_nodes):
            full = tf.identity(tf.constant(0.0), name="full")
        init_op = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=g, config=_session_config()) as sess:
        sess.run(init_op)
        run_base, run_full = sess.make_callable(base), sess.make_callable(full)
        for _ in range(WARMUP):
            run_base()
            run_full()
        t0 = time.perf_counter()
        run_full()
        one = max(time.perf_counter() - t0, 1e-6) * 1e3
        inner = max(1, math.ceil(MIN_SAMPLE_MS / one))
        base_ms, full_ms = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(inner):
                run_base()
            t1 = time.perf_counter()
            for _ in range(inner):
                run_full()
            t2 = time.perf_counter()
            base_ms.append((t1 - t0) * 1e3 / inner)
            full_ms.append((t2 - t1) * 1e3 / inner)
    # Interference from other processes only ever adds time, so the fastest round of each graph is the best estimate
    # of its undisturbed time (timeit's rule); a median still carried 2-3x outliers on the shared 2-vCPU VM.
    return max((min(full_ms) - min(base_ms)) / copies, FLOOR_MS)


# ---------------------------------------------------------------------------------------------- the worker process
def _request(term: str, payload, in_shapes) -> dict:
    return {"key": entry_key(term, payload, in_shapes), "term": term,
            "payload": [list(v) if isinstance(v, (tuple, list)) else v for v in (payload or ())],
            "in_shapes": [list(s) for s in in_shapes]}


def _payload_from_json(spec: ops.OpSpec, values: list) -> tuple:
    return tuple(tuple(v) if kind == "ints" else v for (_, kind), v in zip(spec.literals, values))


def _worker_main() -> None:
    """Read a JSON list of requests on stdin; print one JSON line {key, ms[, error]} per request when it is done,
    preceded by {timing: key} lines that say which op is running.

    The list is timed PASSES times over and each op keeps its fastest pass: on a shared machine a neighbour's burst
    can slow every round of one op 2x (seen on the test VM), and passes apart in time rarely all fall in one burst.
    """
    requests = json.load(sys.stdin)
    device = machine_device()
    best: dict[str, dict] = {}
    for p in range(PASSES):
        for r in requests:
            if best.get(r["key"], {}).get("error"):
                continue
            spec = ops.BY_TERM[r["term"]]
            print(json.dumps({"timing": r["key"]}), flush=True)     # names the culprit if the process dies here
            try:
                ms = time_op(spec, _payload_from_json(spec, r["payload"]), r["in_shapes"], device=device)
                entry = {"ms": min(ms, best.get(r["key"], {"ms": ms})["ms"])}
            except Exception as e:  # noqa: BLE001 - any TF failure means "cannot time this op here", never a crash
                first = (str(e).strip().splitlines() or [""])[0]
                entry = {"ms": None, "error": f"{type(e).__name__}: {first[:200]}"}
            best[r["key"]] = entry
            if p == PASSES - 1 or "error" in entry:
                print(json.dumps({"key": r["key"]} | entry), flush=True)


def time_in_worker(requests: list[dict]) -> dict[str, dict]:
    """key -> cache entry for every request, timed in fresh worker processes.

    If the worker dies (a kernel that aborts the process), the op it was on is recorded as failed and a new worker
    takes the ops not reported yet, so one bad op never loses the others; a worker that cannot even start fails all.
    """
    env = os.environ | WORKER_ENV
    results: dict[str, dict] = {}
    todo = list(requests)
    while todo:
        proc = subprocess.run([sys.executable, "-m", "tensat_tf.cost.measured"], input=json.dumps(todo),
                              capture_output=True, text=True, env=env)
        running = None
        for line in proc.stdout.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue                     # anything else a library printed on stdout
            if not isinstance(msg, dict):
                continue
            if "timing" in msg:
                running = msg["timing"]
            else:
                results[msg.pop("key")] = msg
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
            error = {"ms": None, "error": f"benchmark worker exited with {proc.returncode}: {tail}"}
            if running is None:               # died before timing anything (cannot start): nothing will work now,
                error["transient"] = True     # and nothing is learnt about the ops: not written to the cache
                return results | {r["key"]: dict(error) for r in todo if r["key"] not in results}
            results[running] = error
        left = [r for r in todo if r["key"] not in results]
        if len(left) == len(todo):
            raise RuntimeError("the benchmark worker stopped without timing anything")
        todo = left
    return results


# ---------------------------------------------------------------------------------------------- the cost model
class MeasuredCostModel:
    """Costs from timings on this device, with the analytic model for what cannot be timed.

    Same semantics as analytic.costs: structural nodes 0, folded (constant) nodes 0, opaque Op one overhead.
    A typed node is timed at its input shapes (unknown dims resolved like the analytic model). When its shapes are
    unknown the analytic cost is used; when TF cannot run it at those shapes (e.g. a Reshape whose target does not
    fit the batch-resolved input), the failure is cached and the analytic cost used, so a second run gives the same
    numbers without retrying.
    """

    def __init__(self, cache_path: Optional[str] = None, batch_size: int = 1,
                 device: Optional[analytic.Device] = None, unknown_dim: int = UNKNOWN_DIM):
        self.cache_path = cache_path or default_cache_path()
        self.batch_size = batch_size
        self.unknown_dim = unknown_dim
        if device is None:
            device = machine_device()
        self.device = analytic.device_named(device)
        self.entries: dict[str, dict] = self._read_file()
        self.hits = 0          # node lookups answered by entries that existed before the call that made them
        self.timed = 0         # ops benchmarked by this object
        self.used: set[str] = set()   # keys of every op this object has costed (for reports)
        self._dirty = False

    # ------------------------------------------------------------------ cache file
    def _meta(self) -> dict:
        return {"format": CACHE_FORMAT, "device": device_name(), "tf_version": tf.__version__,
                "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}

    def _read_file(self) -> dict:
        try:
            with open(self.cache_path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}             # missing or corrupt: re-measured, never trusted
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return {}
        return data.get("entries", {})

    def save(self) -> None:
        """Write the cache (merged with entries another process may have added meanwhile), atomically."""
        if not self._dirty:
            return
        merged = self._read_file()
        merged.update((k, e) for k, e in self.entries.items() if not e.get("transient"))
        self.entries = merged | self.entries
        os.makedirs(os.path.dirname(os.path.abspath(self.cache_path)), exist_ok=True)
        tmp = f"{self.cache_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self._meta() | {"entries": dict(sorted(merged.items()))}, f, indent=0)
        os.replace(tmp, self.cache_path)
        self._dirty = False

    # ------------------------------------------------------------------ measuring
    def measure(self, ops_at_shapes: list[tuple[str, tuple, list]]) -> int:
        """Time every (term, payload, concrete input shapes) not in the cache yet; returns how many were timed."""
        new: dict[str, dict] = {}
        for term, payload, in_shapes in ops_at_shapes:
            r = _request(term, payload, in_shapes)
            if r["key"] in self.entries or r["key"] in new:
                continue
            if term not in ops.BY_TERM:
                self.entries[r["key"]] = {"ms": None, "error": f"no op-table entry for {term}"}
                self._dirty = True
                continue
            new[r["key"]] = r
        if new:
            self.entries.update(time_in_worker(list(new.values())))
            self.timed += len(new)
            self._dirty = True
        self.save()
        return len(new)

    def costs(self, exp: Exported, batch_size: Optional[int] = None) -> list[float]:
        """One cost (ms) per e-node of exp.egraph, index-aligned with exp.egraph.nodes; times cache misses first."""
        return self.priced(exp, batch_size)[0]

    def priced(self, exp: Exported, batch_size: Optional[int] = None) -> tuple[list[float], dict]:
        """costs() and the terms of the fused nodes (analytic.fusion_terms)."""
        batch = self.batch_size if batch_size is None else batch_size
        const = analytic.constant_classes(exp.egraph)
        shapes: dict[int, tuple] = {}
        for i, n in enumerate(exp.egraph.nodes):
            if n.op in analytic.STRUCTURAL_FREE or n.op == "Op" or analytic.is_folded(n, const):
                continue
            shapes[i] = analytic.node_shapes(exp, i, batch, self.unknown_dim)
        wanted = [(exp.egraph.nodes[i].op, exp.egraph.nodes[i].payload, ins)
                  for i, (ins, _) in shapes.items() if ins is not None]
        keys = [entry_key(t, p, s) for t, p, s in wanted]
        self.hits += sum(1 for k in keys if k in self.entries)
        self.used.update(keys)
        self.measure(wanted)
        out = []
        for i, n in enumerate(exp.egraph.nodes):
            if n.op == "Op":
                out.append(self.device.overhead_ms("Op"))
            elif i not in shapes:
                out.append(0.0)                                   # structural, or folded into a constant
            else:
                in_shapes, out_shape = shapes[i]
                ms = None if in_shapes is None else self.entries[entry_key(n.op, n.payload, in_shapes)]["ms"]
                if ms is None:
                    ms = analytic.node_cost(n.op, n.payload, in_shapes, out_shape, batch, self.device)
                out.append(ms)
        # each op was timed alone; the runtime runs some as a contraction's epilogue (cost/fusion.py)
        return analytic.fusion_terms(exp, out, batch, self.device, self.unknown_dim)


if __name__ == "__main__":
    _worker_main()
