"""`tensat_tf convert SRC --output_dir=DST`: optimize a SavedModel, verify it, publish it, print a table."""
from __future__ import annotations

import dataclasses
import os
import sys

from absl import flags

from tensat_tf import errors
from tensat_tf import report as report_file
from tensat_tf.cli import deploy_flags, engine_flags
from tensat_tf.options import Options

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Where the optimized SavedModel is published (must be absent or empty).")
flags.DEFINE_string("report", None, "Write the JSON report here (default: OUTPUT_DIR.report.json beside the output; "
                                    "the report never goes inside the SavedModel).")
flags.DEFINE_bool("overwrite", False, "Replace a non-empty output directory.")
flags.DEFINE_list("signatures", None, "Convert only these signatures (default: all).")
flags.DEFINE_list("tags", ["serve"], "MetaGraph tags to load.")
flags.DEFINE_bool("canonicalize", True, "Run Grappler's cleanup passes before the e-graph pass.")
flags.DEFINE_bool("fold_shapes", True, "Fold the shape plumbing that the symbolic shapes determine (Shape, "
                                       "StridedSlice, Pack, Prod, GatherV2 feeding a Reshape) before the e-graph "
                                       "pass (passes/shapes.py).")
flags.DEFINE_bool("grouped_conv", True, "Run grouped convolutions, which Keras 3 calls through an XLA-compiled "
                                        "function on CPU, natively: depthwise ones as DepthwiseConv2dNative, others "
                                        "inlined where the --device runs a grouped Conv2D (passes/grouped_conv.py).")
flags.DEFINE_bool("remapper_guard", True, "Write an activation that TF's remapper would fail on (it reads a "
                                          "convolution's residual sum that another node reads too) in an equal form "
                                          "the remapper leaves alone, after the e-graph pass "
                                          "(passes/remapper_guard.py).")
flags.DEFINE_bool("served_check", True, "Serve each written signature once in a fresh process with TF's error log on "
                                        "and publish the original graph of any whose call makes a Grappler "
                                        "optimizer fail (TF logs it and runs the function without that optimizer's "
                                        "rewrites) where the original graph's call does not "
                                        "(tensat_tf/served_check.py; a few seconds).")
flags.DEFINE_list("verify_batch_sizes", ["1", "4"], "Batch sizes used for unknown leading dimensions in verification.")
flags.DEFINE_integer("seed", 0, "Seed of the random verification inputs.")
flags.DEFINE_float("rtol", None, "Max relative difference allowed in verification (default per dtype: 1e-5 float32).")
flags.DEFINE_bool("profile", True, "Time original vs optimized (paired blocks in clean worker processes, every "
                                   "--profile_batch_sizes x --profile_threads setting) and publish the original graph "
                                   "of any signature not measured faster (faster in one setting beyond noise, slower "
                                   "in none; tensat_tf/speedup.py). The decision is a measurement: pass --noprofile "
                                   "for byte-reproducible builds.")
flags.DEFINE_list("profile_batch_sizes", [], "Batch sizes (unknown leading dimensions) the profile decision measures "
                                             "(default: 1 and --verify_batch_sizes).")
flags.DEFINE_list("profile_threads", ["1", "default"], "Thread settings the profile decision measures: a number of "
                                                       "intra-op (= inter-op) threads, or 'default' for TF's own "
                                                       "pools (what TF Serving uses).")
flags.DEFINE_float("profile_seconds", 8.0, "Measuring time per signature for the profile decision (blocks are added "
                                            "while undecided; undecided at the end means the original is kept). "
                                            "Worker start-up and model loading come on top, and so does the first "
                                            "look's 12 blocks per setting where they take longer: fewer cannot "
                                            "decide anything.")
flags.DEFINE_float("profile_margin", 0.02, "Smallest speedup that counts: 'faster' needs the confidence interval of "
                                           "the median block ratio above 1 + margin.")
flags.DEFINE_list("allow_ops", [], "Accept these ops although they have effects outside the graph (files, network, "
                                   "Python, debug output; see tensat_tf/io/scan.py). Without it such a model is "
                                   "refused (exit 17) before anything of it runs.")
