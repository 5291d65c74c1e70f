"""The convert pipeline as a library call: load -> canonicalize -> tensat -> write (staged) -> verify -> publish.

Verification runs on what was actually written: the staged SavedModel is loaded back and compared with the original
signatures, so a bug in the writer is caught like a bug in a rewrite. Nothing reaches output_dir unless it passed.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections import Counter

import tensorflow as tf

from tensat_tf import errors, onnx_export, serving
from tensat_tf import verify as verify_mod
from tensat_tf.io import load as load_mod
from tensat_tf.io import save as save_mod
from tensat_tf.options import Options
from tensat_tf.passes import canonicalize, pipeline, shapes
from tensat_tf.passes.tensat import TensatPass


def _ops(graph_def) -> dict[str, int]:
    return dict(sorted(Counter(n.op for n in graph_def.node).items()))


def _write_and_verify(staged, model, graphs, path, options, report, lap, t):
    """Write the SavedModel into `staged`, load it back and verify it against the original signatures."""
    save_mod.write_saved_model(staged, model.signatures, graphs, path, options.min_variable_elements)
    t = lap("save", t)
    reloaded = tf.saved_model.load(staged)
    pairs = [(name, sig.inputs, sig.outputs, sig.function, reloaded.signatures[name],
              (sig.call_frozen, verify_mod.rounding_twin(sig.graph_def, sig.inputs, sig.outputs)))
             for name, sig in sorted(model.signatures.items())]
    result = verify_mod.verify(pairs, options.verify_batch_sizes, options.seed, options.rtol)
    t = lap("verify", t)
    for name in report["signatures"]:
        mine = {k: v for k, v in result.per_output.items() if k.startswith(name + "/")}
        report["signatures"][name]["verification"] = {
            "max_abs_diff": max((v["max_abs_diff"] for v in mine.values()), default=0.0),
            "max_rel_diff": max((v["max_rel_diff"] for v in mine.values()), default=0.0),
            "passed": all(v["passed"] for v in mine.values()),
            "noise_floor": max((v["noise_floor"] for v in mine.values()), default=0.0),
            "per_output": mine,
        }
    report["verification"] = {"max_abs_diff": result.max_abs_diff, "max_rel_diff": result.max_rel_diff,
                              "passed": result.passed, "batch_sizes": list(result.batch_sizes)}
    if not result.passed:
        bad = sorted(k for k, v in result.per_output.items() if not v["passed"])
        raise errors.VerificationFailed(
            f"verification failed for {', '.join(bad)} (max relative difference {result.max_rel_diff:.3g}); "
            f"nothing was written")
    return t


def profile_batch_sizes(options: Options) -> list[int]:
    if options.profile_batch_sizes:
        return sorted(set(int(b) for b in options.profile_batch_sizes))
    return sorted({1, *(int(b) for b in options.verify_batch_sizes)})


def _profile(source: str, staged: str, model, graphs: dict, options: Options, report: dict) -> list[str]:
    """Time original vs optimized per signature in every setting (batch sizes x thread settings, clean worker
    processes, tensat_tf/profile.py decide); -> the signatures to publish as the original graph: those not measured
    faster ("faster" in at least one setting, "slower" in none, tensat_tf/speedup.py keep)."""
    import hashlib

    from tensat_tf import profile as profile_mod
    kept, seen = [], {}
    for name in sorted(model.signatures):
        entry, sig = report["signatures"][name], model.signatures[name]
        if entry["nodes_before"] == entry["nodes_after"] and entry["ops_before"] == entry["ops_after"]:
            entry["profile"] = {"skipped": "graph unchanged", "kept_original": True, "published": "original",
                                "reason": "the rewrites left the node and op counts as they were: nothing to gain"}
            kept.append(name)
            continue
        # signatures with the same original and the same optimized graph (Keras' serve and serving_default) get one
        # measurement and so one decision
        key = tuple(hashlib.sha256(g.SerializeToString(deterministic=True)).hexdigest()
                    for g in (sig.graph_def, graphs[name])) + (repr(sig.inputs), repr(sig.outputs))
        if key in seen:
            entry["profile"] = dict(report["signatures"][seen[key]]["profile"], same_as=seen[key])
        else:
            seen[key] = name
            try:
                r = profile_mod.decide([source, staged], name, profile_batch_sizes(options), options.profile_threads,
                                       margin=options.profile_margin, seconds=options.profile_seconds)
                keep = r.pop("keep")
                ratios = [s["decision"]["ratio"] for s in r["settings"] if s["decision"]["ratio"] is not None]
                # speedup: the smallest median ratio over the settings (tensat_tf/batch.py reads it)
                entry["profile"] = dict(r, speedup=min(ratios) if ratios else None, faster=keep, kept_original=not keep,
                                        published="optimized" if keep else "original")
            except profile_mod.ProfileError as e:
                entry["profile"] = {"error": str(e), "kept_original": True, "published": "original",
                                    "reason": "profiling failed"}
        if entry["profile"]["kept_original"]:
            kept.append(name)
    return kept


def original_graph(sig):
    """The signature's frozen graph as loaded, its library functions renamed `<name>_original_<uid>`: the optimized
    graph (written and loaded back earlier in this process) carries Grappler-rewritten functions under the same
    names, and TF refuses a second, different function of one name (zoo:lstm's While body). The writer's own
    renaming (tensat_tf/io/save.py) keeps the tag, so the published names stay deterministic."""
    return save_mod.rename_functions(sig.graph_def, "original")


def _deploy_extras(staged, output_dir, model, graphs, options: Options, report: dict, stage, lap, t):
    """Warm-up records (into the staged folder) and the ONNX file (a temporary file beside it), both checked;
    -> (the pending ONNX file to commit after publishing, or None; t)."""
    tolerances = serving.tolerances(report)
    if options.warmup:
        stage("writing warm-up records and replaying them through the TF1 loader")
        report["warmup"] = serving.write_warmup(staged, model, options.verify_batch_sizes, options.seed,
                                                options.warmup_name(output_dir), tolerances, options.tags)
        t = lap("warmup", t)
    if not options.emit_onnx:
        return None, t
    stage("exporting ONNX and checking it with onnxruntime")
    name = onnx_export.pick_signature(list(graphs), options.onnx_signature)
    profile = None if not options.profile else {
        "batch_sizes": profile_batch_sizes(options), "threads": list(options.profile_threads),
        "seconds": options.profile_seconds, "margin": options.profile_margin}
    published = (report["signatures"][name].get("profile") or {}).get("published")
    pending, report["onnx"] = onnx_export.emit(output_dir, staged, model, graphs, options.verify_batch_sizes,
                                               options.seed, options.onnx_signature, tolerances, profile,
                                               original_published=published == "original")
    return pending, lap("onnx", t)


def convert(src: str, output_dir: str, options: Options = Options()) -> dict:
    """Convert the SavedModel at `src` (or `zoo:NAME`) into `output_dir`; returns the JSON report (a dict)."""
    t_start = time.perf_counter()
    timing: dict[str, float] = {}

    def lap(stage: str, t0: float) -> float:
        now = time.perf_counter()
        timing[stage] = round(timing.get(stage, 0.0) + now - t0, 4)
        return now

    stage = options.progress or (lambda text: None)
    t = time.perf_counter()
    stage("loading " + src)
    if src.startswith("zoo:"):
        from tensat_tf import zoo
        try:
            path = zoo.resolve(src)
        except zoo.UnknownModel as e:
            raise errors.UnknownName(str(e)) from None
        t = lap("zoo_build", t)
    else:
        path = src
    save_mod.check_output_dir(output_dir, options.overwrite)
    if options.emit_onnx:
        onnx_export.check_target(output_dir, options.overwrite)
    model = load_mod.load(path, tags=options.tags, only=options.signatures, allow_ops=options.allow_ops)
    verify_mod.check_original(model, options.verify_batch_sizes, options.seed)    # before the work: OriginalFails
    if options.emit_onnx:
        onnx_export.pick_signature(list(model.signatures), options.onnx_signature)    # fail before the work
    t = lap("load_freeze", t)

    report = {"source": src, "output_dir": output_dir, "signatures": {}, "skipped_signatures": model.skipped}
    graphs = {}
    for i, (name, sig) in enumerate(sorted(model.signatures.items())):
        stage(f"optimizing signature {name} ({i + 1}/{len(model.signatures)}): canonicalize, saturate, extract")
        tensat_pass = TensatPass(options.engine, progress=lambda text, name=name: stage(f"signature {name}: {text}"))
        passes = (([canonicalize] if options.canonicalize else []) + ([shapes] if options.fold_shapes else [])
                  + [tensat_pass])
        out, results = pipeline.run(sig.graph_def, sig.item, passes)
        for r in results:
            timing[r.name] = round(timing.get(r.name, 0.0) + r.seconds, 4)
        graphs[name] = out
        stats = tensat_pass.stats
        report["signatures"][name] = {
            "inputs": {s.key: {"dtype": s.dtype.name, "shape": s.shape} for s in sig.inputs},
            "outputs": {s.key: {"dtype": s.dtype.name, "shape": s.shape} for s in sig.outputs},
            "nodes_before": len(sig.graph_def.node),
            "nodes_after": len(out.node),
            "ops_before": _ops(sig.graph_def),
            "ops_after": _ops(out),
            "passes": [dataclasses.asdict(r) for r in results],
            "egraph": None if stats is None else {
                "enodes": stats.enodes, "eclasses": stats.eclasses, "iterations": stats.iterations,
                "stop_reason": stats.stop_reason, "typed_nodes": stats.typed_nodes,
                "opaque_nodes": stats.opaque_nodes, "cycle_blacklisted": stats.blacklisted,
                "saturation": stats.saturation, "timing_s": stats.timing_s},
            "extraction": None if stats is None else dict(stats.extraction, kept_input=stats.kept_input),
            "rules_applied": {} if stats is None else stats.rules_applied,
        }
    t = time.perf_counter()

    with save_mod.staging_dir(output_dir) as staged:
        stage("saving and verifying")
        t = _write_and_verify(staged, model, graphs, path, options, report, lap, t)
        if options.profile:
            stage("profiling original vs optimized")
            kept = _profile(path, staged, model, graphs, options, report)
            t = lap("profile", t)
            if kept:
                # the optimized graph of these signatures is not measured faster: publish the user's graph (the
                # original signature frozen, before any clean-up), through the same writer and verification
                for name in kept:
                    graphs[name] = original_graph(model.signatures[name])
                    report["signatures"][name]["nodes_after"] = len(graphs[name].node)
                    report["signatures"][name]["ops_after"] = _ops(graphs[name])
                for entry in os.listdir(staged):
                    p = os.path.join(staged, entry)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
                t = _write_and_verify(staged, model, graphs, path, options, report, lap, t)
        pending, t = _deploy_extras(staged, output_dir, model, graphs, options, report, stage, lap, t)
        try:
            stage("publishing " + output_dir)
            serving.normal_permissions(staged)
            save_mod.publish(staged, output_dir, options.overwrite)
            if pending is not None:
                pending.commit()
        finally:
            if pending is not None:
                pending.discard()
        lap("publish", t)
    timing["total"] = round(time.perf_counter() - t_start, 4)
    report["timing_s"] = timing
    return report
