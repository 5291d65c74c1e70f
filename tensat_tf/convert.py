"""The convert pipeline as a library call: load -> canonicalize -> tensat -> write (staged) -> verify -> served check
-> profile -> publish.

Verification runs on what was actually written: the staged SavedModel is loaded back and compared with the original
signatures, so a bug in the writer is caught like a bug in a rewrite. Nothing reaches output_dir unless it passed.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import hashlib
import os
import shutil
import tempfile
from collections import Counter
from typing import Callable

import tensorflow as tf

from tensat_tf import errors, interrupt, onnx_export, served_check, serving
from tensat_tf import verify as verify_mod
from tensat_tf.cost import devices
from tensat_tf.io import load as load_mod
from tensat_tf.io import save as save_mod
from tensat_tf.options import Options
from tensat_tf.passes import canonicalize, grouped_conv, pipeline, remapper_guard, shapes
from tensat_tf.passes.tensat import TensatPass
from tensat_tf.stopwatch import Stopwatch


def _ops(graph_def) -> dict[str, int]:
    return dict(sorted(Counter(n.op for n in graph_def.node).items()))


def _digest(graph_def) -> str:
    return hashlib.sha256(graph_def.SerializeToString(deterministic=True)).hexdigest()


@dataclasses.dataclass
class _Run:
    """One conversion's state, shared by the stages below: what was loaded, the graphs to write, the report being
    filled, the stopwatch and the progress callback."""
    path: str                   # the SavedModel folder (the zoo's cache folder for zoo:NAME)
    output_dir: str
    options: Options
    model: object = None        # tensat_tf/io/load.py Loaded
    graphs: dict = dataclasses.field(default_factory=dict)
    report: dict = dataclasses.field(default_factory=dict)
    watch: Stopwatch = dataclasses.field(default_factory=Stopwatch)
    stage: Callable[[str], None] = lambda text: None
    keys: dict = dataclasses.field(default_factory=dict)       # signature -> same_key(), hashed once
    baselines: dict = dataclasses.field(default_factory=dict)  # same_key() -> the noise floor's recorded baselines
    highs: dict = dataclasses.field(default_factory=dict)      # signature -> its integer inputs' bounds (verify)

    def same_key(self, name: str) -> tuple:
        """Equal for signatures that compute the same thing: the same frozen graph, inputs and outputs (Keras 3's
        `model.export` writes `serve` and `serving_default` as one function). Hashing VGG16's frozen graph (its
        weights are constants in it) takes 0.4 s, so once per signature."""
        if name not in self.keys:
            sig = self.model.signatures[name]
            # without debug info: Keras' transformer exports trace the two signatures apart and differ only there
            self.keys[name] = (_digest(load_mod.without_debug_info(sig.graph_def)), repr(sig.inputs),
                               repr(sig.outputs))
        return self.keys[name]


def _record_baselines(run: _Run) -> None:
    """The noise floor's baselines of every distinct graph (verify.baselines), run on verification's inputs now and
    kept as outputs. Each feeds the weights, which save writes as variables, as one array (VGG16 at 64x64: TF's frozen
    function and a twin holding them as constants took 1.3 GB to build and 1.7 GB more on their first calls)."""
    model, options = run.model, run.options
    for name, sig in sorted(model.signatures.items()):
        key = run.same_key(name)
        if key in run.baselines:
            continue
        feeds = [f for _, f in verify_mod.verification_inputs(sig.inputs, options.verify_batch_sizes, options.seed,
                                                              options.engine.unknown_dim, run.highs.get(name))]
        try:
            run.baselines[key] = verify_mod.baselines(sig.graph_def, sig.inputs, sig.outputs, feeds,
                                                      options.engine.min_variable_elements)
        except (ValueError, tf.errors.OpError) as e:
            # the original ran on these inputs (check_original): its frozen graph does not, so it cannot be converted
            raise errors.UnsupportedSignature(f"signature '{name}': TF cannot run its frozen graph: "
                                              f"{errors.first_line(e)}") from None
        gc.collect()


def _write_and_verify(run: _Run, staged: str) -> None:
    """Write the SavedModel into `staged`, load it back and verify it against the original signatures."""
    model, options, report = run.model, run.options, run.report
    variables = save_mod.write_saved_model(staged, model.signatures, run.graphs, run.path,
                                           options.engine.min_variable_elements)
    report["weights"] = {"variables": variables, "min_variable_elements": options.engine.min_variable_elements}
    run.watch.lap("save")
    reloaded = tf.saved_model.load(staged)
    pairs = [(name, sig.inputs, sig.outputs, sig.function, reloaded.signatures[name],
              run.baselines[run.same_key(name)]) for name, sig in sorted(model.signatures.items())]
    precision = {name: verify_mod.precision_rtol(sig.graph_def) for name, sig in model.signatures.items()}
    result = verify_mod.verify(pairs, options.verify_batch_sizes, options.seed, options.rtol,
                               unknown_dim=options.engine.unknown_dim, precision=precision, highs=run.highs)
    run.watch.lap("verify")
    for name in report["signatures"]:
        mine = {k: v for k, v in result.per_output.items() if k.startswith(name + "/")}
        report["signatures"][name]["verification"] = {
            "max_abs_diff": max((v["max_abs_diff"] for v in mine.values()), default=0.0),
            "max_rel_diff": max((v["max_rel_diff"] for v in mine.values()), default=0.0),
            "passed": all(v["passed"] for v in mine.values()),
            "noise_floor": max((v["noise_floor"] for v in mine.values()), default=0.0),
            "per_output": mine,
        }
        if run.highs.get(name):     # integer inputs drawn over the tables they index (tensat_tf/index_range.py)
            report["signatures"][name]["verification"]["index_bounds"] = dict(sorted(run.highs[name].items()))
    report["verification"] = {"max_abs_diff": result.max_abs_diff, "max_rel_diff": result.max_rel_diff,
                              "passed": result.passed, "batch_sizes": list(result.batch_sizes),
                              "unknown_dim": options.engine.unknown_dim}
    if not result.passed:
        bad = sorted(k for k, v in result.per_output.items() if not v["passed"])
        raise errors.VerificationFailed(
            f"verification failed for {', '.join(bad)} (max relative difference {result.max_rel_diff:.3g}); "
            f"nothing was written")


def profile_batch_sizes(options: Options) -> list[int]:
    if options.profile_batch_sizes:
        return sorted(set(int(b) for b in options.profile_batch_sizes))
    return sorted({1, *(int(b) for b in options.verify_batch_sizes)})


def _profile(run: _Run, staged: str) -> list[str]:
    """Time original vs optimized per signature in every setting (batch sizes x thread settings, clean worker
    processes, tensat_tf/latency.py decide); -> the signatures to publish as the original graph: those not measured
    faster ("faster" in at least one setting, "slower" in none, tensat_tf/speedup.py keep). Those the served check
    already sent back are written so and not measured."""
    from tensat_tf import latency
    model, options, report = run.model, run.options, run.report
    kept, seen = [], {}
    for name in sorted(model.signatures):
        entry = report["signatures"][name]
        if _published(entry) == "original":      # the served check's decision: nothing to measure
            continue
        if entry["nodes_before"] == entry["nodes_after"] and entry["ops_before"] == entry["ops_after"]:
            entry["profile"] = {"skipped": "graph unchanged", "kept_original": True, "published": "original",
                                "reason": "the rewrites left the node and op counts as they were: nothing to gain"}
            kept.append(name)
            continue
        # signatures with the same original graph (Keras' serve and serving_default) were optimized once (convert),
        # so they have the same optimized graph too: one measurement and so one decision
        key = run.same_key(name)
        if key in seen:
            entry["profile"] = dict(report["signatures"][seen[key]]["profile"], same_as=seen[key])
        else:
            seen[key] = name
            try:
                r = latency.decide([run.path, staged], name, profile_batch_sizes(options), options.profile_threads,
                                       margin=options.profile_margin, seconds=options.profile_seconds,
                                       unknown_dim=options.engine.unknown_dim)
                keep = r.pop("keep")
                ratios = [s["decision"]["ratio"] for s in r["settings"] if s["decision"]["ratio"] is not None]
                # speedup: the smallest median ratio over the settings (tensat_tf/batch.py reads it)
                entry["profile"] = dict(r, speedup=min(ratios) if ratios else None, faster=keep, kept_original=not keep,
                                        published="optimized" if keep else "original")
            except latency.ProfileError as e:
                entry["profile"] = {"error": str(e), "kept_original": True, "published": "original",
                                    "reason": "profiling failed"}
        if entry["profile"]["kept_original"]:
            kept.append(name)
    return kept


def _served_check(run: _Run, staged: str) -> list[str]:
    """Serve every written graph once in a fresh process (tensat_tf/served_check.py); -> the signatures to publish
    as the original graph: those whose call made a Grappler optimizer fail where the original graph, written the
    same way and served the same way, does not. Where the check itself cannot finish, every signature (as a failed
    profile does).

    TF logs one such failure a minute per process (meta_optimizer.cc's LOG_EVERY_N_SEC), so each distinct graph is
    served in a process of its own, signatures that share one (Keras' serve and serving_default) take its outcome,
    and only "a failure or none" is compared: the first failure of a call hides any later one."""
    model, options, report = run.model, run.options, run.report
    groups: dict = {}
    for name in sorted(model.signatures):
        groups.setdefault(run.same_key(name), []).append(name)
    check = functools.partial(served_check.failures, unknown_dim=options.engine.unknown_dim, seed=options.seed,
                              highs=run.highs, batch_size=int(options.verify_batch_sizes[0]))

    def served(path: str, name: str) -> list[dict]:
        return check(path, {name: model.signatures[name].inputs})[name]

    try:
        ours = {names[0]: served(staged, names[0]) for names in groups.values()}
        failing = [names for names in groups.values() if ours[names[0]]]
        theirs = {}
        if failing:
            # the fallback as it would be published, written aside and served the same way
            graphs = dict(run.graphs, **{n: original_graph(model.signatures[n]) for names in failing for n in names})
            with tempfile.TemporaryDirectory(prefix="tensat_tf_served_check_") as aside:
                save_mod.write_saved_model(aside, model.signatures, graphs, run.path,
                                           options.engine.min_variable_elements)
                theirs = {names[0]: served(aside, names[0]) for names in failing}
    except served_check.CheckError as e:
        for name in model.signatures:
            report["signatures"][name]["served_check"] = {"error": str(e), "published": "original",
                                                          "reason": "the served check did not finish"}
        return sorted(model.signatures)
    fallback = []
    for names in groups.values():
        failed = ours[names[0]]
        entry = {"failures": failed, "published": "optimized"}
        if failed:
            entry["original_failures"] = theirs[names[0]]
            if theirs[names[0]]:
                entry["reason"] = "the original graph's served call fails too: no better"
            else:
                entry.update(published="original", reason=f"TF's {failed[0]['optimizer']} failed on the optimized "
                                                          f"graph when served and not on the original")
                fallback.extend(names)
        for name in names:
            report["signatures"][name]["served_check"] = copy.deepcopy(entry)
    return fallback


def _published(entry: dict) -> str:
    """Which graph of a signature is published: 'original' where the served check or the profile decided so."""
    for stage in ("served_check", "profile"):
        if (entry.get(stage) or {}).get("published") == "original":
            return "original"
    return "optimized"


def _publish_original(run: _Run, staged: str, names: list[str]) -> None:
    """Write the user's graph (the original signature frozen, before any clean-up) for `names` instead of the
    optimized one, through the same writer and verification, into the emptied staging folder."""
    for name in names:
        run.graphs[name] = original_graph(run.model.signatures[name])
        run.report["signatures"][name]["nodes_after"] = len(run.graphs[name].node)
        run.report["signatures"][name]["ops_after"] = _ops(run.graphs[name])
    for entry in os.listdir(staged):
        p = os.path.join(staged, entry)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    _write_and_verify(run, staged)


def original_graph(sig):
    """The signature's frozen graph as loaded, its library functions renamed `<name>_original_<uid>`: the optimized
    graph (written and loaded back earlier in this process) carries Grappler-rewritten functions under the same
    names, and TF refuses a second, different function of one name (zoo:lstm's While body). The writer's own
    renaming (tensat_tf/io/save.py) keeps the tag, so the published names stay deterministic."""
    return save_mod.rename_functions(sig.graph_def, "original")


def _deploy_extras(run: _Run, staged: str):
    """Warm-up records (into the staged folder) and the ONNX file (a temporary file beside it), both checked;
    -> the pending ONNX file to commit after publishing, or None."""
    model, options, report, graphs = run.model, run.options, run.report, run.graphs
    tolerances = serving.tolerances(report)
    if options.warmup:
        run.stage("writing warm-up records and replaying them through the TF1 loader")
        report["warmup"] = serving.write_warmup(staged, model, options.verify_batch_sizes, options.seed,
                                                options.warmup_name(run.output_dir), tolerances, options.tags,
                                                options.engine.unknown_dim, run.highs)
        run.watch.lap("warmup")
    if not options.emit_onnx:
        return None
    run.stage("exporting ONNX and checking it with onnxruntime")
    name = onnx_export.pick_signature(list(graphs), options.onnx_signature)
    profile = None if not options.profile else {
        "batch_sizes": profile_batch_sizes(options), "threads": list(options.profile_threads),
        "seconds": options.profile_seconds, "margin": options.profile_margin}
    pending, report["onnx"] = onnx_export.emit(run.output_dir, staged, model, graphs, options.verify_batch_sizes,
                                               options.seed, options.onnx_signature, tolerances, profile,
                                               original_published=_published(report["signatures"][name]) == "original",
                                               unknown_dim=options.engine.unknown_dim, highs=run.highs)
    run.watch.lap("onnx")
    return pending


def convert(src: str, output_dir: str, options: Options = Options()) -> dict:
    """Convert the SavedModel at `src` (or `zoo:NAME`) into `output_dir`; returns the JSON report (a dict)."""
    run = _Run(path=src, output_dir=output_dir, options=options, stage=options.progress or (lambda text: None))
    watch, stage = run.watch, run.stage
    stage("loading " + src)
    if src.startswith("zoo:"):
        from tensat_tf import zoo
        try:
            run.path = zoo.resolve(src)
        except zoo.UnknownModel as e:
            raise errors.UnknownName(str(e)) from None
        watch.lap("zoo_build")
    save_mod.check_output_dir(output_dir, options.overwrite)
    if options.emit_onnx:
        onnx_export.check_target(output_dir, options.overwrite)
    model = run.model = load_mod.load(run.path, tags=options.tags, only=options.signatures,
                                      allow_ops=options.allow_ops)
    run.highs = verify_mod.check_original(model, options.verify_batch_sizes,    # before the work: OriginalFails
                                          options.seed, options.engine.unknown_dim)
    if options.emit_onnx:
        onnx_export.pick_signature(list(model.signatures), options.onnx_signature)    # fail before the work
    watch.lap("load_freeze")
    stage("running the noise floor's baselines (the frozen graph, its rounding twin)")
    _record_baselines(run)
    watch.lap("baselines")
    interrupt.check()

    report = run.report = {"source": src, "output_dir": output_dir, "signatures": {},
                           "skipped_signatures": model.skipped}
    optimized = {}          # same_key -> the signature optimized first with that graph
    grouped = grouped_conv.Pass(native_groups=devices.device_named(options.engine.device).grouped_conv)
    for i, (name, sig) in enumerate(sorted(model.signatures.items())):
        if (first := optimized.get(run.same_key(name))) is not None:
            # the same graph, inputs and outputs as a signature already optimized: its result, not a second search
            # (which, with a time-limited extraction, could even differ)
            run.graphs[name] = run.graphs[first]
            report["signatures"][name] = dict(copy.deepcopy(report["signatures"][first]), same_as=first)
            continue
        optimized[run.same_key(name)] = name
        stage(f"optimizing signature {name} ({i + 1}/{len(model.signatures)}): canonicalize, saturate, extract")
        tensat_pass = TensatPass(options.engine, progress=lambda text, name=name: stage(f"signature {name}: {text}"),
                                 remapper_guard=options.remapper_guard)
        passes = (([canonicalize] if options.canonicalize else []) + ([grouped] if options.grouped_conv else [])
                  + ([shapes] if options.fold_shapes else []) + [tensat_pass]
                  + ([remapper_guard] if options.remapper_guard else []))
        out, results = pipeline.run(sig.graph_def, sig.item, passes)
        for r in results:
            watch.add(r.name, r.seconds)
            if options.strict and not r.ok:
                # the pass's reason may run to many lines (an egglog panic, a TF error); the CLI prints one
                raise errors.InternalError(f"signature '{name}': pass {r.name} failed (--strict): "
                                           f"{r.error.strip().splitlines()[0][:300]}")
        interrupt.check()
        run.graphs[name] = out
        stats = tensat_pass.stats
        report["signatures"][name] = {
            "inputs": {s.key: {"dtype": s.dtype.name, "shape": s.shape} for s in sig.inputs},
            "outputs": {s.key: {"dtype": s.dtype.name, "shape": s.shape} for s in sig.outputs},
            "frozen_digest": run.same_key(name)[0],     # what was converted (tools/golden.py compares inputs by it)
            "nodes_before": len(sig.graph_def.node),
            "nodes_after": len(out.node),
            "ops_before": _ops(sig.graph_def),
            "ops_after": _ops(out),
            "passes": [dataclasses.asdict(r) for r in results],
            **(stats.to_json() if stats is not None else {"egraph": None, "extraction": None, "rules_applied": {}}),
        }
    watch.skip()         # the passes' own seconds are counted above

    with save_mod.staging_dir(output_dir) as staged:
        stage("saving and verifying")
        _write_and_verify(run, staged)
        if options.served_check:
            stage("serving each signature once in a fresh process (TF's error log on)")
            fallback = _served_check(run, staged)
            watch.lap("served_check")
            if fallback:
                _publish_original(run, staged, fallback)
        if options.profile:
            stage("profiling original vs optimized")
            kept = _profile(run, staged)
            watch.lap("profile")
            if kept:    # the optimized graph of these signatures is not measured faster: publish the user's graph
                _publish_original(run, staged, kept)
        interrupt.check()
        pending = _deploy_extras(run, staged)
        try:
            stage("publishing " + output_dir)
            serving.normal_permissions(staged)
            save_mod.publish(staged, output_dir, options.overwrite)
            if pending is not None:
                pending.commit()
        finally:
            if pending is not None:
                pending.discard()
        watch.lap("publish")
    report["timing_s"] = dict(watch.seconds, total=watch.total())
    return report
