"""Load a SavedModel: check it, then freeze every signature into a GraphDef with an I/O table keyed by name.

Checks run before TensorFlow touches the model, so that bad input gets one clear message (and a distinct exit code)
instead of a TF traceback: the path exists, it holds a saved_model.pb that parses, its graphs hold no op with effects
outside the graph and its asset folders no link leaving the SavedModel (tensat_tf/io/scan.py: a model is code, and
conversion runs it), and its variables checkpoint is complete and readable. Every command that reads a SavedModel
(convert, its serving mode, the workers of batch, profile, calibrate) comes through load() here.

Freezing takes convert_variables_to_constants_v2_as_graph's steps with lower_control_flow=False (the default lowers
While/If into v1 Switch/Merge loops, which are cyclic graphs), short of building a frozen function (_freeze). The
frozen graph takes the signature function's inputs and returns its outputs in sorted-key order (tf.nest flattening of
dicts), so the table pairs keys with tensors by that order and never by position in the signature.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import tensorflow as tf
from google.protobuf import message as pb_message
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import convert_to_constants

from tensat_tf import errors
from tensat_tf.io import scan
from tensat_tf.item import GrapplerItem, source


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    key: str                      # signature key
    tensor: str                   # tensor name in the frozen GraphDef
    dtype: tf.DType
    shape: Optional[tuple[int, ...]]   # -1 for unknown dims, None for unknown rank

    def to_tf(self) -> tf.TensorSpec:
        shape = None if self.shape is None else [None if d < 0 else d for d in self.shape]
        return tf.TensorSpec(shape, self.dtype, name=self.key)


@dataclasses.dataclass
class Signature:
    name: str
    graph_def: tf.compat.v1.GraphDef
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    function: object              # the original ConcreteFunction (the reference for verification)

    @property
    def item(self) -> GrapplerItem:
        return GrapplerItem(tuple(s.tensor for s in self.inputs), tuple(s.tensor for s in self.outputs))


@dataclasses.dataclass
class LoadedModel:
    path: str
    signatures: dict[str, Signature]
    skipped: dict[str, str]       # signature name -> why it was not converted
    loaded: object                # keeps the loaded object (and its variables) alive


def check_saved_model_dir(path: str, allow_ops: Sequence[str] = ()) -> saved_model_pb2.SavedModel:
    """The structural and safety checks (nothing of the model runs); returns the parsed saved_model.pb."""
    if not os.path.exists(path):
        raise errors.MissingPath(f"no such file or directory: {path}")
    if not os.path.isdir(path):
        raise errors.NotASavedModel(f"not a SavedModel directory (it is a file): {path}")
    pb = os.path.join(path, "saved_model.pb")
    if not os.path.exists(pb):
        if os.path.exists(os.path.join(path, "saved_model.pbtxt")):
            raise errors.NotASavedModel(f"{path} holds saved_model.pbtxt; only binary saved_model.pb is supported")
        raise errors.NotASavedModel(f"not a SavedModel directory (no saved_model.pb): {path}")
    sm = saved_model_pb2.SavedModel()
    try:
        with open(pb, "rb") as f:
            sm.ParseFromString(f.read())
    except (pb_message.DecodeError, ValueError, RuntimeWarning) as e:
        raise errors.CorruptSavedModel(f"corrupt saved_model.pb in {path}: {e}") from None
    if not sm.meta_graphs:
        raise errors.CorruptSavedModel(f"corrupt saved_model.pb in {path}: it holds no MetaGraph")
    scan.check_assets(path, sm)
    scan.check(sm, path, allow_ops)
    _check_variables(path, sm)
    return sm


def _has_variables(sm: saved_model_pb2.SavedModel) -> bool:
    for mg in sm.meta_graphs:
        if any(n.HasField("variable") for n in mg.object_graph_def.nodes):
            return True
        if any(n.op in ("VariableV2", "VarHandleOp") for n in mg.graph_def.node):
            return True
    return False


def _check_variables(path: str, sm) -> None:
    prefix = os.path.join(path, "variables", "variables")
    if not _has_variables(sm):
        return
    if not os.path.exists(prefix + ".index"):
        raise errors.BadVariables(f"variables missing in {path}: no variables/variables.index")
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in sorted(reader.get_variable_to_shape_map()):
            reader.get_tensor(name)       # reads every shard: a truncated data file fails here
    except (tf.errors.OpError, ValueError, IndexError, OSError, RuntimeError) as e:
        raise errors.BadVariables(f"variables unreadable in {path}: {errors.first_line(e)}") from None


def _freeze(fn) -> tuple[tf.compat.v1.GraphDef, list, list]:
    """The frozen GraphDef of `fn`, the inputs it still takes (its arguments and any capture that is not a variable)
    and its outputs, as tensors of fn's graph (their names are the frozen graph's). What
    convert_variables_to_constants_v2_as_graph does, without the frozen ConcreteFunction it also builds: that copies
    every weight twice more (VGG16 at 64x64: peak 2.5 -> 1.3 GB while freezing, 0.5 GB held), and verification runs
    the frozen graph with its weights fed instead (tensat_tf/verify.py)."""
    data = convert_to_constants._FunctionConverterDataInEager(   # noqa: SLF001 - the public function's own steps
        func=fn, lower_control_flow=False, aggressive_inlining=False)
    graph_def, converted = convert_to_constants._replace_variables_by_constants(converter_data=data)  # noqa: SLF001
    captures = fn.graph.internal_captures
    converted = {id(captures[i]) for i in converted}
    return graph_def, [t for t in fn.inputs if id(t) not in converted], list(fn.outputs)


def every_node(graph_def):
    """The nodes of `graph_def` and of every function in its library, in that order."""
    yield from graph_def.node
    for f in graph_def.library.function:
        yield from f.node_def


def without_debug_info(graph_def) -> tf.compat.v1.GraphDef:
    """A copy of `graph_def` without the nodes' debug info (graph and library), which names the function each node
    was traced in: two traces of one computation differ there and nowhere else."""
    graph = tf.compat.v1.GraphDef()
    graph.CopyFrom(graph_def)
    for node in every_node(graph):
        node.ClearField("experimental_debug_info")
    return graph


def _call_key(fn) -> tuple:
    """Equal for two signature functions that compute the same thing over the same captured variables: their graphs
    (without the weights, which are captured: small) minus the nodes' debug info and naming hints, the captures by
    identity and the input and output structure. Keras 3's `model.export` writes `serve` and `serving_default` as
    two wrappers of one traced function; freezing each copies every weight into a constant (VGG16 at 64x64: 4.5 s
    and 0.4 GB each)."""
    graph = without_debug_info(fn.graph.as_graph_def())
    for node in every_node(graph):
        if "_user_specified_name" in node.attr:     # a capture's placeholder is named after the capture's id
            del node.attr["_user_specified_name"]
    return (graph.SerializeToString(deterministic=True), tuple(id(t) for t in fn.captured_inputs),
            repr(fn.structured_input_signature), repr(fn.structured_outputs))


# A signature that writes its own variables when called (a Keras 3 SeedGenerator's state: keras.random in a layer's
# call, Monte Carlo dropout; a counter in a tf.Module) is not a function of its inputs: freezing turns the variable
# into a constant that the write then cannot take, and each call would change what the next one computes.
VARIABLE_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
VARIABLE_WRITE_PREFIXES = ("ResourceScatter", "ResourceApply", "ResourceSparseApply", "ResourceStridedSliceAssign")


def _writes_variables(graph_def) -> list[str]:
    """The ops of `graph_def` (and its function library) that write a variable, sorted, each once."""
    return sorted({n.op for n in every_node(graph_def) if _writes(n)})


def _writes(node) -> bool:
    return node.op in VARIABLE_WRITES or node.op.startswith(VARIABLE_WRITE_PREFIXES)


def _written_names(fn, graph_def) -> list[str]:
    """The names of the variables the frozen graph's own write ops write (sorted, each once), as far as they can be
    traced to a capture of `fn` (writes inside its library's functions are not): the message then says which layer
    writes, e.g. a batch norm's moving_mean when Keras traced it in training mode."""
    nodes = {n.name: n for n in graph_def.node}
    capture_at = {t.op.name: k for k, t in enumerate(fn.graph.internal_captures)}
    names = set()
    for n in graph_def.node:
        if not _writes(n) or not n.input:
            continue
        src = source(nodes, n.input[0])
        k = None if src is None else capture_at.get(src.name)
        if k is None or k >= len(fn.captured_inputs):
            continue
        handle = fn.captured_inputs[k]
        names.update(v.name.split(":")[0] for v in fn.graph.variables if v.handle is handle)
    return sorted(names)


def _table_entry(sig_name: str, kind: str, key: str, tensor, spec) -> TensorSpec:
    if spec.dtype in (tf.string, tf.variant, tf.resource):
        raise errors.UnsupportedSignature(
            f"signature '{sig_name}' has a {spec.dtype.name} {kind} '{key}' (only numeric and bool tensors are "
            f"supported); select the other signatures with --signatures")
    shape = None if spec.shape.rank is None else tuple(-1 if d is None else d for d in spec.shape.as_list())
    return TensorSpec(key, tensor.name, spec.dtype, shape)


def _io_table(fn, frozen_in: list, frozen_out: list, sig_name: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    in_specs = fn.structured_input_signature[1]          # {key: TensorSpec}; signatures take keyword args only
    in_keys = sorted(in_specs)
    frozen_inputs = [t for t in frozen_in if t.dtype != tf.resource]
    leftover = [t for t in frozen_in if t.dtype == tf.resource]
    if leftover:
        raise errors.UnsupportedSignature(
            f"signature '{sig_name}' uses a resource that cannot be frozen (lookup table or asset-backed op); "
            f"select the other signatures with --signatures")
    if len(frozen_inputs) != len(in_keys):
        raise errors.UnsupportedSignature(f"signature '{sig_name}': {len(in_keys)} inputs but the frozen graph has "
                                          f"{len(frozen_inputs)}")
    inputs = [_table_entry(sig_name, "input", key, t, in_specs[key]) for key, t in zip(in_keys, frozen_inputs)]
    out_struct = fn.structured_outputs
    if not isinstance(out_struct, dict):
        raise errors.UnsupportedSignature(f"signature '{sig_name}' does not return a dict of tensors")
    out_keys = sorted(out_struct)
    outputs = [_table_entry(sig_name, "output", key, t, out_struct[key])
               for key, t in zip(out_keys, frozen_out)]
    return inputs, outputs


def load(path: str, tags: Sequence[str] = ("serve",), only: Optional[Sequence[str]] = None,
         allow_ops: Sequence[str] = ()) -> LoadedModel:
    """Load and freeze the signatures of `path` (all of them, or the ones named in `only`). Nothing of the model
    runs before check_saved_model_dir passed (ops with outside effects are refused unless named in allow_ops)."""
    check_saved_model_dir(path, allow_ops)
    try:
        loaded = tf.saved_model.load(path, tags=list(tags) if tags else None)
    except Exception as e:  # noqa: BLE001 - a damaged object graph makes TF's loader raise anything (TypeError,
        # AttributeError, NotEncodableError: tests/test_fuzz.py); the file parsed, so TF cannot load what it holds
        raise errors.CorruptSavedModel(f"cannot load SavedModel {path}: {type(e).__name__}: {errors.first_line(e)}") \
            from None
    names = sorted(loaded.signatures.keys())
    if not names:
        raise errors.UnsupportedSignature(f"SavedModel {path} has no signatures to convert")
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise errors.UnknownName(f"unknown signature(s) {', '.join(unknown)}; the model has {', '.join(names)}")
        names = [n for n in names if n in set(only)]
    sigs, skipped, frozen = {}, {}, {}
    for name in names:
        fn = loaded.signatures[name]
        try:
            key = _call_key(fn)
            if key in frozen:           # the same function as a signature frozen before: share its frozen graph
                sigs[name] = dataclasses.replace(frozen[key], name=name, function=fn)
                continue
            gd, frozen_in, frozen_out = _freeze(fn)
        except (ValueError, tf.errors.OpError) as e:
            raise errors.UnsupportedSignature(f"signature '{name}' cannot be frozen: {errors.first_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - as above: a damaged function library
            raise errors.CorruptSavedModel(f"signature '{name}' of {path} cannot be frozen: "
                                           f"{type(e).__name__}: {errors.first_line(e)}") from None
        writes = _writes_variables(gd)
        if writes:
            names = _written_names(fn, gd)
            which = f" on {', '.join(names[:4])}{f' and {len(names) - 4} more' if len(names) > 4 else ''}" \
                if names else ""
            raise errors.UnsupportedSignature(
                f"signature '{name}' writes its own variables when called ({', '.join(writes)}{which}: a random "
                f"seed's state, a counter, a batch norm's moving statistics when the model was traced in training "
                f"mode), so it is not a function of its inputs and cannot be frozen or verified; select the other "
                f"signatures with --signatures")
        inputs, outputs = _io_table(fn, frozen_in, frozen_out, name)
        sigs[name] = frozen[key] = Signature(name, gd, inputs, outputs, fn)
    return LoadedModel(path, sigs, skipped, loaded)
