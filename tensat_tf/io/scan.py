"""Refuse an unsafe SavedModel before TensorFlow loads or runs it: ops with effects outside the graph, and asset
files that lead outside the SavedModel folder.

A SavedModel is code: `tf.saved_model.load` runs its resource initializers, and conversion runs its signatures
(verification, profiling, warm-up). A signature that calls tf.io.write_file would write that file during conversion.
So the parsed saved_model.pb is scanned first, with protobuf only (nothing of the model executes):

  - What is scanned: every node of every MetaGraph's graph_def and every function of its function library, reached
    or not (not only the selected signatures' closure: the loader runs initializer functions no signature calls, and
    scanning everything needs no call-graph guesswork).
  - What is refused: the ops of DENYLIST below (data: one op -> what it does), a superset of saved_model_cli scan's
    `_OP_DENYLIST` (WriteFile, ReadFile, PrintV2; tensorflow/python/tools/saved_model_cli.py), plus ops that read
    or write files, talk to the network or other processes, run Python, or dump debug data. TF has no DeleteFile or
    CopyFile op (checked against TF 2.21's op registry); file deletion is not reachable from a graph.
  - The checkpoint exception: every TF2 SavedModel holds its own save/restore functions (`__inference__traced_save`
    with SaveV2/MergeV2Checkpoints, `__inference__traced_restore` with RestoreV2), called from the graph nodes that
    saver_def names and used by the TF1 loader (TF Serving) with the variables path it feeds. CHECKPOINT_OPS are
    therefore allowed in those graph nodes (saver_def's save tensor and restore op and everything they read) and in
    functions reached only from them; anywhere else (a signature, an initializer, an unreachable function) they are
    refused like the rest. tf.saved_model.load (TF2) never runs those stored functions: it builds its own restore ops.
  - Attribute-dependent ops: DecodeProtoV2/EncodeProto read a descriptor file unless descriptor_source is
    `local://` or `bytes://...`; only then are they refused.
`--allow_ops=A,B` lifts the refusal for the named ops only (tensat_tf/options.py, Options.allow_ops).

The same goes for the files the writer copies into the output: check_assets (below).
"""
from __future__ import annotations

import os
import stat
from collections import defaultdict
from typing import Iterable, Sequence

from tensat_tf import errors

_FILE_READ, _FILE_WRITE, _FILES = "reads files", "writes files", "lists or configures files"
_NET, _PY, _DEBUG, _PROC = "network or other processes", "runs Python", "debug output", "ends the process"

