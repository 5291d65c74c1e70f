"""Every failure the CLI reports, each with its own exit code (tensat_tf/cli/main.py prints it as one line).

Scripts rely on these codes: they are listed in the README and must not be renumbered.
"""


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (TF's errors run to many), or its type's name when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class TensatError(Exception):
    """Base class: a failure that the CLI reports as one line and a distinct exit code."""
    exit_code = 1


class BadInput(TensatError):
    exit_code = 2


class MissingPath(BadInput):
    exit_code = 10


class NotASavedModel(BadInput):
    exit_code = 11


class CorruptSavedModel(BadInput):
    exit_code = 12


class BadVariables(BadInput):
    exit_code = 13


class OutputExists(BadInput):
    exit_code = 14


class UnsupportedSignature(BadInput):
    exit_code = 15


class UnknownName(BadInput):
    """An unknown signature, zoo model or rule name."""
    exit_code = 16


class UnsafeOps(BadInput):
    """The model holds ops with effects outside the graph (files, network, processes, debug output); refused before
    anything runs unless the user allows them by name (--allow_ops)."""
    exit_code = 17


class UnsafeAsset(BadInput):
    """assets/ or assets.extra/ holds a link that leaves the SavedModel folder (or is broken, or loops), or a special
    file (fifo, socket, device); or saved_model.pb names an asset file outside assets/. Checked before anything runs
    (tensat_tf/io/scan.py)."""
    exit_code = 18


class OriginalFails(BadInput):
    """TF itself cannot run the original model on the verification inputs (e.g. a kernel this CPU lacks, or an op
    that raises on them), so nothing can be verified; the message names the op and TF's reason."""
    exit_code = 19


class VerificationFailed(TensatError):
    exit_code = 20


class ExportFailed(TensatError):
    """--emit_onnx: tf2onnx could not convert the signature, or onnxruntime's outputs differ from the SavedModel's."""
    exit_code = 21


class InternalError(TensatError):
    exit_code = 30


class BatchFailed(TensatError):
    """`tensat_tf batch`: at least one model failed (reported after every other model finished)."""
    exit_code = 40


class BadEGraph(BadInput):
    """`tensat_tf extract`: the e-graph file cannot be read, or is not an egraph-serialize e-graph."""
    exit_code = 50


class NoAcyclicExtraction(TensatError):
    """`tensat_tf extract`: no acyclic choice of e-nodes avoids the e-graph's blacklist, so nothing can be extracted."""
    exit_code = 51


class Interrupted(TensatError):
    """Ctrl-C (SIGINT) or SIGTERM: staging removed, nothing written; 128 + SIGINT as shells report it."""
    exit_code = 130


EXIT_CODES = {cls.__name__: cls.exit_code for cls in (
    MissingPath, NotASavedModel, CorruptSavedModel, BadVariables, OutputExists, UnsupportedSignature, UnknownName,
    UnsafeOps, UnsafeAsset, OriginalFails, VerificationFailed, ExportFailed, InternalError, BatchFailed, BadEGraph,
    NoAcyclicExtraction, Interrupted)}
