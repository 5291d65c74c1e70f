"""Write optimized signatures back as a TF2 SavedModel that TF Serving loads unchanged.

One tf.Module holds the weights as variables; one tf.function per signature imports its GraphDef with the variables
mapped in. Design notes:
  - Consts with >= `min_variable_elements` elements become variables, deduplicated by content across signatures
    (each signature was frozen separately, so the same weight appears once per signature). Their Const nodes are
    replaced by Placeholders before import, or import_graph_def would still copy the constant into the function.
  - Signatures are passed only through `signatures=`: attaching the functions to the module too stores every
    function twice.
  - Input TensorSpecs are named by signature key, outputs returned as {key: tensor}: same names, keys, dtypes and
    shapes (-1 stays -1) as the source.
  - The output is deterministic: the same model converted twice, into any folders, in any processes, gives
    byte-identical saved_model.pb, fingerprint.pb and variables/. TF names every function it traces
    `__inference_<name>_<uid>`, with uid a process-wide counter, and names a captured variable's placeholder in the
    signature wrappers after another uid (kept as that argument's `_user_specified_name`); its FunctionDefLibrary is
    written in hash-map order. `_canonicalize` renames every function to `<name>_<k>`, k numbering the functions of
    one name in the order a walk from the graph's nodes and the object graph first reaches them, replaces the
    numeric capture names by the argument's own name, and sorts the library; fingerprint.pb is then recomputed by
    TF for the rewritten file, its random `uuid` replaced by one derived from the content.
Publishing is atomic: everything is written to a temporary folder next to the destination, and renamed into place
only after the caller's check (verification) passes.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
from typing import Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import fingerprint_pb2, saved_model_pb2
from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting as fingerprinting_pywrap

from tensat_tf import errors, interrupt
from tensat_tf.io import scan, weights
from tensat_tf.io.load import Signature, every_node
from tensat_tf.options import MIN_VARIABLE_ELEMENTS

EXTRA_DIRS = scan.EXTRA_DIRS


class _Exported(tf.Module):
    pass


def _content_key(arr: np.ndarray) -> bytes:
    h = hashlib.sha256()
    h.update(str(arr.dtype).encode() + str(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.digest()


def _split_weights(graph_def, min_elements: int, module: _Exported, by_key: dict):
    """Copy of graph_def with its weights (tensat_tf/io/weights.py) turned into Placeholders; returns it and
    {placeholder tensor: variable}."""
    gd, values = weights.as_placeholders(graph_def, min_elements)
    mapping = {}
    for name in list(values):
        arr = values.pop(name)              # each array released once its variable holds it
        key = _content_key(arr)
        if key not in by_key:
            var = tf.Variable(arr, trainable=False, name=f"weight_{len(module.weights)}")
            module.weights.append(var)
            by_key[key] = var
        mapping[name + ":0"] = by_key[key]
    return gd, mapping


_UID = re.compile(r"^(.*)_(\d+)$")


def _with_suffix(name: str, suffix: str) -> str:
    m = _UID.match(name)
    return f"{m.group(1)}_{suffix}_{m.group(2)}" if m else f"{name}_{suffix}"


def rename_functions(graph_def, suffix: str):
    """Give every library function a per-signature name.

    Each signature is frozen on its own, so two signatures can carry different functions under one name (the frozen
    While bodies of Keras' `serve` and `serving_default`); one SavedModel cannot hold both. The suffix goes before
    the uid that ends the name (`..._frozen_<uid>` -> `..._frozen_<suffix>_<uid>`), where `_canonicalize` finds it.
    """
    names = {f.signature.name for f in graph_def.library.function}
    if not names:
        return graph_def
    rename = {n: _with_suffix(n, suffix) for n in names}
    if len(set(rename.values())) != len(rename):
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


def _safe(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _drop_debug_uids(graph_def) -> None:
    """Nodes remember the functions they were traced in (experimental_debug_info.original_func_names): those of the
    source model as this process loaded it, so names ending in this process's uids. Keep the names, drop the uids."""
    for node in every_node(graph_def):
        names = node.experimental_debug_info.original_func_names
        for i, name in enumerate(names):
            m = _UID.match(name)
            if m:
                names[i] = m.group(1)


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

    serve.__name__ = f"serve_{_safe(sig.name)}"     # the traced function is `__inference_serve_<signature>_<k>`
    return tf.function(serve, input_signature=[s.to_tf() for s in sig.inputs]).get_concrete_function()


def _func_refs(attrs):
    """Every function reference (NameAttrList) in an attr map, nested ones included, in sorted-key order."""
    for key in sorted(attrs):
        value = attrs[key]
        kind = value.WhichOneof("value")
        funcs = [value.func] if kind == "func" else list(value.list.func) if kind == "list" else []
        for f in funcs:
            yield f
            yield from _func_refs(f.attr)


def _fdef_refs(fdef):
    for node in fdef.node_def:
        yield from _func_refs(node.attr)
    yield from _func_refs(fdef.attr)
    for i in sorted(fdef.arg_attr):
        yield from _func_refs(fdef.arg_attr[i].attr)


def _canonical_names(meta_graph) -> dict[str, str]:
    """Old -> new name of every library function: `<name without its uid>_<k>`, k counting per name in the order a
    depth-first walk reaches the functions from the graph's nodes, then from the object graph; functions nothing
    reaches come last, ordered by content. The walk never looks at old names, so the numbering does not depend on
    them."""
    lib = meta_graph.graph_def.library
    fdefs = {f.signature.name: f for f in lib.function}
    grads = {g.function_name: g.gradient_func for g in lib.gradient}
    new: dict[str, str] = {}
    count: dict[str, int] = {}

    def walk(names):
        stack = list(reversed(names))
        while stack:
            name = stack.pop()
            if name in new or name not in fdefs:
                continue
            m = _UID.match(name)
            base = m.group(1) if m else name
            new[name] = f"{base}_{count.get(base, 0)}"
            count[base] = count.get(base, 0) + 1
            children = [f.name for f in _fdef_refs(fdefs[name])] + ([grads[name]] if name in grads else [])
            stack.extend(reversed(children))

    for node in meta_graph.graph_def.node:
        walk([f.name for f in _func_refs(node.attr)])
    for obj in meta_graph.object_graph_def.nodes:
        kind = obj.WhichOneof("kind")
        if kind == "function":
            walk(list(obj.function.concrete_functions))
        elif kind == "bare_concrete_function":
            walk([obj.bare_concrete_function.concrete_function_name])

    def content(name):
        f = type(fdefs[name])()
        f.CopyFrom(fdefs[name])
        f.signature.name = ""
        return hashlib.sha256(f.SerializeToString(deterministic=True)).digest()

    walk(sorted((n for n in fdefs if n not in new), key=content))
    return new


def _rename_everywhere(meta_graph, new: dict[str, str]) -> None:
    def fix(refs):
        for f in refs:
            f.name = new.get(f.name, f.name)

    graph_def = meta_graph.graph_def
    for node in graph_def.node:
        fix(_func_refs(node.attr))
    for fdef in graph_def.library.function:
        fdef.signature.name = new[fdef.signature.name]
        fix(_fdef_refs(fdef))
        # a variable captured by a signature wrapper is an argument whose user-specified name is a uid
        for i, arg_attr in fdef.arg_attr.items():
            user_name = arg_attr.attr.get("_user_specified_name")
            if user_name is not None and user_name.s.isdigit() and i < len(fdef.signature.input_arg):
                user_name.s = fdef.signature.input_arg[i].name.encode()
    for grad in graph_def.library.gradient:
        grad.function_name = new.get(grad.function_name, grad.function_name)
        grad.gradient_func = new.get(grad.gradient_func, grad.gradient_func)
    functions = sorted(graph_def.library.function, key=lambda f: f.signature.name)
    gradients = sorted(graph_def.library.gradient, key=lambda g: (g.function_name, g.gradient_func))
    for field, items in ((graph_def.library.function, functions), (graph_def.library.gradient, gradients)):
        items = [type(x).FromString(x.SerializeToString()) for x in items]
        del field[:]
        field.extend(items)
    for mapping in (meta_graph.object_graph_def.concrete_functions, meta_graph.meta_info_def.function_aliases):
        items = [(new.get(k, k), v) for k, v in mapping.items()]
        mapping.clear()
        for k, v in items:
            if isinstance(v, str):
                mapping[k] = v
            else:
                mapping[k].CopyFrom(v)
    for obj in meta_graph.object_graph_def.nodes:
        kind = obj.WhichOneof("kind")
        if kind == "function":
            names = [new.get(n, n) for n in obj.function.concrete_functions]
            del obj.function.concrete_functions[:]
            obj.function.concrete_functions.extend(names)
        elif kind == "bare_concrete_function":
            bare = obj.bare_concrete_function
            bare.concrete_function_name = new.get(bare.concrete_function_name, bare.concrete_function_name)


def _canonicalize(export_dir: str) -> None:
    """Make saved_model.pb and fingerprint.pb independent of the process and the folder (see the module notes)."""
    pb_path = os.path.join(export_dir, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb_path, "rb") as f:
        sm.ParseFromString(f.read())
    stale = set()
    for mg in sm.meta_graphs:
        new = _canonical_names(mg)
        _rename_everywhere(mg, new)
        stale |= set(new) - set(new.values())
    data = sm.SerializeToString(deterministic=True)
    # every reference to a function must have been renamed: a stale name means a field this writer does not know
    left = sorted(n for n in stale if re.search(re.escape(n.encode()) + rb"(?![\w])", data))
    if left:
        raise errors.InternalError(f"writer: function name(s) {', '.join(left[:3])} left unrenamed in saved_model.pb")
    with open(pb_path, "wb") as f:
        f.write(data)
    fp_path = os.path.join(export_dir, "fingerprint.pb")
    if os.path.exists(fp_path):
        fp = fingerprint_pb2.FingerprintDef.FromString(fingerprinting_pywrap.CreateFingerprintDef(export_dir))
        fp.ClearField("uuid")   # TF draws it at random; here it is derived from everything else in the fingerprint
        digest = hashlib.sha256(fp.SerializeToString(deterministic=True)).digest()
        fp.uuid = str(int.from_bytes(digest[:16], "big"))
        with open(fp_path, "wb") as f:
            f.write(fp.SerializeToString(deterministic=True))


def write_saved_model(export_dir: str, sigs: dict[str, Signature], graphs: dict[str, object], source_dir: str,
                      min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> int:
    """Write the SavedModel; returns how many weights it holds as variables."""
    module = _Exported()
    module.weights = []
    by_key: dict = {}
    functions = {}
    for name in sorted(graphs):
        gd, var_map = _split_weights(graphs[name], min_variable_elements, module, by_key)
        gd = rename_functions(gd, _safe(name))
        _drop_debug_uids(gd)
        functions[name] = _make_function(sigs[name], gd, var_map)
    tf.saved_model.save(module, export_dir, signatures=functions)
    _canonicalize(export_dir)
    scan.check_assets(source_dir)   # checked at load already; again here, in case the folder changed since
    for extra in EXTRA_DIRS:
        src = os.path.join(source_dir, extra)
        if os.path.isdir(src):
            # links (all inside the SavedModel, see scan.check_assets) are copied as the content they point to
            shutil.copytree(src, os.path.join(export_dir, extra), symlinks=False, dirs_exist_ok=True)
    return len(module.weights)


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise errors.OutputExists(f"output path exists and is not a directory: {output_dir}")
        if os.listdir(output_dir) and not overwrite:
            raise errors.OutputExists(f"output directory exists and is not empty: {output_dir} (use --overwrite)")
    parent = os.path.dirname(os.path.abspath(output_dir))
    if not os.path.isdir(parent):
        raise errors.MissingPath(f"parent of the output directory does not exist: {parent}")
    remove_stale_staging(parent)


STAGING_PREFIX = ".tensat_tf-"
# `.tensat_tf-<pid>@<host>-<random>`: the owner of a staging folder, so a later run can remove what a killed run left
_STAGING = re.compile(r"^\.tensat_tf-(\d+)@(.+)-[^-]+$")
_committing = False      # set once publish() starts: from then on the output is (being) written


def staging_prefix() -> str:
    """Name prefix of this process's temporary folders and files beside an output (owner pid and host)."""
    return f"{STAGING_PREFIX}{os.getpid()}@{socket.gethostname()}-"


def committing() -> bool:
    """Whether this process began publishing (the CLI then lets an interrupted run finish instead of undoing it)."""
    return _committing


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # another user's live process
        return True
    return True


def remove_stale_staging(parent: str) -> list[str]:
    """Remove the staging folders in `parent` whose owner process (on this host) is gone; -> the removed names.
    A folder of a live run, of another host, or without an owner in its name (older versions) is left alone."""
    removed = []
    host = socket.gethostname()
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return removed
    for name in names:
        m = _STAGING.match(name)
        if not m or m.group(2) != host or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        path = os.path.join(parent, name)
        if os.path.islink(path):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
        elif os.path.isfile(path):        # a pending ONNX file (tensat_tf/onnx_export.py)
            os.remove(path)
            removed.append(name)
    return removed


@contextlib.contextmanager
def staging_dir(output_dir: str):
    """A temporary folder beside output_dir (same filesystem, so the final rename is atomic); removed on failure and
    on interruption (KeyboardInterrupt passes through the finally). Its name holds this process's pid and host, so
    the next run in the same folder removes it if this process was killed outright (remove_stale_staging)."""
    global _committing
    _committing = False
    parent = os.path.dirname(os.path.abspath(output_dir))
    remove_stale_staging(parent)
    tmp = tempfile.mkdtemp(prefix=staging_prefix(), dir=parent)
    try:
        yield tmp
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def publish(staged: str, output_dir: str, overwrite: bool) -> None:
    """Move the staged SavedModel into place. A non-empty destination is replaced only with overwrite=True."""
    global _committing
    interrupt.check()        # an interrupt some library swallowed on the way must not publish
    _committing = True
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
