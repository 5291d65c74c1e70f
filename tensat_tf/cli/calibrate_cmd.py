"""`tensat_tf calibrate SRC [--batch_size=N]`: time every distinct op of a model on this machine into the cost cache.
`tensat_tf calibrate --fusion [SRC]`: also (or only) time the contraction patterns TF's CPU runtime fuses against
their parts (tensat_tf/cost/fusion_bench.py), the numbers behind the analytic Device's fused_contractions.

The model goes through the same front end as convert (load and freeze each signature, the Grappler clean-up
pre-pass, ingest into an e-graph, export), so the cache ends up holding exactly the (op, literals, shapes) keys that
the measured cost model will look up when that model is converted at that batch size. Ops already in the cache are
not timed again. One summary line goes to stdout; it also compares the model's summed op costs under the measured
and the analytic model, a quick check of the analytic device constants on this machine.
"""
from __future__ import annotations

import os
import time

from absl import flags

from tensat_tf import errors
from tensat_tf.cli import convert_cmd  # noqa: F401  (defines --tags, --signatures, --canonicalize, shared here)
from tensat_tf.cli import engine_flags  # noqa: F401  (defines --batch_size, shared with convert's cost model)

FLAGS = flags.FLAGS
flags.DEFINE_bool("fusion", False, "calibrate: time the fused conv / matmul / depthwise + bias + activation patterns "
                                   "against their parts (Grappler on, one thread) and print the numbers.")


def exported_signatures(src: str, tags, signatures, canonicalize: bool) -> dict:
    """signature name -> Exported e-graph of that signature, built the way convert builds it (no rewrites)."""
    from tensat_tf.cost import sizes
    from tensat_tf.egraph import ingest, language
    from tensat_tf.io import load as load_mod
    from tensat_tf.passes import canonicalize as canon
    if src.startswith("zoo:"):
        from tensat_tf import zoo
        try:
            path = zoo.resolve(src)
        except zoo.UnknownModel as e:
            raise errors.UnknownName(str(e)) from None
    else:
        path = src
    model = load_mod.load(path, tags=tags, only=signatures)
    out = {}
    for name, sig in sorted(model.signatures.items()):
        gd = canon.optimize(sig.graph_def, sig.item) if canonicalize else sig.graph_def
        ing = ingest.ingest(gd, sig.item)
        eg = language.new_egraph()
        ingest.load(eg, ing)
        out[name] = sizes.exported(eg, ing)
    return out


def fusion_report() -> None:
    """Run the fusion benchmark in a worker process and print one line per pattern (times in us per copy)."""
    from tensat_tf.cost import fusion_bench
    try:
        res = fusion_bench.run_in_worker()
    except (RuntimeError, OSError, ValueError, fusion_bench.subprocess.TimeoutExpired) as e:
        raise errors.InternalError(f"calibrate --fusion: {e}") from None
    setup = res["setup"]
    print(f"fusion patterns at conv input {tuple(setup['conv_input'])} (matmul {setup['conv_input'][1] ** 2}x"
          f"{setup['channels']}x{setup['channels']}), us per copy, fastest of {setup['blocks']} interleaved blocks, "
          f"tf {setup['tf']}; per-node overhead {res['overhead_us_per_node']} us")
    for name, p in res["patterns"].items():
        print(f"  {name:22s} fused {p['fused_us']:8.2f}  contraction alone {p['contraction_us']:8.2f}  epilogue fused "
              f"{p['epilogue_fused_us']:7.2f} vs separate {p['epilogue_separate_us']:7.2f}  kernels "
              f"{','.join(k for k in p['kernels'] if k.startswith('_') or k in ('Relu', 'Tanh', 'BiasAdd'))}")


def main(args: list[str]) -> int:
    if FLAGS.fusion:
        fusion_report()
        if not args:
            return 0
    if len(args) != 1:
        raise errors.BadInput("calibrate takes exactly one SAVED_MODEL_DIR (or zoo:NAME); got "
                              + (" ".join(args) if args else "none"))
    src = args[0]
    if not src.startswith("zoo:") and not os.path.exists(src):
        raise errors.MissingPath(f"no such file or directory: {src}")
    if FLAGS.batch_size < 1 or FLAGS.unknown_dim < 1:
        raise errors.BadInput("--batch_size and --unknown_dim must be >= 1")
    t0 = time.perf_counter()
    from tensat_tf.cost import analytic
    from tensat_tf.cost.measured import MeasuredCostModel   # imports TensorFlow: after the cheap checks
    exported = exported_signatures(src, FLAGS.tags, FLAGS.signatures, FLAGS.canonicalize)
    model = MeasuredCostModel(batch_size=FLAGS.batch_size, unknown_dim=FLAGS.unknown_dim)
    measured_ms = analytic_ms = 0.0
    for exp in exported.values():
        measured_ms += sum(model.costs(exp))
        analytic_ms += sum(analytic.costs(exp, FLAGS.batch_size, model.device, unknown_dim=FLAGS.unknown_dim))
    failed = sum(1 for k in model.used if model.entries[k]["ms"] is None)
    print(f"calibrate {src}: {len(model.used)} distinct ops at batch size {FLAGS.batch_size} over "
          f"{len(exported)} signature(s): {model.timed} timed now, {len(model.used) - model.timed} already cached, "
          f"{failed} not runnable (analytic fallback); sum of op costs {measured_ms:.3f} ms measured vs "
          f"{analytic_ms:.3f} ms analytic ({model.device.name}); cache {model.cache_path}; "
          f"{time.perf_counter() - t0:.1f} s")
    return 0
