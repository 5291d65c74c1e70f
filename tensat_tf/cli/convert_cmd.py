"""`tensat_tf convert SRC --output_dir=DST`: optimize a SavedModel, verify it, publish it, print a table."""
from __future__ import annotations

import json
import os
import sys

from absl import flags

from tensat_tf import errors
from tensat_tf.cli import deploy_flags, engine_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Where the optimized SavedModel is published (must be absent or empty).")
flags.DEFINE_string("report", None, "Write the JSON report here (default: OUTPUT_DIR.report.json beside the output; "
                                    "the report never goes inside the SavedModel).")
flags.DEFINE_bool("overwrite", False, "Replace a non-empty output directory.")
flags.DEFINE_list("signatures", None, "Convert only these signatures (default: all).")
flags.DEFINE_list("tags", ["serve"], "MetaGraph tags to load.")
flags.DEFINE_bool("canonicalize", True, "Run Grappler's cleanup passes before the e-graph pass.")
flags.DEFINE_list("verify_batch_sizes", ["1", "4"], "Batch sizes used for unknown leading dimensions in verification.")
flags.DEFINE_integer("seed", 0, "Seed of the random verification inputs.")
flags.DEFINE_float("rtol", None, "Max relative difference allowed in verification (default per dtype: 1e-5 float32).")
flags.DEFINE_bool("profile", True, "Time original vs optimized (one thread, interleaved blocks, in a clean worker "
                                   "process) and write any signature that is not faster beyond noise without the "
                                   "e-graph rewrites. The decision is a measurement: pass --noprofile for "
                                   "byte-reproducible builds.")
flags.DEFINE_integer("profile_batch_size", 1, "Batch size used for unknown leading dimensions when profiling.")
flags.DEFINE_integer("min_variable_elements", 1024, "Constants with at least this many elements become variables.")


def _table(report: dict) -> str:
    lines = []
    for name, s in report["signatures"].items():
        lines.append(f"signature {name}: nodes {s['nodes_before']} -> {s['nodes_after']}; "
                     f"verification max rel diff {s['verification']['max_rel_diff']:.2e} "
                     f"({'passed' if s['verification']['passed'] else 'FAILED'})")
        eg, ex = s.get("egraph"), s.get("extraction")
        if eg:
            lines.append(f"  e-graph {eg['enodes']} e-nodes / {eg['eclasses']} e-classes after {eg['iterations']} "
                         f"iterations ({eg['stop_reason']}); extraction {ex.get('method')} {ex.get('status')}, "
                         f"predicted cost {ex.get('cost_before')} -> {ex.get('cost_after')} ms"
                         + (f" (kept input: {ex['kept_input']})" if ex.get("kept_input") else ""))
        prof = s.get("profile") or {}
        if "speedup" in prof:
            lines.append(f"  latency ({prof['device']}, batch {prof['batch_size']}): {prof['original']['ms']:.4f} -> "
                         f"{prof['optimized']['ms']:.4f} ms, speedup {prof['speedup']:.3f}x"
                         + ("; not faster beyond noise, the original graph is kept" if prof["kept_original"] else ""))
        elif prof:
            lines.append(f"  latency: {prof.get('skipped') or prof.get('error')}")
        if s.get("rules_applied"):
            lines.append("  rules applied: " + ", ".join(f"{k} x{v}" for k, v in s["rules_applied"].items()))
        for p in s["passes"]:
            status = "ok" if p["ok"] else f"FAILED, input kept: {p['error'][:120]}"
            lines.append(f"  pass {p['name']:<13} {p['nodes_before']:>6} -> {p['nodes_after']:<6} "
                         f"{p['seconds']:7.3f} s  {status}")
        ops = sorted(set(s["ops_before"]) | set(s["ops_after"]))
        lines.append(f"  {'op':<28}{'before':>8}{'after':>8}")
        for op in ops:
            b, a = s["ops_before"].get(op, 0), s["ops_after"].get(op, 0)
            lines.append(f"  {op:<28}{b:>8}{a:>8}" + ("" if a == b else "  *"))
    if report.get("warmup"):
        w = report["warmup"]
        lines.append(f"warm-up: {w['records']} records in {w['path']}, replayed through the TF1 loader "
                     f"(max rel diff {w['max_rel_diff']:.2e})")
    if report.get("onnx"):
        o = report["onnx"]
        lines.append(f"onnx: {o['path']} (signature {o['signature']}, opset {o['opset']}, {len(o['ops'])} op types); "
                     f"onnxruntime max rel diff {o['max_rel_diff']:.2e}")
    lines.append("seconds per stage: " + ", ".join(f"{k} {v:.3f}" for k, v in report["timing_s"].items()))
    return "\n".join(lines)


def options_from_flags(**extra):
    """convert.Options from the flags (shared by `convert` and the workers of `batch`); imports TensorFlow."""
    from tensat_tf.convert import Options
    try:
        batch_sizes = tuple(int(b) for b in FLAGS.verify_batch_sizes)
    except ValueError:
        raise errors.BadInput(f"--verify_batch_sizes must be integers: {FLAGS.verify_batch_sizes}") from None
    return Options(signatures=FLAGS.signatures, overwrite=FLAGS.overwrite, canonicalize=FLAGS.canonicalize,
                   verify_batch_sizes=batch_sizes, seed=FLAGS.seed, rtol=FLAGS.rtol,
                   min_variable_elements=FLAGS.min_variable_elements, tags=FLAGS.tags,
                   engine=engine_flags.engine_options(), profile=FLAGS.profile,
                   profile_batch_size=FLAGS.profile_batch_size, **extra)


def default_report_path(output_dir: str) -> str:
    return os.path.abspath(output_dir).rstrip("/") + ".report.json"


def write_report(report: dict, report_path: str) -> None:
    tmp = report_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, report_path)


def main(args: list[str]) -> int:
    from tensat_tf.progress import Progress
    src, output_dir, serving_mode = deploy_flags.paths(args)
    if not src.startswith("zoo:") and not os.path.exists(src):
        raise errors.MissingPath(f"no such file or directory: {src}")
    if os.path.abspath(src) == os.path.abspath(output_dir):
        raise errors.OutputExists("--output_dir must differ from the input SavedModel (the input is never touched)")
    from tensat_tf.convert import convert   # imports TensorFlow: after the cheap checks
    with Progress(FLAGS.progress, prefix="tensat_tf: ") as progress:
        options = options_from_flags(**deploy_flags.options(output_dir, serving_mode, progress.stage))
        report = convert(src, output_dir, options)
    report_path = FLAGS.report or default_report_path(output_dir)
    write_report(report, report_path)
    print(_table(report))
    print(f"wrote {output_dir} and report {report_path}", file=sys.stderr)
    return 0
