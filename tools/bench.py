"""Side-by-side benchmark: our optimizer against TF, XLA and ONNX Runtime, per zoo model, in one process.

    python tools/bench.py --quick                      # three small models (< 5 minutes on 2 cores)
    python tools/bench.py --models=bert_tiny,nasrnn    # chosen models
    python tools/bench.py                              # every model of the benchmark suite
    python tools/bench.py --suite=real [--quick]       # the real-exports suite (Keras 3 exports, zoo.SUITE_NAMES)
    flags: --batch_sizes=1,8 --xla --onnx --openvino --out_json=bench.json --markdown=bench.md, every engine flag

Per model:
  - conversion with the engine flags and --profile (as the CLI does), seconds per stage, e-graph size and stop reason,
    extraction status, predicted cost before/after;
  - a "no rules" conversion (freeze + Grappler clean-up + our writer only), to separate what the rules win from what
    freezing wins;
  - side by side in one clean worker per batch size, in the same rotated blocks (tensat_tf/peers.py: one intra- and
    inter-op thread, Grappler on, same seeded inputs): original / no-rules / optimized SavedModels under TF; (--onnx)
    the original and ours converted by tf2onnx under ONNX Runtime (ORT_ENABLE_ALL); (--openvino) the original and ours
    under OpenVINO (convert_model of the SavedModel, f32, one thread; serving_default only, which is all OpenVINO
    reads). Every speedup is a ratio original / candidate from paired blocks: the median of the per-block ratios and
    its interval (tensat_tf/speedup.py's compare()), never the ratio of two separately taken minima. --rounds=N
    repeats the timing with N fresh pairs of workers and pools their blocks: the same graphs measured 1.10x in one
    run and 1.06x in the next (real_mobilenet, BENCHMARKS.md), each interval within its own processes;
  - (--xla) original / no-rules / optimized under XLA jit (tensat_tf/latency.py's worker), compile time apart.
Writes a markdown table (stdout and --markdown) and the raw numbers (--out_json).
OpenVINO is optional (`pip install -e ".[bench]"`); without it its columns say so and the rest runs.
"""
from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

from tensat_tf.cli import engine_flags  # noqa: E402

QUICK = ["bert_tiny", "inception_block", "nasrnn"]
# TENSAT's benchmark models (NasNet-A and VGG-19 reduced, see tensat_tf/zoo) and the Keras applications
SUITE = ["bert_tiny", "inception_block", "nasrnn", "keras_cnn", "squeezenet", "nasrnn_taso", "bert_taso", "resnext50",
         "nasnet_a", "inception_v3", "vgg19", "resnet50", "mobilenet_v2"]

# the real-exports suite (tensat_tf/zoo/keras_apps.py, transformers.py): what users bring; Keras' `serve` signature is
# the same function as serving_default, so only serving_default is timed
QUICK_REAL = ["real_mobilenet", "real_vit", "real_decoder"]

flags.DEFINE_enum("suite", "tensat", ["tensat", "real"], "tensat: TENSAT's benchmarks and the older Keras "
                  "applications; real: the real-exports suite (zoo.SUITE_NAMES).")
flags.DEFINE_list("models", None, "Zoo models (default: the whole suite, or the quick set with --quick).")
flags.DEFINE_bool("quick", False, f"Only {', '.join(QUICK)} (--suite=real: {', '.join(QUICK_REAL)}).")
flags.DEFINE_bool("openvino", True, "Also time the original and ours under OpenVINO (serving_default only).")
flags.DEFINE_integer("blocks", 12, "Timing blocks per batch size (paired: every subject runs in every block).")
flags.DEFINE_integer("rounds", 1, "Timing rounds per batch size, each a fresh pair of workers (both load orders); "
                     "their blocks are pooled, so the intervals cover what differs between processes too.")
flags.DEFINE_bool("convert_profile", True, "Convert with --profile (what a user gets: a signature not faster keeps "
                  "its original graph); --noconvert_profile times the optimized graph as extracted.")
flags.DEFINE_list("batch_sizes", ["1", "4"], "Batch sizes for unknown leading dimensions (batch 1 and a serving "
                                              "batch).")
