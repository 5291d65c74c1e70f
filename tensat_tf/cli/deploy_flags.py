"""Flags of the deployment extras of `convert` (and `batch`): TF Serving mode, warm-up records, ONNX, progress.

Serving mode: `tensat_tf convert --model_base_path=BASE` converts the highest numeric version under BASE into the
next one; `tensat_tf convert SRC --model_base_path=BASE` converts SRC (a folder or zoo:NAME) into the next version
(1 when BASE has none). --output_dir is not used then. See tensat_tf/serving.py.
"""
from __future__ import annotations

import os
from typing import Optional

from absl import flags

from tensat_tf import errors

FLAGS = flags.FLAGS
flags.DEFINE_string("model_base_path", None,
                    "TF Serving mode: BASE as given to tensorflow_model_server. The source is SRC when given, else the "
                    "highest numeric version BASE/N; the output is BASE/N+1, staged in a hidden folder inside BASE "
                    "and renamed into place after verification. Replaces --output_dir.")
flags.DEFINE_bool("warmup", True, "Write assets.extra/tf_serving_warmup_requests (PredictionLog records of the "
                                  "verification inputs) and replay them through the TF1 loader before publishing. On "
                                  "by default in serving mode; with --output_dir only when --warmup is given.")
flags.DEFINE_string("warmup_model_name", None, "model_spec.name of the warm-up requests (default: BASE's folder "
                                               "name in serving mode, else the output folder's name).")
flags.DEFINE_bool("emit_onnx", False, "Also write OUT.onnx (beside the SavedModel folder, never inside it) through "
                                      "tf2onnx from the optimized signature, checked with onnxruntime against the "
                                      "SavedModel on the verification inputs.")
flags.DEFINE_string("onnx_signature", None, "Signature exported by --emit_onnx (default: serving_default, or the "
                                            "only signature).")
flags.DEFINE_bool("progress", True, "Show progress: a status line redrawn in place when stderr is a terminal; "
                                    "elsewhere stage lines at INFO (--verbosity=0). --noprogress turns it off.")


def paths(args: list[str]) -> tuple[str, str, bool]:
    """(source, output folder, serving mode) from the positional arguments and flags; cheap checks only."""
    if FLAGS.model_base_path:
        from tensat_tf import serving
        if FLAGS.output_dir:
            raise errors.BadInput("--output_dir and --model_base_path exclude each other (serving mode writes the "
                                  "next version folder under --model_base_path)")
        if len(args) > 1:
            raise errors.BadInput("convert --model_base_path takes at most one source; got " + " ".join(args))
        src = args[0] if args else None
        if src is not None and not src.startswith("zoo:") and not os.path.exists(src):
            raise errors.MissingPath(f"no such file or directory: {src}")
        src, out, _ = serving.resolve(FLAGS.model_base_path, src)
        return src, out, True
    if len(args) != 1:
        raise errors.BadInput("convert takes exactly one SAVED_MODEL_DIR (or zoo:NAME); got "
                              + (" ".join(args) if args else "none"))
    if not FLAGS.output_dir:
        raise errors.BadInput("--output_dir (or --model_base_path) is required")
    return args[0], FLAGS.output_dir, False


def options(serving_mode: bool) -> dict:
    """Keyword arguments of tensat_tf.options.Options for the extras. The warm-up requests are named by
    --warmup_model_name, else in serving mode after BASE, else after the output folder (Options.warmup_name)."""
    warmup = FLAGS.warmup if serving_mode else (FLAGS["warmup"].present and FLAGS.warmup)
    name: Optional[str] = FLAGS.warmup_model_name
    if not name and serving_mode:
        name = os.path.basename(os.path.abspath(FLAGS.model_base_path).rstrip("/")) or "model"
    return {"warmup": bool(warmup), "warmup_model_name": name or None, "emit_onnx": FLAGS.emit_onnx,
            "onnx_signature": FLAGS.onnx_signature}