flags.DEFINE_bool("strict", False, "A pass that fails stops the conversion (exit 30, nothing written) instead of "
                                  "keeping its input graph, which is still verified and published (the report and "
                                  "the table say FAILED): for CI jobs that must notice.")


def _num(x) -> str:
    return "inf" if x is None else f"{x:.3f}"


def _decision_text(d: dict, interval: str) -> str:
    """One never-slower decision (tensat_tf/speedup.py Decision.to_json) as the table shows it."""
    return (f"median ratio {_num(d['ratio'])}x, {interval} [{_num(d['low'])}, {_num(d['high'])}] over "
            f"{d['blocks']} blocks: {d['verdict']}")


def _table(report: dict) -> str:
    lines = []
    for name, s in report["signatures"].items():
        lines.append(f"signature {name}: nodes {s['nodes_before']} -> {s['nodes_after']}; "
                     f"verification max rel diff {s['verification']['max_rel_diff']:.2e} "
                     f"({'passed' if s['verification']['passed'] else 'FAILED'})")
        if s.get("same_as"):
            lines.append(f"  the same graph, inputs and outputs as {s['same_as']}: optimized once, its graph reused")
        eg, ex = (None, None) if s.get("same_as") else (s.get("egraph"), s.get("extraction"))
        if eg:
            lines.append(f"  e-graph {eg['enodes']} e-nodes / {eg['eclasses']} e-classes after {eg['iterations']} "
                         f"iterations ({eg['stop_reason']}); extraction {ex.get('method')} {ex.get('status')}, "
                         f"predicted cost {ex.get('cost_before')} -> {ex.get('cost_after')} ms"
                         + (f" (the call {ex['predicted_gain']:.3f}x as fast)"
                            if ex.get("predicted_gain") and not ex.get("kept_input") else "")
                         + (f" (kept input: {ex['kept_input']})" if ex.get("kept_input") else ""))
            cut = report_file.probes_cut_short(eg)
            if cut:
                after = f"iteration{'s' * (len(cut) > 1)} {', '.join(str(k) for k, _ in cut)}"
                flag = "--probe_seconds" if report_file.probes_clocked(eg) else "--probe_work"
                lines.append(f"  saturation stopped on unproven probes (after {after}): a larger {flag} may find a "
                             f"cheaper graph")
        sc = s.get("served_check") or {}
        if sc.get("failures") or sc.get("error"):
            what = sc.get("error") or "; ".join(f"{f['optimizer']} failed: {f['error'][:100]}" for f in sc["failures"])
            lines.append(f"  served check: {what}; published: the {sc['published']} graph ({sc['reason']})")
        prof = s.get("profile") or {}
        for x in prof.get("settings", []):
            d = x["decision"]
            lines.append(f"  latency ({prof['device']}, batch {x['batch_size']}, threads {x['threads']}): "
                         f"{x['original']['ms']:.4f} -> {x['candidate']['ms']:.4f} ms (best block); "
                         + _decision_text(d, f"{100 * d['level']:.2f}% interval"))
        if prof:
            lines.append(f"  published: the {prof.get('published', 'optimized')} graph"
                         + (f" ({prof['reason']})" if prof.get("reason") else "")
                         + (f"; same graphs as {prof['same_as']}, measured once" if prof.get("same_as") else "")
                         + (f"; {prof['error']}" if prof.get("error") else ""))
        if s.get("same_as"):
            continue
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
        prof = o.get("profile") or {}
        for x in prof.get("settings", []):
            d = x["decision"]
            lines.append(f"  onnxruntime (batch {x['batch_size']}, threads {x['threads']}): tf2onnx of the original "
                         f"{x['original']['ms']:.4f} -> ours {x['candidate']['ms']:.4f} ms (best block); "
                         + _decision_text(d, "interval"))
        if prof:
            lines.append(f"  written: the {'optimized graph' if prof['published'] == 'optimized' else 'original'}'s "
                         f"conversion ({prof.get('reason', '')})")
    why = report_file.clock_dependence(report)
    if why:
        lines.append(f"reproducibility: the wall clock decided part of this conversion ({why}), so another machine "
                     f"may write other bytes; larger --saturation_seconds, --probe_seconds and --ilp_seconds leave "
                     f"it to the work and node limits")
    hint = _frozen_weights_hint(report)
    if hint:
        lines.append(hint)
    lines.append("seconds per stage: " + ", ".join(f"{k} {v:.3f}" for k, v in report["timing_s"].items()))
    return "\n".join(lines)


