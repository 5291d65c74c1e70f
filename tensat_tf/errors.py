"""Every failure the CLI reports, each with its own exit code (the CLI contract in DESIGN.md).

Scripts rely on these codes: they are listed in the README and must not be renumbered.
"""


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


EXIT_CODES = {cls.__name__: cls.exit_code for cls in (
    MissingPath, NotASavedModel, CorruptSavedModel, BadVariables, OutputExists, UnsupportedSignature, UnknownName,
    VerificationFailed, ExportFailed, InternalError, BatchFailed)}
