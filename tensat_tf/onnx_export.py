"""`--emit_onnx`: one signature as ONNX through tf2onnx (ours, or with --profile tf2onnx's conversion of the user's
original when ours is not measured faster), checked with onnxruntime before it is written.

Where the file goes: `OUT.onnx`, a sibling of the SavedModel folder OUT (like the report, `OUT.report.json`), not a
file inside it. Reasons:
  - TF Serving and SavedModel loaders never look beside a version folder, and in serving mode `BASE/<n>.onnx` is not
    a number, so TF Serving ignores it;
  - inside OUT (even under assets.extra/) the ONNX copy of the weights would be shipped to every TF Serving host
    that syncs the version folder, and the writer copies assets.extra/ from source to output, so a later
    conversion of that version would carry a stale model.onnx into the next one.
With convert --profile the file follows the SavedModel's rule (never slower): tf2onnx's conversion of the user's
original signature is checked against the original and timed against ours under ONNX Runtime (tensat_tf/latency.py
decide: paired blocks, every profile batch size and thread setting, tensat_tf/speedup.py), and ours is written only
when measured faster; the report's onnx.profile says which file was written, why, and the ratios. A signature that
publishes its original graph gives the original's conversion anyway.

The ONNX model is converted from the optimized, frozen GraphDef of one signature (`--onnx_signature`, default
`serving_default`, or the only signature), with the signature's input and output keys as ONNX names and unknown
dims kept dynamic. It is written to a temporary file beside OUT, run with onnxruntime on verification's seeded
inputs (every batch size) and compared with the staged SavedModel's signature: max relative difference within the
verification tolerance (1e-5 for float32). Only when the check passes and the SavedModel is published is the file
renamed to OUT.onnx; otherwise nothing is written.
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Optional, Sequence

from tensat_tf import errors
from tensat_tf.options import UNKNOWN_DIM
from tensat_tf.io import save as save_mod

OPSET = 17


def onnx_path(output_dir: str) -> str:
    return os.path.abspath(output_dir).rstrip("/") + ".onnx"


def check_target(output_dir: str, overwrite: bool) -> None:
    path = onnx_path(output_dir)
    if os.path.exists(path) and not overwrite:
        raise errors.OutputExists(f"ONNX output exists: {path} (use --overwrite)")


def pick_signature(names: Sequence[str], wanted: Optional[str]) -> str:
    if wanted:
        if wanted not in names:
            raise errors.UnknownName(f"--onnx_signature {wanted!r} is not among the converted signatures: "
                                     f"{', '.join(sorted(names))}")
        return wanted
    if "serving_default" in names:
        return "serving_default"
    if len(names) == 1:
        return next(iter(names))
    raise errors.BadInput(f"--emit_onnx: several signatures and no serving_default; pick one with --onnx_signature "
                          f"({', '.join(sorted(names))})")


def _rename_io(model, renames: dict[str, str]) -> None:
    """Rename graph inputs/outputs (tensor names like `x:0`) to signature keys, unless a key is already a name."""
    g = model.graph
    taken = {i.name for i in g.initializer} | {o for n in g.node for o in n.output} | {i.name for i in g.input}
    renames = {old: new for old, new in renames.items() if old != new}
    if len(set(renames.values())) != len(renames) or set(renames.values()) & (taken - set(renames)):
        return
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = renames.get(vi.name, vi.name)
    for node in g.node:
        for i, name in enumerate(node.input):
            node.input[i] = renames.get(name, name)
        for i, name in enumerate(node.output):
            node.output[i] = renames.get(name, name)


def _erfc(ctx, node, name, args):
    """tf2onnx handler for TF's Erfc, which ONNX lacks (Keras 3's exact GELU is 0.5 * x * erfc(-x / sqrt 2)):
    erfc(x) = 1 - erf(x), Erf being ONNX's since opset 9. In float32 the difference loses erfc's tail beyond
    x ~ 4 (erfc 1.5e-8, 1 - erf 0): a GELU's output there is about 1e-7 where TF's is 0 or -1e-7, far inside the
    check below."""
    del args
    import numpy as np
    from tf2onnx import utils
    dtype = ctx.get_dtype(node.output[0])
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}/one"), np.array(1, utils.map_onnx_to_numpy_type(dtype)))
    sub = ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(f"{name}/one_minus"),
                                        inputs=[one.output[0], node.output[0]])
    ctx.set_dtype(sub.output[0], dtype)
    ctx.copy_shape(node.output[0], sub.output[0])


# TF ops tf2onnx 1.17 has no handler for, converted here (its custom_op_handlers API: {op: (fn, args)})
OP_HANDLERS = {"Erfc": (_erfc, [])}


def convert_signature(sig, graph_def, opset: int = OPSET):
    """ONNX ModelProto of one signature's (optimized, frozen) GraphDef, with signature keys as I/O names."""
    import tf2onnx
    from tensorflow.python.util import deprecation
    ins, outs = [s.tensor for s in sig.inputs], [s.tensor for s in sig.outputs]
    try:
        with deprecation.silence():
            model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=ins, output_names=outs, opset=opset,
                                                      custom_op_handlers=dict(OP_HANDLERS))
    except Exception as e:  # noqa: BLE001 - tf2onnx raises anything; the CLI wants one line
        first = (str(e).strip().splitlines() or [""])[0]
        raise errors.ExportFailed(f"tf2onnx could not convert signature {sig.name}: {type(e).__name__}: {first}")
    _rename_io(model, {s.tensor: s.key for s in sig.inputs} | {s.tensor: s.key for s in sig.outputs})
    return model


