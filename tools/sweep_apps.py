"""Every keras.applications model through `convert`, as a user would bring it: does it convert and verify, what does the
e-graph do with it, and how long does it take. The real-exports suite (tensat_tf/zoo/keras_apps.py) has twelve of
them; this sweep is for the rest (the bigger variants of each family and the families the suite leaves to the older
zoo builders), which tests do not build.

    python tools/sweep_apps.py [--apps=VGG16,ResNet101] [--skip=ConvNeXtXLarge] [--side=64] [--out_json=sweep.json]
    python tools/sweep_apps.py --transformers=gpt:256x8x1024x4,real_encoder:768x12x3072x4 --seq=32 [--gain]

Each application is built by keras.applications (weights=None, include_top, at --side pixels or the smallest side it
accepts), its weights randomized and its batch norms calibrated (tensat_tf/zoo/_keras.py, as for the suite), exported
with `model.export` (dynamic batch), then converted with the default options (verification included). Each runs in
its own worker processes (one builds, one converts, each within --timeout seconds): one that crashes or runs out of
memory is a row, not the end of the sweep; the row has the conversion's peak resident memory.

The predicted gain is the cost model's, as tools/bench.py reports it (analytic.reported_gain: a call's fixed cost and
the opaque ops' estimated work count on both sides).

With --gain the worker also converts the model with no rules (both conversions then run without --profile, as
`tools/bench.py --noconvert_profile` does) and measures the e-graph's own gain, no-rules latency over the default
output's: TF, batch 1, one intra-op and one inter-op thread (--threads=0: TF's default threads, as TF Serving runs
it), --blocks paired blocks in both load orders (tensat_tf.latency.measure), the median of per-block ratios and its
interval (tensat_tf.speedup.compare). That is the suite's measurement (tools/bench.py) on models the suite does not
have.

--transformers are the suite's Keras-layer transformers (tensat_tf/zoo/transformers.py: real_encoder, real_decoder,
real_vit), `gpt` (a GPT-2-style decoder the suite does not have) and `seq2seq` (an encoder-decoder: source and target
token ids, cross-attention), each as FAMILY:DxHEADSxFFNxLAYERS (vocabulary
--vocab), exported with a dynamic batch and sequence like the suite's; they are converted, and timed, with every
unknown dim but the batch --seq long (`--unknown_dim`, as a user serving that length would convert). Without --apps,
only they run.

--saved_models are SavedModel folders someone already exported (their own Keras models): converted and measured the
same way, not built (and never modified: convert reads its input only). With neither --apps nor --transformers, only
they run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

# the smallest input side keras.applications accepts for these (weights=None); every other application takes 32
MIN_SIDE = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}
SEED = 2101

flags.DEFINE_list("apps", None, "keras.applications constructors (default: every one this Keras has).")
flags.DEFINE_list("skip", [], "Constructors to leave out.")
flags.DEFINE_integer("side", 64, "Input height and width (raised to an application's minimum).")
flags.DEFINE_integer("timeout", 1800, "Seconds per application (build, export and convert).")
flags.DEFINE_string("out_json", None, "Also write the rows here (after every application).")
flags.DEFINE_bool("gain", False, "Also measure the e-graph's own gain (no-rules latency / default output's latency).")
flags.DEFINE_enum("threads", "1", ["1", "0"], "With --gain: 1 (one intra-op and one inter-op thread) or 0 (TF's "
                  "default threads).")
flags.DEFINE_integer("blocks", 12, "With --gain: timing blocks (paired: both outputs run in every block).")
flags.DEFINE_list("transformers", [], "FAMILY:DxHEADSxFFNxLAYERS entries (tensat_tf/zoo/transformers.py BUILDERS).")
flags.DEFINE_integer("seq", None, "Unknown dims but the batch (a sequence) at conversion and timing (default: the "
                     "engine's --unknown_dim default).")
flags.DEFINE_integer("vocab", 1024, "Vocabulary of --transformers.")
flags.DEFINE_list("saved_models", [], "SavedModel folders already exported, converted and measured as the others.")
flags.DEFINE_string("build", None, "Internal: build and export this application into --src.")
flags.DEFINE_string("src", None, "Internal: where --build exports.")
flags.DEFINE_string("worker", None, "Internal: convert this exported SavedModel, print its row as JSON.")
FLAGS = flags.FLAGS


def applications() -> list[str]:
    import keras
    return sorted(n for n in dir(keras.applications) if n[:1].isupper() and callable(getattr(keras.applications, n)))


def transformer_size(entry: str):
    """FAMILY:DxHEADSxFFNxLAYERS -> (family, transformers.Size); ValueError when malformed."""
    from tensat_tf.zoo import transformers
    family, _, dims = entry.partition(":")
    if family not in transformers.BUILDERS:
        raise ValueError(f"{entry}: the family is one of {sorted(transformers.BUILDERS)}")
    try:
        d, heads, ffn, layers = (int(v) for v in dims.split("x"))
    except ValueError:
        raise ValueError(f"{entry}: sizes are DxHEADSxFFNxLAYERS, e.g. gpt:256x8x1024x4") from None
    return family, transformers.Size(FLAGS.vocab, d, heads, ffn, layers)


def build(name: str, side: int, export_dir: str) -> None:
    """Build, randomize and export one application or transformer (its own process: the Keras model is not in the
    converting one)."""
    if ":" in name:
        from tensat_tf.zoo import transformers
        family, size = transformer_size(name)
        transformers.build(family, export_dir, size)
        return
    import keras

    from tensat_tf.zoo import _keras
    _keras.export_application(getattr(keras.applications, name), (side, side, 3), SEED, export_dir)


def worker(src: str) -> dict:
    """Convert one exported application as `tensat_tf convert` would; its part of the row."""
    import resource

    from tensat_tf.convert import convert
    from tensat_tf.cost import analytic
    from tensat_tf.options import Options
    with tempfile.TemporaryDirectory() as d:
        out, plain = os.path.join(d, "out"), os.path.join(d, "plain")
        t = time.perf_counter()
        rep = convert(src, out, Options(profile=not FLAGS.gain, engine=_engine()))
        row = {"convert_s": round(time.perf_counter() - t, 1),
               # Linux reports kilobytes: the conversion's peak resident memory (before --gain's work)
               "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
        if FLAGS.gain:
            row["gain"] = _gain(src, out, plain)
    row["weights"] = rep.get("weights", {}).get("variables")
    s = rep["signatures"]["serving_default"]
    eg, ex = s["egraph"], s["extraction"]
    row.update(typed_nodes=eg["typed_nodes"], enodes=eg["enodes"], iterations=eg["iterations"],
               stop=eg["stop_reason"], pass_s=round(sum(eg["timing_s"].values()), 2),
               extraction=ex.get("status"), predicted=_rounded(analytic.reported_gain([ex])),
               rules=sum(s["rules_applied"].values()), max_rel_diff=s["verification"]["max_rel_diff"],
               signatures=len(rep["signatures"]),
               stages={k: round(v, 1) for k, v in rep["timing_s"].items() if v >= 1.0})
    return row


def _engine(**changes):
    """The engine options of the sweep's conversions: the defaults, with --seq as the unknown dims' length."""
    from tensat_tf.options import EngineOptions
    return EngineOptions(**({"unknown_dim": FLAGS.seq} if FLAGS.seq else {}), **changes)


def _rounded(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


def _gain(src: str, out: str, plain: str) -> dict:
    """The e-graph's own gain on serving_default: `out` (the default rules) against `plain` (no rules), both from
    `src`, paired in one worker per load order."""
    from tensat_tf import latency, speedup
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    engine = _engine(enable_rules=[])
    convert(src, plain, Options(profile=False, engine=engine))
    m = latency.measure([plain, out], "serving_default", batch_size=1, blocks=FLAGS.blocks,
                        unknown_dim=engine.unknown_dim, threads=int(FLAGS.threads))
    (p, o) = m["tf"]
    d = speedup.compare(p["block_medians"], o["block_medians"])
    return {"no_rules_ms": round(p["ms"], 3), "optimized_ms": round(o["ms"], 3), "ratio": round(d.ratio, 3),
            "low": round(d.low, 3), "high": round(d.high, 3), "verdict": d.verdict}


def _child(args: list[str], timeout: int) -> tuple[Optional[dict], Optional[str]]:
    """Run this script with `args`; (its JSON line, None) or (None, why it failed)."""
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode == 0 and lines:
        return json.loads(lines[-1]), None
    tail = (p.stderr.strip().splitlines() or [""])[-1]
    return None, ("killed (out of memory?)" if p.returncode == -9 else f"exit {p.returncode}") + f": {tail[:300]}"


def run_one(name: str, side: int, timeout: int, exported: Optional[str] = None) -> dict:
    """Build `name` (unless `exported` is its SavedModel folder), convert it in a child process: its row."""
    row = {"app": name, "side": side}
    with tempfile.TemporaryDirectory() as d:
        src = exported or os.path.join(d, "src")
        t = time.perf_counter()
        if exported is None:
            _, err = _child([f"--build={name}", f"--side={side}", f"--src={src}", f"--vocab={FLAGS.vocab}"], timeout)
            if err:
                return dict(row, build_s=round(time.perf_counter() - t, 1), error="build: " + err)
        row["build_s"] = round(time.perf_counter() - t, 1)
        gain = ["--gain", f"--blocks={FLAGS.blocks}", f"--threads={FLAGS.threads}"] if FLAGS.gain else []
        got, err = _child([f"--worker={src}"] + ([f"--seq={FLAGS.seq}"] if FLAGS.seq else []) + gain, timeout)
    return dict(row, error="convert: " + err) if err else dict(row, **got)


def _measured(r: dict) -> str:
    g = r.get("gain")
    return (f"{g['ratio']:.3f}x [{g['low']:.3f}, {g['high']:.3f}] "
            f"({g['no_rules_ms']:.3f} -> {g['optimized_ms']:.3f} ms)" if g else "")


def markdown(rows: list) -> str:
    gain = any("gain" in r for r in rows)
    out = ["| model | side / seq | weights | typed nodes | e-nodes | iterations (stop) | tensat pass s "
           "| extraction | predicted gain | " + ("measured gain | " if gain else "") + "rules applied | verify max rel "
           "| build s | convert s | peak GB |",
           "|" + "---|" * (14 + gain)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['app']} | {r['side']} | **failed**: {r['error']} |" + " |" * (11 + gain))
            continue
        out.append(f"| {r['app']} | {r['side']} | {r['weights']} | {r['typed_nodes']} | {r['enodes']} | "
                   f"{r['iterations']} ({r['stop']}) | {r['pass_s']} | {r['extraction']} | {r['predicted']}x | "
                   + (f"{_measured(r)} | " if gain else "") +
                   f"{r['rules']} | {r['max_rel_diff']:.1e} | {r['build_s']} | {r['convert_s']} | {r['peak_gb']} |")
    return "\n".join(out)


def main(argv):
    if FLAGS.build:
        build(FLAGS.build, FLAGS.side, FLAGS.src)
        print("{}")
        return
    if FLAGS.worker:
        print(json.dumps(worker(FLAGS.worker)))
        return
    for entry in FLAGS.transformers:
        try:
            transformer_size(entry)
        except ValueError as e:
            raise app.UsageError(str(e))
    for path in FLAGS.saved_models:
        if not os.path.isfile(os.path.join(path, "saved_model.pb")):
            raise app.UsageError(f"--saved_models: {path} is not a SavedModel folder")
    apps = FLAGS.apps if FLAGS.apps is not None else [] if FLAGS.transformers or FLAGS.saved_models else applications()
    names = [n for n in apps + FLAGS.transformers if n not in set(FLAGS.skip)]
    exported = {os.path.basename(os.path.normpath(p)): p for p in FLAGS.saved_models}
    if len(exported) < len(FLAGS.saved_models):
        raise app.UsageError("--saved_models: two folders of one name (each row is named after its folder)")
    rows, t0 = [], time.perf_counter()
    for name in names + list(exported):
        print(f"[{time.perf_counter() - t0:7.1f} s] {name}", file=sys.stderr, flush=True)
        side = _engine().unknown_dim if ":" in name or name in exported else max(FLAGS.side, MIN_SIDE.get(name, 32))
        rows.append(run_one(name, side, FLAGS.timeout, exported.get(name)))
        if FLAGS.out_json:
            with open(FLAGS.out_json, "w") as f:
                json.dump(rows, f, indent=1)
    ok = sum("error" not in r for r in rows)
    print(markdown(rows))
    threads = f"; gain at {'TF default' if FLAGS.threads == '0' else 'one'} thread(s)" if FLAGS.gain else ""
    print(f"\n{ok} of {len(rows)} converted and verified; {time.perf_counter() - t0:.0f} s{threads}.")


if __name__ == "__main__":
    app.run(main)