flags.DEFINE_bool("xla", True, "Also time under XLA jit.")
flags.DEFINE_bool("onnx", True, "Also time the original under ONNX Runtime (via tf2onnx).")
flags.DEFINE_string("out_json", None, "Write every number here.")
flags.DEFINE_string("markdown", None, "Write the markdown table here.")
flags.DEFINE_string("from_json", None, "Only render the markdown table of an earlier run's --out_json file.")
FLAGS = flags.FLAGS


def _tf2onnx(src: str, signature: str, out: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", src, "--signature_def",
                           signature, "--tag", "serve", "--opset", "17", "--output", out],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
    if proc.returncode != 0:
        errs = [line for line in proc.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(f"tf2onnx failed (exit {proc.returncode})" + (f": {errs[-1][:160]}" if errs else ""))
    return out


def ratio(original_block_ms, candidate_block_ms) -> dict:
    """original / candidate from paired blocks: tensat_tf.speedup.compare (median of per-block ratios, its interval
    and verdict). The one place bench ratios are computed."""
    from tensat_tf import speedup
    return speedup.compare(original_block_ms, candidate_block_ms).to_json()


def bench_model(name: str, engine, batch_sizes, tmp: str) -> dict:
    from tensat_tf import peers, zoo
    from tensat_tf import latency
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    src = zoo.resolve(f"zoo:{name}")
    out, plain = os.path.join(tmp, name), os.path.join(tmp, name + "-norules")
    only = ["serving_default"] if name in zoo.SUITE_NAMES else None
    t = time.perf_counter()
    # the product's own conversion: with --profile, so a signature not faster keeps its original graph (what a user
    # gets), unless --noconvert_profile
    rep = convert(src, out, Options(signatures=only, engine=engine, profile=FLAGS.convert_profile))
    seconds = time.perf_counter() - t
    convert(src, plain, Options(signatures=only, engine=EngineOptions(enable_rules=[], unknown_dim=engine.unknown_dim)))
    row = {"model": name, "convert_s": round(seconds, 2), "timing_s": rep["timing_s"], "signatures": {}}
    ov_missing = peers.openvino_missing() if FLAGS.openvino else None
    for sig_name, s in sorted(rep["signatures"].items()):
        entry = {k: s.get(k) for k in ("nodes_before", "nodes_after", "egraph", "extraction", "rules_applied",
                                       "profile")}
        entry["egraph"] = {k: v for k, v in (entry["egraph"] or {}).items() if k != "saturation"}
        onnx = {}
        if FLAGS.onnx:
            for which, path in (("original", src), ("ours", out)):
                try:
                    onnx[which] = _tf2onnx(path, sig_name, os.path.join(tmp, f"{name}-{sig_name}-{which}.onnx"))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    entry[f"onnx_error_{which}"] = str(e)[:200]
        openvino = []
        if FLAGS.openvino and ov_missing is None and sig_name == "serving_default":
            openvino = [src, out]
        elif FLAGS.openvino:
            entry["openvino_error"] = ov_missing or "OpenVINO reads only serving_default"
        entry["latency"] = {}
        for b in batch_sizes:
            r = _time_peers(src, plain, out, sig_name, b, onnx, openvino, entry, engine.unknown_dim)
            if FLAGS.xla and "error" not in r:
                try:
                    x = latency.measure([src, plain, out], sig_name, b, xla=True, unknown_dim=engine.unknown_dim)["xla"]
                    r["xla"] = {"ms": [v["ms"] for v in x], "compile_s": [v["compile_s"] for v in x],
                                "no_rules": ratio(x[0]["block_medians"], x[1]["block_medians"]),
                                "optimized": ratio(x[0]["block_medians"], x[2]["block_medians"])}
                except latency.ProfileError as e:
                    r["xla"] = {"error": str(e)[:200]}
            entry["latency"][b] = r
        row["signatures"][sig_name] = entry
    return row


def _time_peers(src, plain, out, sig_name, batch, onnx, openvino, entry, unknown_dim: int) -> dict:
    """One worker: TF original / no-rules / optimized, ORT original / ours, OpenVINO original / ours, same blocks."""
    from tensat_tf import peers
    try:
        m = peers.pooled([peers.measure([src, plain, out], sig_name, batch,
                                  onnx=[onnx[k] for k in ("original", "ours") if k in onnx], openvino=openvino,
                                  blocks=FLAGS.blocks, unknown_dim=unknown_dim) for _ in range(FLAGS.rounds)])
    except peers.PeerError as e:
        return {"error": str(e)}
    subj = m["subjects"]
    tf_, rest = subj[:3], subj[3:]
    ort = {k: rest.pop(0) for k in ("original", "ours") if k in onnx}
    ov = dict(zip(("original", "ours"), rest))
    r = {"runs": m["runs"], "blocks": m["blocks"], "rounds": FLAGS.rounds, "subjects": subj,
         "tf_ms": [x["ms"] for x in tf_],
         "no_rules": ratio(tf_[0]["block_ms"], tf_[1]["block_ms"]),
         "optimized": ratio(tf_[0]["block_ms"], tf_[2]["block_ms"]),
         # the e-graph's own gain: the no-rules output against ours, in the same blocks
         "egraph_gain": ratio(tf_[1]["block_ms"], tf_[2]["block_ms"])}
    for label, d in (("onnxruntime", ort), ("openvino", ov)):
        orig, ours = d.get("original") or {}, d.get("ours") or {}
        if not d:
            continue
        r[label] = {"original_error": orig.get("error"), "ours_error": ours.get("error")}
        if "ms" in orig:
            r[label]["original_ms"] = orig["ms"]
            # TF running ours vs this runtime running the original: the runtime gap
            r[label]["tf_ours_vs_original"] = ratio(tf_[2]["block_ms"], orig["block_ms"])
        if "ms" in ours:
            r[label]["ours_ms"] = ours["ms"]
        if "ms" in orig and "ms" in ours:
            r[label]["ours"] = ratio(orig["block_ms"], ours["block_ms"])
    return r


def _ratio(a, b):
    return a / b if a and b else float("nan")


def _iv(d) -> str:
    """'1.234x [1.10, 1.31]' for a speedup.compare() json (an interval of None/inf when too few blocks)."""
    if not d:
        return "-"
    high = "inf" if d.get("high") is None else f"{d['high']:.2f}"
    return f"{d['ratio']:.3f}x [{d['low']:.2f}, {high}]"


def _rounds_note(rows: list) -> str:
    n = max((r.get("rounds", 1) for row in rows for e in row["signatures"].values()
             for r in e["latency"].values()), default=1)
    return f" Blocks pooled over {n} rounds of fresh workers." if n > 1 else ""


def markdown(rows: list, command: str) -> str:
    if any("tf" in r for row in rows for e in row["signatures"].values() for r in e["latency"].values()):
        return _markdown_v1(rows, command)      # a --from_json file written before the side-by-side worker
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, one intra-op and one "
        f"inter-op thread; TF {_tf_version()}. Every speedup is original / candidate: the median of per-block "
        "ratios from paired blocks (all subjects of a row run in the same blocks) and its 95 % interval "
        "(tensat_tf/speedup.py); ms are medians of block medians." + _rounds_note(rows),
        "",
        "| model | batch | TF orig ms | TF no-rules (speedup) | TF optimized (speedup) | ORT orig ms "
        "| ORT ours ms (speedup) | OV orig ms | OV ours ms (speedup) | XLA no-rules / optimized | optimizer s "
        "| e-nodes (stop) | rules applied | nodes | e-graph gain (no-rules / optimized) | predicted gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for sig, e in row["signatures"].items():
            label = row["model"] if len(row["signatures"]) == 1 else f"{row['model']}:{sig}"
            applied = sum((e.get("rules_applied") or {}).values())
            for b, r in e["latency"].items():
                if "error" in r:
                    lines.append(f"| {label} | {b} | error: {r['error'][:80]} |")
                    continue
                ort, ov, xla = r.get("onnxruntime") or {}, r.get("openvino") or {}, r.get("xla")
                ort_o = _peer_ms(ort, "original", e.get("onnx_error_original"))
                ort_u = _peer_ratio(ort, e.get("onnx_error_ours") or e.get("onnx_error_original"))
                ov_o = _peer_ms(ov, "original", e.get("openvino_error"))
                ov_u = _peer_ratio(ov, e.get("openvino_error"))
                xla_txt = ("-" if not xla else xla["error"][:60] if "error" in xla
                           else f"{_iv(xla['no_rules'])} / {_iv(xla['optimized'])}")
                eg = e["egraph"] or {}
                kept = " (original kept)" if (e.get("profile") or {}).get("kept_original") else ""
                lines.append(
                    f"| {label} | {b} | {r['tf_ms'][0]:.3f} | {_iv(r['no_rules'])} | {_iv(r['optimized'])} | {ort_o} "
                    f"| {ort_u} | {ov_o} | {ov_u} | {xla_txt} | {row['timing_s'].get('tensat', 0):.2f} "
                    f"| {eg.get('enodes')} ({eg.get('stop_reason')}) | {applied} "
                    f"| {e['nodes_before']} -> {e['nodes_after']}{kept} | {_iv(r.get('egraph_gain'))} "
                    f"| {_predicted(e):.3f}x |")
    pairs = [(r["egraph_gain"]["ratio"], _predicted(e)) for row in rows for e in row["signatures"].values()
             for r in e["latency"].values() if r.get("egraph_gain")]
    if pairs:
        gains = [g for g, _ in pairs]
        geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
        close = sum(abs(p / g - 1) <= 0.10 for g, p in pairs if p == p)
        lines += ["", f"E-graph gain over {len(gains)} rows: geometric mean {geo:.3f}x; >= 1.10x on "
                      f"{sum(g >= 1.10 for g in gains)}; below 0.98x on {sum(g < 0.98 for g in gains)}. "
                      f"Predicted gain (the cost model's no-rules / optimized cost) within 10 % of the measured one "
                      f"on {close} of {len(pairs)}."]
    return "\n".join(lines)


def _predicted(e: dict) -> float:
    """The cost model's e-graph gain for one signature: its predicted cost of the pass's input (what the no-rules
    conversion writes) over that of its output, a call's fixed cost and its opaque ops' work included
    (analytic.reported_gain: TF, CPU, as measured here); nan when the signature has no extraction."""
    from tensat_tf.cost import analytic
    ex = e.get("extraction") or {}
    if ex.get("kept_input") and ex.get("cost_before"):
        return 1.0                  # the pass kept its input (e.g. the Grappler check): the no-rules graph
    gain = analytic.reported_gain([ex])
    return float("nan") if gain is None else gain


def _peer_ms(d: dict, which: str, error) -> str:
    if f"{which}_ms" in d:
        return f"{d[f'{which}_ms']:.3f}"
    return _short(d.get(f"{which}_error") or error)


def _peer_ratio(d: dict, error) -> str:
    if "ours" in d:
        return f"{d['ours_ms']:.3f} ({_iv(d['ours'])})"
    if "ours_ms" in d:      # ours runs where the original does not (an XLA call tf2onnx cannot write): no ratio
        return f"{d['ours_ms']:.3f} (original: {_short(d.get('original_error') or error)})"
    return _short(d.get("ours_error") or d.get("original_error") or error)


def _short(err) -> str:
    if not err:
        return "-"
    if err.startswith("tf2onnx failed"):
        return "tf2onnx failed"
    op = re.search(r"No Op registered for (\w+)", err)
    if op:      # tf2onnx wrote an op ONNX does not have (Erfc of Keras' exact GELU)
        return f"no ONNX op {op.group(1)}"
    node = re.search(r'In Node, \("[^"]*", (\w+), "", -1\)', err)
    if node:
        return f"ONNX Runtime rejects its {node.group(1)} node"
    return err.replace("|", "/")[:50]


def _markdown_v1(rows: list, command: str) -> str:
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, one intra-op and one "
        f"inter-op thread; TF {_tf_version()}. Speedup = original ms / optimized ms (min of block medians).",
        "",
        "| model | batch | original ms (TF) | optimized ms | speedup TF | no-rules speedup | XLA orig -> opt ms "
        "(speedup; compile s) | ORT ms (ours / ORT) | optimizer s | e-nodes (stop) | extraction | predicted "
        "ms before -> after | nodes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for sig, e in row["signatures"].items():
            label = row["model"] if len(row["signatures"]) == 1 else f"{row['model']}:{sig}"
            for b, r in e["latency"].items():
                if "error" in r:
                    lines.append(f"| {label} | {b} | error: {r['error'][:80]} |")
                    continue
                o, p, n = (x["ms"] for x in r["tf"])
                xla = r.get("xla")
                xla_txt = (f"{xla[0]['ms']:.3f} -> {xla[2]['ms']:.3f} ({_ratio(xla[0]['ms'], xla[2]['ms']):.3f}x; "
                           f"{xla[0]['compile_s']:.2f} / {xla[2]['compile_s']:.2f})") if xla else "-"
                ort = r.get("onnxruntime")
                ort_txt = (f"{ort[0]['ms']:.3f} ({_ratio(n, ort[0]['ms']):.2f})" if ort
                           else _onnx_error(e.get("onnx_error")))
                eg, ex = e["egraph"], e["extraction"]
                lines.append(
                    f"| {label} | {b} | {o:.3f} | {n:.3f} | {_ratio(o, n):.3f}x | {_ratio(o, p):.3f}x | {xla_txt} "
                    f"| {ort_txt} | {row['timing_s'].get('tensat', 0):.2f} | {eg['enodes']} ({eg['stop_reason']}) "
                    f"| {ex.get('method')} {ex.get('status')} | {ex['cost_before']:.4f} -> {ex['cost_after']:.4f} "
                    f"| {e['nodes_before']} -> {e['nodes_after']}"
                    + (" (original kept)" if (e.get("profile") or {}).get("kept_original") else "") + " |")
    return "\n".join(lines)


def _onnx_error(err) -> str:
    if not err:
        return "-"
    # runs before this check recorded the last stderr line of tf2onnx, which is not always the error
    return err if err.startswith("tf2onnx failed") else "tf2onnx failed"


def _openvino_missing():
    from tensat_tf import peers
    return peers.openvino_missing()


def _tf_version() -> str:
    import tensorflow as tf
    return tf.__version__


def main(argv):
    if FLAGS.from_json:
        with open(FLAGS.from_json) as f:
            data = json.load(f)
        rows, command = (data["rows"], data["command"]) if isinstance(data, dict) else (data, "python tools/bench.py")
        print(markdown(rows, command))
        return
    if FLAGS.suite == "real":
        from tensat_tf import zoo
        default, quick = zoo.SUITE_NAMES, QUICK_REAL
    else:
        default, quick = SUITE, QUICK
    models = FLAGS.models or (quick if FLAGS.quick else default)
    if FLAGS.openvino and (missing := _openvino_missing()):
        print(f"bench: {missing}; OpenVINO columns will be empty", file=sys.stderr)
    engine = engine_flags.engine_options()
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            print(f"[{time.perf_counter() - t0:7.1f} s] {name}", file=sys.stderr)
            rows.append(bench_model(name, engine, batch_sizes, tmp))
            if FLAGS.out_json:      # after every model: a long run that dies keeps what it measured
                _write_json(rows, t0)
    command = _command()
    text = markdown(rows, command) + f"\n\nTotal benchmark time: {time.perf_counter() - t0:.0f} s.\n"
    print(text)
    if FLAGS.markdown:
        with open(FLAGS.markdown, "w") as f:
            f.write(text)
    if FLAGS.out_json:
        _write_json(rows, t0)


def _command() -> str:
    return ("python tools/bench.py " + " ".join(a for a in sys.argv[1:]
                                               if not a.startswith(("--out_json", "--markdown")))).strip()


def _write_json(rows: list, t0: float) -> None:
    with open(FLAGS.out_json, "w") as f:
        json.dump({"command": _command(), "seconds": round(time.perf_counter() - t0, 1), "rows": rows}, f,
                  indent=1, default=str)


if __name__ == "__main__":
    app.run(main)