DENYLIST: dict[str, str] = {
    # saved_model_cli scan's _OP_DENYLIST
    "WriteFile": _FILE_WRITE, "ReadFile": _FILE_READ, "PrintV2": _DEBUG,
    # files
    "MatchingFiles": _FILES, "FileSystemSetConfiguration": _FILES, "ImmutableConst": _FILE_READ,
    "InitializeTableFromTextFile": _FILE_READ, "InitializeTableFromTextFileV2": _FILE_READ,
    "GenerateVocabRemapping": _FILE_READ, "LoadAndRemapMatrix": _FILE_READ,
    "CalibrationStatisticsSaver": _FILE_WRITE, "DumpTensor": _FILE_WRITE,
    # checkpoints (allowed in the SavedModel's own save/restore code, see CHECKPOINT_OPS)
    "Save": _FILE_WRITE, "SaveV2": _FILE_WRITE, "SaveSlices": _FILE_WRITE, "MergeV2Checkpoints": _FILE_WRITE,
    "Restore": _FILE_READ, "RestoreV2": _FILE_READ, "RestoreSlice": _FILE_READ, "DTensorRestoreV2": _FILE_READ,
    # readers and file-backed datasets
    "TFRecordReader": _FILE_READ, "TFRecordReaderV2": _FILE_READ, "FixedLengthRecordReader": _FILE_READ,
    "FixedLengthRecordReaderV2": _FILE_READ, "TextLineReader": _FILE_READ, "TextLineReaderV2": _FILE_READ,
    "WholeFileReader": _FILE_READ, "WholeFileReaderV2": _FILE_READ, "LMDBReader": _FILE_READ,
    "TFRecordDataset": _FILE_READ, "TFRecordDatasetV2": _FILE_READ, "FixedLengthRecordDataset": _FILE_READ,
    "FixedLengthRecordDatasetV2": _FILE_READ, "TextLineDataset": _FILE_READ, "CSVDataset": _FILE_READ,
    "CSVDatasetV2": _FILE_READ, "ExperimentalCSVDataset": _FILE_READ, "LMDBDataset": _FILE_READ,
    "ExperimentalLMDBDataset": _FILE_READ, "SqlDataset": _FILE_READ, "ExperimentalSqlDataset": _FILE_READ,
    "MatchingFilesDataset": _FILES, "ExperimentalMatchingFilesDataset": _FILES, "LoadDataset": _FILE_READ,
    "SnapshotDatasetReader": _FILE_READ, "SnapshotNestedDatasetReader": _FILE_READ,
    "SnapshotChunkDataset": _FILE_READ, "ListSnapshotChunksDataset": _FILE_READ,
    "CacheDataset": _FILE_WRITE, "CacheDatasetV2": _FILE_WRITE, "SnapshotDataset": _FILE_WRITE,
    "SnapshotDatasetV2": _FILE_WRITE, "SaveDataset": _FILE_WRITE, "SaveDatasetV2": _FILE_WRITE,
    "DatasetToTFRecord": _FILE_WRITE, "ExperimentalDatasetToTFRecord": _FILE_WRITE, "DistributedSave": _FILE_WRITE,
    # summaries (event files)
    "CreateSummaryFileWriter": _FILE_WRITE, "CreateSummaryDbWriter": _FILE_WRITE, "WriteSummary": _FILE_WRITE,
    "WriteScalarSummary": _FILE_WRITE, "WriteHistogramSummary": _FILE_WRITE, "WriteImageSummary": _FILE_WRITE,
    "WriteAudioSummary": _FILE_WRITE, "WriteGraphSummary": _FILE_WRITE, "WriteRawProtoSummary": _FILE_WRITE,
    "FlushSummaryWriter": _FILE_WRITE, "ImportEvent": _FILE_WRITE,
    # network, other processes and devices
    "RpcClient": _NET, "RpcServer": _NET, "RpcServerStart": _NET, "RpcServerRegister": _NET, "RpcCall": _NET,
    "RpcCheckStatus": _NET, "RpcGetValue": _NET, "RemoteCall": _NET,
    "DataServiceDataset": _NET, "DataServiceDatasetV2": _NET, "DataServiceDatasetV3": _NET,
    "DataServiceDatasetV4": _NET, "RegisterDataset": _NET, "RegisterDatasetV2": _NET,
    "Send": _NET, "Recv": _NET, "_Send": _NET, "_Recv": _NET, "_HostSend": _NET, "_HostRecv": _NET,
    "CollectiveBcastSend": _NET, "CollectiveBcastRecv": _NET, "CollectiveBcastSendV2": _NET,
    "CollectiveBcastRecvV2": _NET, "CollectiveGather": _NET, "CollectiveGatherV2": _NET, "CollectiveReduce": _NET,
    "CollectiveReduceV2": _NET, "CollectiveReduceV3": _NET, "CollectiveAllToAllV2": _NET,
    "CollectiveAllToAllV3": _NET, "CollectiveReduceScatterV2": _NET, "CollectivePermute": _NET,
    "CollectiveInitializeCommunicator": _NET, "CollectiveAssignGroupV2": _NET,
    "Abort": _PROC,
    # Python
    "PyFunc": _PY, "PyFuncStateless": _PY, "EagerPyFunc": _PY,
    # debug output (stderr, files or debug URLs)
    "Print": _DEBUG, "DebugIdentity": _DEBUG, "DebugIdentityV2": _DEBUG, "DebugIdentityV3": _DEBUG,
    "DebugNanCount": _DEBUG, "DebugNumericSummary": _DEBUG, "DebugNumericSummaryV2": _DEBUG,
}

