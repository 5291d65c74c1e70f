"""Pre-deploy for TF Serving: version folders under a model base path, and warm-up records.

TF Serving watches `--model_base_path=BASE` and serves the highest numeric version folder (`BASE/1`, `BASE/2`, ...);
it ignores every name that is not a number. So the serving mode of `tensat_tf convert --model_base_path=BASE`:
  - takes the highest numeric version folder as the source (or a source given on the command line, then BASE may
    be empty) and writes the next number;
  - stages the new version in a hidden temporary folder *inside* BASE (`BASE/.tensat_tf-XXXX`: not a number, so TF
    Serving never looks at it, and on the same filesystem, so the final rename is atomic), verifies it, and renames
    it to `BASE/<next>` only then. A crash or kill before the rename leaves no numeric folder (at worst a hidden
    temporary one, which TF Serving ignores);
  - copies assets/ and assets.extra/ (the writer does), then writes `assets.extra/tf_serving_warmup_requests`:
    TFRecords of PredictionLog{predict_log{request}}, one per signature and verification batch size, with exactly
    the seeded inputs verification used. TF Serving replays them when it loads the version, so the first real
    request does not pay for Grappler, oneDNN primitive creation and allocator growth (tensorflow/serving#385).
    Before publishing, the staged version is loaded through the TF1 SavedModel loader in a Session (the
    SessionBundle path TF Serving uses, and `saved_model_cli run`), every record is replayed through it and its
    outputs are compared with the original model's.

The PredictionLog/PredictRequest protos come from the `tensorflow-serving-api` package (same version as TensorFlow).
"""
from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from tensat_tf import errors
from tensat_tf.options import UNKNOWN_DIM

WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_DIR = "assets.extra"
MAX_WARMUP_RECORDS = 1000          # TF Serving reads at most this many
_VERSION = re.compile(r"[0-9]+")


# -- version folders -------------------------------------------------------------------------------------------------
def versions(base: str) -> list[int]:
    """The numeric version folders under base, ascending, as TF Serving sees them (files and other names ignored)."""
    out = []
    for name in os.listdir(base):
        if _VERSION.fullmatch(name) and os.path.isdir(os.path.join(base, name)):
            out.append(int(name))
    return sorted(out)


def version_dir(base: str, version: int) -> str:
    """The folder of `version`, under the spelling it has on disk (`007` is version 7), or `BASE/<version>`."""
    for name in os.listdir(base):
        if _VERSION.fullmatch(name) and int(name) == version and os.path.isdir(os.path.join(base, name)):
            return os.path.join(base, name)
    return os.path.join(base, str(version))


def resolve(base: str, src: Optional[str] = None) -> tuple[str, str, int]:
    """(source, output folder, new version) for serving mode. Without src the source is the highest version."""
    if not os.path.isdir(base):
        raise errors.MissingPath(f"--model_base_path is not a directory: {base}")
    have = versions(base)
    if src is None:
        if not have:
            raise errors.MissingPath(
                f"no numeric version folder under {base} (TF Serving layout: {base}/1, {base}/2, ...); "
                f"give a source to write version 1: tensat_tf convert SRC --model_base_path={base}")
        src = version_dir(base, have[-1])
    new = (have[-1] + 1) if have else 1
    return src, os.path.join(base, str(new)), new


def normal_permissions(path: str) -> None:
    """mkdtemp/mkstemp make 0700 folders and 0600 files: after the rename, a TF Serving process running as another
    user could not read the version. Give path the mode mkdir or open would (0777 or 0666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask)


# -- warm-up records -------------------------------------------------------------------------------------------------
def warmup_path(export_dir: str) -> str:
    return os.path.join(export_dir, WARMUP_DIR, WARMUP_FILE)


def requests(model, batch_sizes: Sequence[int], seed: int, model_name: str, unknown_dim: int = UNKNOWN_DIM,
             highs: Optional[dict] = None) -> list:
    """PredictRequests for every signature of a LoadedModel, with verification's inputs (batch b: seed + b; highs:
    signature -> its integer inputs' bounds, verify.check_original's)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    from tensat_tf import verify
    out = []
    for name, sig in sorted(model.signatures.items()):
        for b in batch_sizes:
            req = predict_pb2.PredictRequest()
            req.model_spec.name = model_name
            req.model_spec.signature_name = name
            feeds = verify.random_inputs(sig.inputs, b, seed + b, unknown_dim, highs=(highs or {}).get(name))
            for key, value in sorted(feeds.items()):
                req.inputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
            out.append(req)
    if len(out) > MAX_WARMUP_RECORDS:
        out = out[:MAX_WARMUP_RECORDS]
    return out


