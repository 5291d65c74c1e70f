"""Issue 10's targets on the real-exports suite: do the rules apply, and does the optimized graph have fewer nodes?

    python tools/bench_rules.py                                 # every suite model (zoo.SUITE_NAMES), serving_default
    python tools/bench_rules.py --models=real_vit,real_mobilenet --signatures=serve,serving_default
    python tools/bench_rules.py --from_json=tools/results/bench_rules.json     # only re-render the table
    flags: --out_json (default tools/results/bench_rules.json), --timeout_s, and every engine flag (--rules, ...)

Per model and signature, two conversions with profiling off (`convert --noprofile`), each in a fresh worker process
(one model's TF and egglog state never leaks into the next): with the engine flags (default rules), and with no rules
(freeze + Grappler clean-up + e-graph round trip + our writer, as tools/bench.py's "no rules" variant). Reported:
typed / opaque nodes of the e-graph's input, e-nodes after saturation and the stop reason, the rules that applied in
the extracted graph (report's `rules_applied`), nodes of the optimized graph vs the no-rules graph, shape-plumbing
nodes in each (tools/plumbing.py), and the tensat pass seconds. The summary gives the two percentages issue 10 asks for:
rows where some rule applies, and rows where the optimized graph has fewer nodes than the no-rules graph.

Keras 3's `serve` and `serving_default` signatures are the same function, hence serving_default only by default.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

from tensat_tf.cli import engine_flags  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plumbing import plumbing  # noqa: E402

flags.DEFINE_list("models", None, "Zoo models (default: every model of the real-exports suite, zoo.SUITE_NAMES).")
flags.DEFINE_list("signatures", ["serving_default"], "Signatures to convert (Keras' `serve` is the same function).")
flags.DEFINE_string("out_json", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                             "bench_rules.json"), "Write every number here ('' for nowhere).")
flags.DEFINE_list("from_json", None, "Only render the table of earlier runs' --out_json files (several: merged, a "
                                     "later file's result for a model replaces an earlier one's; with --out_json, "
                                     "the merge is written there).")
flags.DEFINE_integer("timeout_s", 1800, "Per model and variant: give up on a worker after this many seconds.")
flags.DEFINE_string("worker", None, "Internal: convert this one model and print its JSON row.")
flags.DEFINE_enum("worker_variant", "rules", ["rules", "norules"], "Internal: the worker's variant.")
FLAGS = flags.FLAGS

def _graph_after_cleanup(path: str, signature: str):
    """The graph TF would run for `signature` of the SavedModel at `path`: frozen and cleaned by Grappler as the
    converter's input is, so the optimized and no-rules outputs are counted the same way."""
    from tensat_tf.io import load as load_mod
    from tensat_tf.passes import canonicalize
    sig = load_mod.load(path, only=[signature]).signatures[signature]
    return canonicalize.optimize(sig.graph_def, sig.item)