# allowed in the SavedModel's own checkpoint code only (see the module notes)
CHECKPOINT_OPS = frozenset({"Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints", "Restore", "RestoreV2",
                            "RestoreSlice"})

# op -> (attribute, value prefixes that read no file)
_ATTR_DEPENDENT = {"DecodeProtoV2": ("descriptor_source", (b"local://", b"bytes://")),
                   "EncodeProto": ("descriptor_source", (b"local://", b"bytes://"))}

_MAX_PLACES = 2        # places named per op in the error line


def _func_names(attrs) -> Iterable[str]:
    """Every function an attr map refers to (f, body, then_branch, list(func) ...), nested ones included."""
    for value in attrs.values():
        kind = value.WhichOneof("value")
        funcs = [value.func] if kind == "func" else list(value.list.func) if kind == "list" else []
        for f in funcs:
            yield f.name
            yield from _func_names(f.attr)


def _callees(node) -> Iterable[str]:
    yield node.op                 # not a function name for ordinary ops: _reach ignores names it does not know
    yield from _func_names(node.attr)


def _node_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _checkpoint_nodes(meta_graph) -> set[str]:
    """The graph nodes of saver_def's save tensor and restore op, and everything they read."""
    by_name = {n.name: n for n in meta_graph.graph_def.node}
    saver = meta_graph.saver_def
    todo = [_node_name(t) for t in (saver.save_tensor_name, saver.restore_op_name) if t]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo.extend(_node_name(i) for i in by_name[name].input)
    return seen


