"""Write optimized signatures back as a TF2 SavedModel that TF Serving loads unchanged.

One tf.Module holds the weights as variables; one tf.function per signature imports its GraphDef with the variables
mapped in. Design notes (research/tf.md §3):
  - Consts with >= `min_variable_elements` elements become variables, deduplicated by content across signatures
    (each signature was frozen separately, so the same weight appears once per signature). Their Const nodes are
    replaced by Placeholders before import, or import_graph_def would still copy the constant into the function.
  - Signatures are passed only through `signatures=`: attaching the functions to the module too stores every
    function twice.
  - Input TensorSpecs are named by signature key, outputs returned as {key: tensor}: same names, keys, dtypes and
    shapes (-1 stays -1) as the source.
Publishing is atomic: everything is written to a temporary folder next to the destination, and renamed into place
only after the caller's check (verification) passes.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from typing import Optional

import numpy as np
import tensorflow as tf

from tensat_tf import errors
from tensat_tf.io.load import Signature

EXTRA_DIRS = ("assets", "assets.extra")


class _Exported(tf.Module):
    pass


def _content_key(arr: np.ndarray) -> bytes:
    h = hashlib.sha256()
    h.update(str(arr.dtype).encode() + str(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.digest()


def _split_weights(graph_def, min_elements: int, module: _Exported, by_key: dict):
    """Copy of graph_def with large Consts turned into Placeholders; returns it and {placeholder tensor: variable}."""
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(graph_def)
    mapping = {}
    for node in gd.node:
        if node.op != "Const" or any(i.startswith("^") for i in node.input):
            continue
        arr = tf.make_ndarray(node.attr["value"].tensor)
        if arr.size < min_elements or arr.dtype == object:
            continue
        key = _content_key(arr)
        if key not in by_key:
            var = tf.Variable(arr, trainable=False, name=f"weight_{len(module.weights)}")
            module.weights.append(var)
            by_key[key] = var
        dtype = node.attr["dtype"].type
        node.op = "Placeholder"
        node.ClearField("attr")
        node.attr["dtype"].type = dtype
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(arr.shape).as_proto())
        mapping[node.name + ":0"] = by_key[key]
    return gd, mapping


def _rename_functions(graph_def, suffix: str):
    """Give every library function a per-signature name.

    Each signature is frozen on its own, so two signatures can carry different functions under one name (the frozen
    While bodies of Keras' `serve` and `serving_default`); one SavedModel cannot hold both.
    """
    names = {f.signature.name for f in graph_def.library.function}
    if not names:
        return graph_def
    rename = {n: f"{n}_{suffix}" for n in names}

    def fix_attrs(attrs):
        for a in attrs.values():
            if a.HasField("func") and a.func.name in rename:
                a.func.name = rename[a.func.name]
            for f in a.list.func:
                if f.name in rename:
                    f.name = rename[f.name]

    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(graph_def)
    for node in gd.node:
        fix_attrs(node.attr)
    for fn in gd.library.function:
        fn.signature.name = rename[fn.signature.name]
        for node in fn.node_def:
            fix_attrs(node.attr)
    for grad in gd.library.gradient:
        grad.function_name = rename.get(grad.function_name, grad.function_name)
        grad.gradient_func = rename.get(grad.gradient_func, grad.gradient_func)
    return gd


def _make_function(sig: Signature, graph_def, var_map: dict):
    in_names = [s.tensor for s in sig.inputs]
    out_names = [s.tensor for s in sig.outputs]
    out_keys = [s.key for s in sig.outputs]

    def serve(*args):
        input_map = dict(zip(in_names, args))
        input_map.update({name: var.read_value() for name, var in var_map.items()})
        outs = tf.graph_util.import_graph_def(graph_def, input_map=input_map, return_elements=out_names,
                                              name="graph")
        return {k: tf.identity(o, name=k) for k, o in zip(out_keys, outs)}

    return tf.function(serve, input_signature=[s.to_tf() for s in sig.inputs]).get_concrete_function()


def write_saved_model(export_dir: str, sigs: dict[str, Signature], graphs: dict[str, object], source_dir: str,
                      min_variable_elements: int = 1024) -> None:
    module = _Exported()
    module.weights = []
    by_key: dict = {}
    functions = {}
    for name in sorted(graphs):
        gd, var_map = _split_weights(graphs[name], min_variable_elements, module, by_key)
        gd = _rename_functions(gd, re.sub(r"\W", "_", name))
        functions[name] = _make_function(sigs[name], gd, var_map)
    tf.saved_model.save(module, export_dir, signatures=functions)
    for extra in EXTRA_DIRS:
        src = os.path.join(source_dir, extra)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(export_dir, extra), dirs_exist_ok=True)


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise errors.OutputExists(f"output path exists and is not a directory: {output_dir}")
        if os.listdir(output_dir) and not overwrite:
            raise errors.OutputExists(f"output directory exists and is not empty: {output_dir} (use --overwrite)")
    parent = os.path.dirname(os.path.abspath(output_dir))
    if not os.path.isdir(parent):
        raise errors.MissingPath(f"parent of the output directory does not exist: {parent}")


@contextlib.contextmanager
def staging_dir(output_dir: str):
    """A temporary folder beside output_dir (same filesystem, so the final rename is atomic); removed on failure."""
    parent = os.path.dirname(os.path.abspath(output_dir))
    tmp = tempfile.mkdtemp(prefix=".tensat_tf-", dir=parent)
    try:
        yield tmp
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def publish(staged: str, output_dir: str, overwrite: bool) -> None:
    """Move the staged SavedModel into place. A non-empty destination is replaced only with overwrite=True."""
    out = os.path.abspath(output_dir)
    old: Optional[str] = None
    if os.path.exists(out):
        if os.listdir(out):
            if not overwrite:
                raise errors.OutputExists(f"output directory exists and is not empty: {output_dir}")
            old = tempfile.mkdtemp(prefix=".tensat_tf-old-", dir=os.path.dirname(out))
            os.rename(out, os.path.join(old, "model"))
        else:
            os.rmdir(out)
    os.rename(staged, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