def write_records(path: str, reqs) -> None:
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as w:
        for req in reqs:
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(req)
            w.write(log.SerializeToString(deterministic=True))


def read_records(path: str) -> list:
    """The PredictionLogs of a warm-up file (raises on a record that does not parse)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]


def replay(export_dir: str, tags: Sequence[str] = ("serve",), path: Optional[str] = None) -> list:
    """Load export_dir with the TF1 SavedModel loader in a Session (TF Serving's SessionBundle path) and run every
    predict record of its warm-up file. -> [(signature name, {input key: array}, {output key: array})]."""
    import tensorflow as tf
    from tensorflow.python.util import deprecation

    logs = read_records(path or warmup_path(export_dir))
    out = []
    with tf.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as sess:
        with deprecation.silence():
            meta = tf.compat.v1.saved_model.loader.load(sess, list(tags), export_dir)
        for log in logs:
            if log.WhichOneof("log_type") != "predict_log":
                raise errors.InternalError(f"warm-up record of kind {log.WhichOneof('log_type')} is not replayed")
            req = log.predict_log.request
            name = req.model_spec.signature_name or "serving_default"
            if name not in meta.signature_def:
                raise errors.VerificationFailed(f"warm-up record names signature {name!r}, which the model lacks")
            sd = meta.signature_def[name]
            feeds = {key: tf.make_ndarray(t) for key, t in req.inputs.items()}
            keys = list(req.output_filter) or sorted(sd.outputs)
            result = sess.run({k: sd.outputs[k].name for k in keys},
                              {sd.inputs[k].name: v for k, v in feeds.items()})
            out.append((name, feeds, result))
    return out


def write_warmup(export_dir: str, model, batch_sizes: Sequence[int], seed: int, model_name: str,
                 tolerances: dict, tags: Sequence[str] = ("serve",), unknown_dim: int = UNKNOWN_DIM,
                 highs: Optional[dict] = None) -> dict:
    """Write the warm-up file into the staged export_dir, then replay it through the TF1 loader and compare each
    output with the original model's (tolerance per "signature/key": verification's). -> report entry."""
    import tensorflow as tf

    from tensat_tf import verify
    reqs = requests(model, batch_sizes, seed, model_name, unknown_dim, highs)
    path = warmup_path(export_dir)
    write_records(path, reqs)
    worst = 0.0
    results = replay(export_dir, tags)
    for name, feeds, got in results:
        sig = model.signatures[name]
        ref = sig.function(**{k: tf.constant(v) for k, v in feeds.items()})
        for spec in sig.outputs:
            tol = tolerances.get(f"{name}/{spec.key}", verify.DEFAULT_RTOL.get(spec.dtype, 1e-5))
            _, rel, ok = verify.compare(ref[spec.key].numpy(), got[spec.key], spec.dtype, tol)
            worst = max(worst, rel)
            if not ok:
                raise errors.VerificationFailed(
                    f"warm-up replay through the TF1 SavedModel loader: {name}/{spec.key} differs from the original "
                    f"(max relative difference {rel:.3g} > {tol:.3g}); nothing was written")
    return {"path": os.path.relpath(path, export_dir), "records": len(reqs), "replayed": len(results),
            "model_name": model_name, "max_rel_diff": worst}


def tolerances(report: dict) -> dict:
    """"signature/key" -> the largest tolerance verification used for it (over batch sizes; not the looser one of
    the check at other sizes, tensat_tf/verify.py: the warm-up records are drawn at the standard ones)."""
    out: dict = {}
    for name, sig in report.get("signatures", {}).items():
        for k, v in sig.get("verification", {}).get("per_output", {}).items():
            if "lengths" in v:
                continue
            key = k.split("@", 1)[0]
            out[key] = max(out.get(key, 0.0), v["tolerance"])
    return out
