"""Built-in model zoo: deterministic, randomly weighted SavedModels for tests and benchmarks.

Anywhere a SavedModel path is accepted, `zoo:NAME` names one of these; resolve() builds it once into a cache.
Importing this package is cheap: the builders (and TensorFlow/Keras) are imported only when a model is built.
"""
import importlib
import os
import shutil
import tempfile

# Bump whenever any builder's output changes, so caches never serve a stale model under the same name.
ZOO_VERSION = "1"
PREFIX = "zoo:"
CACHE_ENV = "TENSAT_TF_ZOO_CACHE"

# name -> one-line description; the builder is the module tensat_tf.zoo.<name> with build(export_dir).
_MODELS = {
    "mlp": "tf.Module MLP 16->32->4, signatures serving_default {hidden, probs} and logits (bare tensor)",
    "keras_cnn": "Keras 3 CNN 32x32x3: 2x(Conv2D+BN+ReLU), DepthwiseConv2D+BN, GAP, Dense softmax (10)",
    "keras_resnext": "Keras 3 CNN 64x64x3 with grouped convs (XLA-called on CPU): ResNeXt 32x4d and RegNetY "
                     "(SE) blocks, BN + ReLU, a grouped Conv1D, Dense(10)",
    "bert_tiny": "raw-TF BERT encoder: seq 32, hidden 64, 4 heads, 2 layers, FFN 128 (input: float32 embeddings)",
    "inception_block": "tf.Module Inception block 16x16x32: 1x1 | 1x1->3x3 | 1x1->5x5 | maxpool->1x1, ConcatV2",
    "nasrnn": "tf.Module NasRNN cell (TASO), hidden 64, unrolled 3 steps, 16 MatMuls per step; input [None, 3, 64]",
    "lstm": "Keras 3 LSTM(32) over [None, 8, 16] + Dense(4); the frozen graph keeps a While loop",
    "conv1d_kws": "Keras 3 1-D CNN over [None, None, 40] frames: Conv1D+BN+ReLU, MaxPooling1D, 2 residual blocks "
                  "(Conv1D+BN+swish, Conv1D+BN; the second causal, dilation 2), strided Conv1D, GAP, Dense(12)",
    "mobilenet_v2": "keras.applications.MobileNetV2 224x224x3, alpha 1.0, random weights (slow: real application)",
    "resnet50": "keras.applications.ResNet50 224x224x3, random weights (slow: real application, ~200 MB on disk)",
    # TENSAT's seven benchmark models (paper section 5), NHWC, random weights
    "bert_taso": "raw-TF BERT as in TASO/TENSAT: seq 64, hidden 1024, 16 heads, 8 layers, FFN 4096 (slow, ~400 MB)",
    "nasrnn_taso": "NasRNN as in TASO/TENSAT: hidden 512, 5 steps, per-step weights; input [None, 5, 512] (slow)",
    "resnext50": "raw-TF ResNeXt-50 32x4d 224x224x3: grouped 3x3 Conv2D, blocks 3/4/6/3, BN folded (slow, ~100 MB)",
    "nasnet_a": "raw-TF NasNet-A, TASO's 18 cells (separable convs, pools, adds, concats), C 64 at 160x160 (slow)",
    "inception_v3": "keras.applications.InceptionV3 299x299x3, random weights (slow: real application)",
    "squeezenet": "raw-TF SqueezeNet 1.1 224x224x3: 8 fire modules (squeeze 1x1, expand 1x1 | 3x3, concat)",
    "vgg19": "keras.applications.VGG19 224x224x3, include_top=False + GAP + Dense(1000) head, random weights (slow)",
}
NAMES = sorted(_MODELS)
# The real-exports suite (issue 10): Keras 3 exports with dynamic batch (and sequence) dims, one builder module per
# family with build(name, export_dir). Kept out of NAMES, whose every entry tests/test_zoo.py and
# tests/test_convert_zoo.py build; tests/test_real_exports.py covers these.
from tensat_tf.zoo import keras_apps as _keras_apps, transformers as _transformers  # noqa: E402 (no keras import)
_FAMILY = {**{n: "keras_apps" for n in _keras_apps.APPS}, **{n: "transformers" for n in _transformers.MODELS}}
_MODELS.update(_keras_apps.DESCRIPTIONS)
_MODELS.update(_transformers.MODELS)
SUITE_NAMES = sorted(_FAMILY)
# More than ~10 s to build or to convert (real Keras applications, TENSAT's large benchmarks); tests mark them slow.
SLOW_NAMES = frozenset({"mobilenet_v2", "resnet50", "inception_v3", "vgg19",
                        "bert_taso", "nasrnn_taso", "resnext50", "nasnet_a"})


class UnknownModel(ValueError):
    pass


def _check(name: str) -> None:
    if name not in _MODELS:
        raise UnknownModel(f"unknown zoo model {name!r}; available: {', '.join(NAMES + SUITE_NAMES)}")


def describe(name: str) -> str:
    _check(name)
    return _MODELS[name]


def build(name: str, export_dir: str) -> None:
    """Write model `name` as a SavedModel into export_dir, which must not exist yet or be empty."""
    _check(name)
    if name in _FAMILY:
        importlib.import_module(f"{__name__}.{_FAMILY[name]}").build(name, os.fspath(export_dir))
        return
    importlib.import_module(f"{__name__}.{name}").build(os.fspath(export_dir))


def cache_root() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tensat_tf", "zoo")


def _is_saved_model(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "saved_model.pb"))


def resolve(src: str) -> str:
    """`zoo:NAME` -> path of the cached SavedModel (built on first use); any other src is returned unchanged.

    The cache entry is <cache_root()>/<name>-<ZOO_VERSION>. It is built in a temporary sibling directory and renamed
    into place, so a reader never sees a half-written model; when two processes build at once, the loser's rename
    fails on the winner's non-empty directory and it uses that one.
    """
    if not src.startswith(PREFIX):
        return src
    name = src[len(PREFIX):]
    _check(name)
    root = cache_root()
    final = os.path.join(root, f"{name}-{ZOO_VERSION}")
    if _is_saved_model(final):
        return final
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-{ZOO_VERSION}.", suffix=".tmp", dir=root)
    try:
        build(name, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not _is_saved_model(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