def worker(name: str, variant: str) -> dict:
    """One conversion of zoo model `name` (variant 'rules': the engine flags; 'norules': no rules), profile off."""
    from tensat_tf import zoo
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    engine = engine_flags.engine_options() if variant == "rules" else EngineOptions(enable_rules=[])
    src = zoo.resolve(f"zoo:{name}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        t = time.perf_counter()
        rep = convert(src, out, Options(signatures=FLAGS.signatures, engine=engine, profile=False))
        seconds = time.perf_counter() - t
        sigs = {}
        for sig_name, s in sorted(rep["signatures"].items()):
            g = _graph_after_cleanup(out, sig_name)
            tensat = [p for p in s["passes"] if p["name"] == "tensat"][0]
            eg = s["egraph"] or {}
            sigs[sig_name] = {
                "nodes_frozen": s["nodes_before"], "nodes_out": s["nodes_after"],
                "nodes_in": tensat["nodes_before"],      # the e-graph's input: frozen + Grappler clean-up
                "nodes_out_cleaned": len(g.node), "plumbing_out": plumbing(g),
                "ops_out": dict(sorted(Counter(n.op for n in g.node).items())),
                "typed_nodes": eg.get("typed_nodes"), "opaque_nodes": eg.get("opaque_nodes"),
                "enodes": eg.get("enodes"), "stop_reason": eg.get("stop_reason"),
                "rules_applied": s["rules_applied"], "tensat_s": round(tensat["seconds"], 3),
                "tensat_ok": tensat["ok"], "tensat_error": tensat.get("error"),
                "verify_max_rel": s["verification"]["max_rel_diff"],
            }
    return {"model": name, "variant": variant, "convert_s": round(seconds, 2), "signatures": sigs}


def _run_worker(name: str, variant: str, engine_argv: list) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={name}", f"--worker_variant={variant}",
           "--signatures=" + ",".join(FLAGS.signatures)] + engine_argv
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FLAGS.timeout_s,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    except subprocess.TimeoutExpired:
        return {"model": name, "variant": variant, "error": f"timed out after {FLAGS.timeout_s} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "variant": variant, "error": f"exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])



def rows_of(results: list) -> list:
    """Pair the 'rules' and 'norules' results of each model into one row per (model, signature)."""
    by = {(r["model"], r["variant"]): r for r in results}
    rows = []
    for name in dict.fromkeys(r["model"] for r in results):
        opt, plain = by.get((name, "rules"), {}), by.get((name, "norules"), {})
        err = opt.get("error") or plain.get("error")
        sig_names = sorted(set(opt.get("signatures", {})) | set(plain.get("signatures", {}))) or ["-"]
        for sig in sig_names:
            o, p = opt.get("signatures", {}).get(sig), plain.get("signatures", {}).get(sig)
            row = {"model": name, "signature": sig, "error": err if (o is None or p is None) else None}
            if o is not None and p is not None:
                row.update({
                    "nodes_in": o["nodes_in"], "typed_nodes": o["typed_nodes"], "opaque_nodes": o["opaque_nodes"],
                    "enodes": o["enodes"], "stop_reason": o["stop_reason"], "rules_applied": o["rules_applied"],
                    "applies": bool(o["rules_applied"]), "nodes_optimized": o["nodes_out_cleaned"],
                    "nodes_norules": p["nodes_out_cleaned"],
                    "fewer_nodes": o["nodes_out_cleaned"] < p["nodes_out_cleaned"],
                    "plumbing_optimized": o["plumbing_out"], "plumbing_norules": p["plumbing_out"],
                    "tensat_s": o["tensat_s"], "tensat_s_norules": p["tensat_s"], "convert_s": opt["convert_s"],
                    "tensat_error": None if o.get("tensat_ok", True) else (o.get("tensat_error") or "failed"),
                    "verify_max_rel": o["verify_max_rel"]})
            rows.append(row)
    return rows


def summary(rows: list) -> dict:
    n = len(rows)
    applies = sum(1 for r in rows if r.get("applies"))
    fewer = sum(1 for r in rows if r.get("fewer_nodes"))
    return {"rows": n, "errors": sum(1 for r in rows if r.get("error")),
            "rules_apply": applies, "rules_apply_pct": round(100.0 * applies / n, 1) if n else 0.0,
            "fewer_nodes": fewer, "fewer_nodes_pct": round(100.0 * fewer / n, 1) if n else 0.0}