def _reach(roots: Iterable[str], calls: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in calls:
            continue
        seen.add(name)
        todo.extend(calls[name])
    return seen


def _flagged(node) -> bool:
    if node.op in DENYLIST:
        return True
    rule = _ATTR_DEPENDENT.get(node.op)
    if rule is not None:
        value = node.attr[rule[0]].s if rule[0] in node.attr else b""
        return bool(value) and not value.startswith(rule[1])
    return False


def find_unsafe(saved_model) -> dict[str, list[str]]:
    """op type -> the places (graph node or function/node) that hold it, for every refused op in the SavedModel."""
    found: dict[str, list[str]] = defaultdict(list)
    for i, mg in enumerate(saved_model.meta_graphs):
        where = f"meta graph {i} " if len(saved_model.meta_graphs) > 1 else ""
        lib = mg.graph_def.library
        # a node calls a function through an attr (f, body, then_branch, ...) or by naming it as its op type
        calls = {f.signature.name: {n for node in f.node_def for n in _callees(node)} | set(_func_names(f.attr))
                 for f in lib.function}
        for g in lib.gradient:
            if g.function_name in calls:
                calls[g.function_name].add(g.gradient_func)
        ckpt_nodes = _checkpoint_nodes(mg)
        ckpt_roots, other_roots = set(), set()
        for node in mg.graph_def.node:
            (ckpt_roots if node.name in ckpt_nodes else other_roots).update(_callees(node))
        for obj in mg.object_graph_def.nodes:
            kind = obj.WhichOneof("kind")
            if kind == "function":
                other_roots.update(obj.function.concrete_functions)
            elif kind == "bare_concrete_function":
                other_roots.add(obj.bare_concrete_function.concrete_function_name)
        # checkpoint code: reached from saver_def's nodes and from nothing else
        ckpt_only = _reach(ckpt_roots, calls) - _reach(other_roots, calls)
        for node in mg.graph_def.node:
            if _flagged(node) and not (node.op in CHECKPOINT_OPS and node.name in ckpt_nodes):
                found[node.op].append(f"{where}graph node {node.name}")
        for f in sorted(lib.function, key=lambda f: f.signature.name):
            fname = f.signature.name
            for node in f.node_def:
                if _flagged(node) and not (node.op in CHECKPOINT_OPS and fname in ckpt_only):
                    found[node.op].append(f"{where}function {fname} node {node.name}")
    return dict(sorted(found.items()))


def check(saved_model, path: str, allow_ops: Sequence[str] = ()) -> None:
    """Raise errors.UnsafeOps (one line: the ops, where they are, how to allow them) unless every refused op is
    named in allow_ops."""
    allowed = set(allow_ops or ())
    found = {op: places for op, places in find_unsafe(saved_model).items() if op not in allowed}
    if not found:
        return
    parts = []
    for op, places in found.items():
        more = f" and {len(places) - _MAX_PLACES} more" if len(places) > _MAX_PLACES else ""
        parts.append(f"{op} ({DENYLIST.get(op, 'reads files')}; in {', '.join(places[:_MAX_PLACES])}{more})")
    raise errors.UnsafeOps(
        f"refusing {path}: its graphs hold ops with effects outside the graph, and nothing of it was run: "
        f"{'; '.join(parts)}. Convert it anyway with --allow_ops={','.join(found)}")


# -- assets/ and assets.extra/ ---------------------------------------------------------------------------------------
# The writer copies both folders into the output (tensat_tf/io/save.py). A link in them is copied as the content it
# points to, so a link to a host file would publish that file, and a link to /etc would copy /etc. Refused: a link
# whose resolved target is outside the SavedModel folder, a broken link, a link to one of its own ancestors (a loop:
# copying would never end), and special files (fifo, socket, device: reading /dev/zero never ends). Links that stay
# inside are copied as their content (the output holds no links). A MetaGraph's asset_file_def names files that the
# loader joins to assets/: an absolute name or one with `..` would make it open a file elsewhere.
EXTRA_DIRS = ("assets", "assets.extra")


def _inside(target: str, root: str) -> bool:
    return os.path.commonpath([target, root]) == root


def _check_entry(path: str, rel: str, root: str, ancestors: frozenset) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if not _inside(target, root):
            raise errors.UnsafeAsset(f"{rel} is a link to {target}, outside the SavedModel folder; refused before "
                                     f"anything ran")
        if not os.path.exists(target):
            raise errors.UnsafeAsset(f"{rel} is a broken link (to {target}); refused before anything ran")
        st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        real = os.path.realpath(path)
        if real in ancestors:
            raise errors.UnsafeAsset(f"{rel} links to a folder that contains it (a loop); refused before anything ran")
        for name in sorted(os.listdir(path)):
            _check_entry(os.path.join(path, name), f"{rel}/{name}", root, ancestors | {real})
    elif not stat.S_ISREG(st.st_mode):
        kind = ("fifo" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
                else "device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special file")
        raise errors.UnsafeAsset(f"{rel} is a {kind}, not a regular file; refused before anything ran")


def check_assets(path: str, saved_model=None) -> None:
    """Raise errors.UnsafeAsset (one line naming the entry) for anything in assets/ or assets.extra/ that the writer
    must not copy, or an asset_file_def name that points outside assets/."""
    root = os.path.realpath(path)
    for extra in EXTRA_DIRS:
        top = os.path.join(path, extra)
        if os.path.lexists(top):
            _check_entry(top, extra, root, frozenset())
    for mg in (saved_model.meta_graphs if saved_model is not None else ()):
        for asset in mg.asset_file_def:
            name = asset.filename
            norm = os.path.normpath(name) if name else ""
            if os.path.isabs(name) or norm == os.pardir or norm.startswith(os.pardir + os.sep):
                raise errors.UnsafeAsset(f"saved_model.pb names the asset file {name!r}, outside assets/; refused "
                                         f"before anything ran")