def _frozen_weights_hint(report: dict) -> str:
    """Where the graphs were priced for TF's oneDNN runtime and the output keeps weights as variables, say what
    serving with FROZEN_WEIGHTS_VAR=1 buys (README, "Serving on a CPU with oneDNN"): every convolution otherwise
    reorders its variable filter on every call. Safe for this output: its signatures never write a variable."""
    # imported here: tensat_tf.cost brings TensorFlow in, which must not load before main() quiets its logging
    from tensat_tf.cost.devices import CPU, FROZEN_WEIGHTS_VAR
    variables = (report.get("weights") or {}).get("variables", 0)
    onednn = any((s.get("extraction") or {}).get("device") == CPU.name for s in report["signatures"].values())
    if not variables or not onednn:
        return ""
    held = "1 weight is a variable" if variables == 1 else f"{variables} weights are variables"
    return (f"serving: {held}; where TF runs oneDNN's kernels, {FROZEN_WEIGHTS_VAR}=1 in "
            f"the server's environment lets each kernel keep its reordered weights instead of reordering them every "
            f"call (safe here: nothing writes them; README, 'Serving on a CPU with oneDNN')")


def options_from_flags(serving_mode: bool = False) -> Options:
    """The one translation of the flags into tensat_tf.options.Options, checked (Options.check: errors.BadInput,
    errors.UnknownName), for `convert` and for `batch`, which hands it to each worker as data."""
    try:
        verify_batch_sizes = tuple(int(b) for b in FLAGS.verify_batch_sizes)
    except ValueError:
        raise errors.BadInput(f"--verify_batch_sizes must be integers: {FLAGS.verify_batch_sizes}") from None
    try:
        profile_batch_sizes = tuple(int(b) for b in FLAGS.profile_batch_sizes) or None
        profile_threads = tuple(0 if t == "default" else int(t) for t in FLAGS.profile_threads)
    except ValueError:
        raise errors.BadInput(f"--profile_batch_sizes must be integers and --profile_threads integers or 'default': "
                              f"{FLAGS.profile_batch_sizes}, {FLAGS.profile_threads}") from None
    return Options(
        signatures=None if FLAGS.signatures is None else tuple(FLAGS.signatures), overwrite=FLAGS.overwrite,
        canonicalize=FLAGS.canonicalize, fold_shapes=FLAGS.fold_shapes, grouped_conv=FLAGS.grouped_conv,
        remapper_guard=FLAGS.remapper_guard, served_check=FLAGS.served_check,
        verify_batch_sizes=verify_batch_sizes,
        seed=FLAGS.seed, rtol=FLAGS.rtol, tags=tuple(FLAGS.tags),
        allow_ops=tuple(FLAGS.allow_ops), strict=FLAGS.strict, engine=engine_flags.engine_from_flags(),
        profile=FLAGS.profile,
        profile_batch_sizes=profile_batch_sizes, profile_threads=profile_threads,
        profile_seconds=FLAGS.profile_seconds, profile_margin=FLAGS.profile_margin,
        **deploy_flags.options(serving_mode)).check()


def main(args: list[str]) -> int:
    from tensat_tf.progress import Progress
    src, output_dir, serving_mode = deploy_flags.paths(args)
    if not src.startswith("zoo:") and not os.path.exists(src):
        raise errors.MissingPath(f"no such file or directory: {src}")
    if os.path.abspath(src) == os.path.abspath(output_dir):
        raise errors.OutputExists("--output_dir must differ from the input SavedModel (the input is never touched)")
    options = options_from_flags(serving_mode)      # bad options fail here, before TensorFlow is imported
    from tensat_tf.convert import convert   # imports TensorFlow: after the cheap checks
    with Progress(FLAGS.progress, prefix="tensat_tf: ") as progress:
        report = convert(src, output_dir, dataclasses.replace(options, progress=progress.stage))
    report_path = FLAGS.report or report_file.default_path(output_dir)
    report_file.write(report, report_path)
    print(_table(report))
    print(f"wrote {output_dir} and report {report_path}", file=sys.stderr)
    return 0