def check(model_bytes: bytes, sig, reference_fn, batch_sizes: Sequence[int], seed: int, tolerances: dict,
          unknown_dim: int = UNKNOWN_DIM, highs: Optional[dict] = None) -> dict:
    """Run the ONNX model with onnxruntime on verification's inputs and compare with reference_fn (the SavedModel);
    highs: the signature's integer inputs' bounds (random_inputs)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise errors.ExportFailed("--emit_onnx checks the ONNX file with onnxruntime, which is not installed "
                                  "(pip install 'tensat_tf[onnx]')") from None

    from tensat_tf import verify
    try:
        sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types; the CLI wants one line
        # tf2onnx passes a TF op it cannot convert through unchanged, and onnxruntime then refuses the graph (or it
        # has no kernel for an op's dtype: Erf on float64)
        first = (str(e).strip().splitlines() or [""])[0]
        # a function call the graph keeps: Keras' XLA-compiled convs that TF cannot run natively here
        # (passes/grouped_conv.py: a grouped Conv3D, a bfloat16 or channels_first grouped conv)
        why = (" (a function call the graph keeps, which ONNX has no op for: Keras compiles a grouped Conv3D, or a "
               "bfloat16 or channels_first grouped conv, with XLA)") if "PartitionedCall" in first else ""
        raise errors.ExportFailed(f"onnxruntime cannot load tf2onnx's conversion of signature {sig.name}{why}: "
                                  f"{type(e).__name__}: {first[:300]}") from None
    in_names = {i.name for i in sess.get_inputs()}
    out_names = {o.name for o in sess.get_outputs()}
    # ONNX names are the signature keys, or the frozen tensor names when renaming was not possible (_rename_io)
    by_key_in = {s.key: s.key if s.key in in_names else s.tensor for s in sig.inputs}
    by_key_out = {s.key: s.key if s.key in out_names else s.tensor for s in sig.outputs}
    per, worst = {}, 0.0
    for b in batch_sizes:
        feeds = verify.random_inputs(sig.inputs, b, seed + b, unknown_dim, highs=highs)
        ref = reference_fn(**feeds)
        got = sess.run([by_key_out[s.key] for s in sig.outputs], {by_key_in[k]: v.numpy() for k, v in feeds.items()})
        for spec, value in zip(sig.outputs, got):
            tol = tolerances.get(f"{sig.name}/{spec.key}", verify.DEFAULT_RTOL.get(spec.dtype, 1e-5))
            max_abs, max_rel, ok = verify.compare(ref[spec.key].numpy(), value, spec.dtype, tol)
            per[f"{spec.key}@{b}"] = {"max_abs_diff": max_abs, "max_rel_diff": max_rel, "tolerance": tol, "passed": ok}
            worst = max(worst, max_rel)
            if not ok:
                raise errors.ExportFailed(
                    f"ONNX check: {sig.name}/{spec.key} at batch {b} differs from the SavedModel under onnxruntime "
                    f"(max relative difference {max_rel:.3g} > {tol:.3g}); nothing was written")
    return {"max_rel_diff": worst, "per_output": per, "onnxruntime": ort.__version__}


class Pending:
    """The checked ONNX file in its temporary place beside OUT: commit() renames it to OUT.onnx, discard() removes
    it (call both from a finally: discard after commit does nothing)."""

    def __init__(self, tmp: str, final: str):
        self.tmp, self.final = tmp, final

    def commit(self) -> None:
        from tensat_tf.serving import normal_permissions
        normal_permissions(self.tmp)
        os.replace(self.tmp, self.final)

    def discard(self) -> None:
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def _write_temp(final: str, data: bytes) -> Pending:
    # owner pid and host in the name: a run killed outright leaves a file the next run removes (save.remove_stale_staging)
    fd, tmp = tempfile.mkstemp(prefix=save_mod.staging_prefix(), suffix=".onnx", dir=os.path.dirname(final))
    pending = Pending(tmp, final)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        pending.discard()
        raise
    return pending


def _race(sig, ours: Pending, original_fn, batch_sizes, seed, tolerances, staged: str, profile: dict,
          unknown_dim: int, highs: Optional[dict]):
    """tf2onnx's conversion of the user's original signature against ours under ONNX Runtime (tensat_tf/latency.py
    decide: paired blocks, every batch size and thread setting); -> (the Pending to publish, (its ModelProto and
    check result) when it is the original's, the report entry)."""
    from tensat_tf import latency
    try:
        theirs_model = convert_signature(sig, sig.graph_def)
    except errors.ExportFailed as e:
        return ours, None, {"published": "optimized", "reason": f"the original does not convert: {e}"}
    theirs_data = theirs_model.SerializeToString()
    theirs = _write_temp(ours.final, theirs_data)
    try:
        try:
            checked = check(theirs_data, sig, original_fn, batch_sizes, seed, tolerances, unknown_dim, highs)
        except errors.ExportFailed as e:
            theirs.discard()
            return ours, None, {"published": "optimized", "reason": f"the original's conversion fails its check: {e}"}
        try:
            r = latency.decide([], sig.name, profile["batch_sizes"], profile["threads"],
                                   onnx=[theirs.tmp, ours.tmp], spec_path=staged, margin=profile["margin"],
                                   seconds=profile["seconds"], unknown_dim=unknown_dim)
        except latency.ProfileError as e:
            ours.discard()
            return theirs, (theirs_model, checked), {"published": "original", "reason": f"profiling failed: {e}"}
    except BaseException:
        theirs.discard()
        raise
    keep = r.pop("keep")
    entry = dict(r, published="optimized" if keep else "original")
    if keep:
        theirs.discard()
        return ours, None, entry
    ours.discard()
    return theirs, (theirs_model, checked), entry


def emit(output_dir: str, staged: str, model, graphs: dict, batch_sizes: Sequence[int], seed: int,
         signature: Optional[str], tolerances: dict, profile: Optional[dict] = None,
         original_published: bool = False, unknown_dim: int = UNKNOWN_DIM,
         highs: Optional[dict] = None) -> tuple[Pending, dict]:
    """Convert, write to a temporary file beside OUT, check against the staged SavedModel (loaded back).

    With `profile` ({"batch_sizes", "threads", "seconds", "margin"}: convert --profile), the file follows the same
    rule as the SavedModel: unless the signature already publishes the original graph (`original_published`), tf2onnx's
    conversion of the original signature is checked against the original and timed against ours under ONNX Runtime,
    and ours is written only when measured faster. Every unknown dim but the batch is unknown_dim long in the checks
    and the timing; integer inputs are drawn below `highs` (signature -> bounds, verify.check_original's)."""
    import tensorflow as tf
    name = pick_signature(list(graphs), signature)
    sig = model.signatures[name]
    sig_highs = (highs or {}).get(name)
    onnx_model = convert_signature(sig, graphs[name])
    data = onnx_model.SerializeToString()
    pending = _write_temp(onnx_path(output_dir), data)
    choice = None
    try:
        loaded = tf.saved_model.load(staged)      # keep it referenced: its variables live as long as it does
        result = check(data, sig, loaded.signatures[name], batch_sizes, seed, tolerances, unknown_dim, sig_highs)
        if profile is not None and original_published:
            choice = {"published": "original", "reason": "the SavedModel publishes the original graph of this "
                                                         "signature; this file is converted from it"}
        elif profile is not None:
            pending, theirs, choice = _race(sig, pending, sig.function, batch_sizes, seed, tolerances, staged,
                                            profile, unknown_dim, sig_highs)
            if theirs is not None:
                onnx_model, result = theirs
                data = onnx_model.SerializeToString()
    except BaseException:
        pending.discard()
        raise
    import onnx
    entry = {"path": pending.final, "signature": name, "opset": OPSET, "bytes": len(data),
             "inputs": [i.name for i in onnx_model.graph.input], "outputs": [o.name for o in onnx_model.graph.output],
             "ops": dict(sorted(Counter(n.op_type for n in onnx_model.graph.node).items())),
             "onnx": onnx.__version__, **result}
    if choice is not None:
        entry["profile"] = choice
    return pending, entry