def markdown(rows: list, command: str) -> str:
    lines = [f"Command: `{command}`", "",
             "Nodes are counted after freezing and Grappler's clean-up (what TF runs). Plumbing: Shape/StridedSlice/"
             "Pack/Prod/GatherV2 on shape vectors and Reshape with a computed target.", "",
             "| model | signature | nodes in | typed / opaque | e-nodes (stop) | rules applied | nodes optimized / "
             "no-rules | plumbing optimized / no-rules | tensat s | verify rel |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['model']} | {r['signature']} | error: {r['error'][:120]} |||||||| ")
            continue
        applied = ", ".join(f"{k} x{v}" for k, v in sorted(r["rules_applied"].items())) or "-"
        if r.get("tensat_error"):      # the pass failed and the pipeline kept its input graph
            applied = "pass failed: " + r["tensat_error"].replace("|", "/")[:80]
        lines.append(
            f"| {r['model']} | {r['signature']} | {r['nodes_in']} | {r['typed_nodes']} / {r['opaque_nodes']} "
            f"| {r['enodes']} ({r['stop_reason']}) | {applied} | {r['nodes_optimized']} / {r['nodes_norules']}"
            f"{' (fewer)' if r['fewer_nodes'] else ''} | {r['plumbing_optimized']} / {r['plumbing_norules']} "
            f"| {r['tensat_s']:.1f} | {r['verify_max_rel']:.1e} |")
    s = summary(rows)
    lines += ["", f"Rules apply on {s['rules_apply']} of {s['rows']} ({s['rules_apply_pct']} %; target >= 80 %). "
                  f"Optimized graph has fewer nodes than no-rules on {s['fewer_nodes']} of {s['rows']} "
                  f"({s['fewer_nodes_pct']} %; target >= 80 %). Errors: {s['errors']}."]
    return "\n".join(lines)


def main(argv):
    if FLAGS.worker:
        print(json.dumps(worker(FLAGS.worker, FLAGS.worker_variant)))
        return
    if FLAGS.from_json:
        merged, commands = {}, []
        for path in FLAGS.from_json:
            with open(path) as f:
                data = json.load(f)
            commands.append(data["command"])
            for r in data["raw"]:
                merged.pop((r["model"], r["variant"]), None)
                merged[(r["model"], r["variant"])] = r
        from tensat_tf import zoo
        known = set(zoo.NAMES) | set(zoo.SUITE_NAMES)      # models since removed from the zoo are left out
        results = [r for r in merged.values() if r["model"] in known]
        command = " ; ".join(commands)
        print(markdown(rows_of(results), command))
        if FLAGS.out_json and len(FLAGS.from_json) > 1:
            _write_json(command, results, time.perf_counter(), complete=True)
        return
    from tensat_tf import zoo
    engine_flags.engine_options()      # bad engine flags fail here, once, not in every worker
    models = FLAGS.models or zoo.SUITE_NAMES
    for name in models:
        zoo.describe(name)             # unknown names fail before any work
    own = ("--models", "--out_json", "--from_json", "--timeout_s", "--signatures")
    # absl strips the flags from argv; the workers get the engine flags from the command line as typed
    engine_argv = [a for a in sys.argv[1:] if a.startswith("--") and not a.startswith(own)]
    command = "python tools/bench_rules.py " + " ".join(a for a in sys.argv[1:] if not a.startswith("--out_json"))
    results, t0 = [], time.perf_counter()
    for name in models:
        for variant in ("rules", "norules"):
            print(f"[{time.perf_counter() - t0:7.1f} s] {name} ({variant})", file=sys.stderr, flush=True)
            results.append(_run_worker(name, variant, engine_argv))
        _write_json(command.strip(), results, t0, complete=name == models[-1])  # a long run keeps what it has
    print(markdown(rows_of(results), command.strip()))
    print(f"\nTotal: {time.perf_counter() - t0:.0f} s.")


def _write_json(command: str, results: list, t0: float, complete: bool) -> None:
    if not FLAGS.out_json:
        return
    rows = rows_of(results)
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out_json)), exist_ok=True)
    tmp = FLAGS.out_json + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"command": command, "seconds": round(time.perf_counter() - t0, 1), "complete": complete,
                   "summary": summary(rows), "rows": rows, "raw": results}, f, indent=1, sort_keys=True)
    os.replace(tmp, FLAGS.out_json)


if __name__ == "__main__":
    app.run(main)
