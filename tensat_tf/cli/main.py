"""`tensat_tf` command line: an absl app with subcommands (convert, batch, extract, profile, rules, calibrate).

Exit codes (see tensat_tf.errors): 0 success; 1 usage; 2 bad argument; 10-19 bad input (17 unsafe ops, 18 unsafe
asset, 19 the original cannot run here); 20 verification failed; 21 ONNX export failed; 30 internal error; 40 batch;
50 unreadable e-graph, 51 no acyclic extraction (extract); 130 interrupted.
Errors are one line on stderr; a traceback only with --verbosity=1 or higher.

Ctrl-C (SIGINT) and SIGTERM: the handler raises KeyboardInterrupt, so every `finally` on the way out runs (the
staging folder and a pending ONNX file are removed: tensat_tf/io/save.py staging_dir), further signals are ignored
while that clean-up runs, and the command exits 130 with one line. A signal that arrives once publishing began
(save.committing()) is held until the command finishes: the output is then complete, never half-renamed.
"""
from __future__ import annotations

import os
import signal
import sys

# TF's C++ logging prints oneDNN/CUDA banners on stderr at import; a CLI error must stay one clear line.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags, logging  # noqa: E402

from tensat_tf import interrupt  # noqa: E402

from tensat_tf.cli import (batch_cmd, calibrate_cmd, convert_cmd, extract_cmd,  # noqa: E402,F401  (their flags)
                           profile_cmd, rules_cmd)

COMMANDS = {"convert": convert_cmd, "extract": extract_cmd, "calibrate": calibrate_cmd, "rules": rules_cmd,
            "profile": profile_cmd, "batch": batch_cmd}

USAGE = """tensat_tf: TENSAT-style equality saturation for TensorFlow SavedModels.

  tensat_tf convert SAVED_MODEL_DIR|zoo:NAME --output_dir=OUT [--report=PATH] [--overwrite] [--signatures=a,b]
        [--rules=...] [--iterations=15] [--node_limit=50000] [--saturation_work=N] [--saturation_seconds=60]
        [--k_multi=1] [--method=ilp|greedy] [--ilp_work=2000] [--ilp_seconds=10] [--cost_model=analytic|measured]
        [--batch_size=1]
        [--emit_onnx [--onnx_signature=S]] [--warmup] [--noprogress] [--allow_ops=A,B]
  tensat_tf convert [SRC] --model_base_path=BASE [--nowarmup]   (TF Serving: BASE/N -> BASE/N+1, warm-up records)
  tensat_tf batch --input_glob=GLOB|zoo:NAME [...] --output_root=ROOT [--jobs=N] [--model_timeout=S]
        [--model_memory_mb=MB] [convert's flags]   (one worker per model; resumable; one JSON line per model)
  tensat_tf extract EGRAPH.json [--method=greedy|ilp] [--ilp_work=N] [--ilp_seconds=S] [--solver=auto|cbc|highs]
  tensat_tf profile SAVED_MODEL_DIR|zoo:NAME [--xla] [--batch_size=N] [--threads=1|default]   (latency per signature)
  tensat_tf rules [--rules=...] [--disable_rules=...] [--rules_file=F]   (one line per rule)
  tensat_tf calibrate SAVED_MODEL_DIR|zoo:NAME [--batch_size=N] [--fusion]   (times its ops into $TENSAT_TF_COST_CACHE;
        --fusion: fused conv/matmul epilogues against their parts)

Flags may come from --flagfile=FILE. --helpfull lists every flag.
"""


def _fail(code: int, message: str) -> int:
    print(f"tensat_tf: error: {message}", file=sys.stderr)
    return code


_INTERRUPTED = {"convert": "interrupted: nothing written",
                "batch": "interrupted: models already converted are kept; nothing of the running ones was written"}
_held: list[int] = []       # signals that arrived while publishing


def _on_signal(signum, frame) -> None:
    # never import in a handler: only look. A signal can land while tensat_tf.io.save is itself being imported, before
    # it defines committing(): then nothing is being published (an AttributeError here became "internal error")
    committing = getattr(sys.modules.get("tensat_tf.io.save"), "committing", None)
    if committing is not None and committing():
        _held.append(signum)                         # publishing: let the command finish
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)           # the clean-up on the way out must not be cut short
    interrupt.request()                              # kept, in case native code swallows the exception below
    raise KeyboardInterrupt


def _quiet_unraisable(default=sys.unraisablehook):
    """A KeyboardInterrupt raised inside a __del__ or a callback prints 'Exception ignored in ...': not for users."""
    def hook(unraisable):
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            return
        default(unraisable)
    return hook


def _quiet_excepthook(default=sys.excepthook):
    """Native code that calls back into Python prints a callback's exception with PyErr_Print, which goes through
    sys.excepthook: an interrupt that landed in protobuf's descriptor_pool.Default(), run from TF's import, printed a
    traceback before the CLI's one line (once in a full test run). The interrupt itself is reported (interrupt.request
    and the KeyboardInterrupt main catches); its traceback is not for users."""
    def hook(exc_type, value, tb):
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            return
        default(exc_type, value, tb)
    return hook


def install_signal_handlers() -> None:
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    sys.unraisablehook = _quiet_unraisable()
    sys.excepthook = _quiet_excepthook()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return 1
    from tensat_tf import errors
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)    # TF's INFO chatter (savers, fingerprints) is not for users
    try:
        code = COMMANDS[argv[1]].main(argv[2:])
        if _held:
            return _fail(errors.Interrupted.exit_code, "interrupted while publishing: the run was finished first, "
                                                       "its output is complete")
        return code
    except KeyboardInterrupt:
        if logging.get_verbosity() >= 1:
            logging.exception("interrupted")
        return _fail(errors.Interrupted.exit_code, _INTERRUPTED.get(argv[1], "interrupted"))
    except errors.TensatError as e:
        if logging.get_verbosity() >= 1:
            logging.exception("failed")
        return _fail(e.exit_code, str(e))
    except Exception as e:  # noqa: BLE001 - the CLI contract: one line, a distinct code, no traceback by default
        if interrupt.requested():     # what the interrupt became in native code (e.g. pybind's ImportError)
            return _fail(errors.Interrupted.exit_code, _INTERRUPTED.get(argv[1], "interrupted"))
        if logging.get_verbosity() >= 1:
            logging.exception("internal error")
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return _fail(errors.InternalError.exit_code, f"internal error: {type(e).__name__}: {first}")


def _quiet_native_stderr() -> None:
    """Send file descriptor 2 (TF's C++ logging: oneDNN and CUDA banners at import) to /dev/null, and keep Python's
    sys.stderr on the real stderr, so an error is one line. --verbosity>=1 keeps native logs (see run())."""
    real = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = os.fdopen(real, "w", buffering=1)


def run() -> None:
    install_signal_handlers()
    if not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
        _quiet_native_stderr()
    code = 0
    try:
        app.run(main, flags_parser=_parse_flags)
    except KeyboardInterrupt:     # before or after main() (flag parsing, imports): still one line
        print("tensat_tf: error: interrupted", file=sys.stderr)
        code = 130
    except SystemExit as e:
        code = e.code
    if interrupt.requested():
        # An interrupt that reached code run through PyRun_String (pybind11 does, while TF's native modules start)
        # marks it "unhandled", and the interpreter would then end the process by SIGINT at exit, whatever exit code
        # was chosen here: the clean-up has run (the `finally` blocks above), so leave now with the code chosen.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 130)
    sys.exit(code)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print(f"tensat_tf: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run()
