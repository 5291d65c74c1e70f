"""`conv1d_kws`: a Keras 3 1-D CNN over a sequence of feature frames (keyword spotting, audio and time-series
classifiers are built this way), exported with model.export() with a dynamic batch and sequence.

Keras' Conv1D runs ExpandDims -> Conv2D -> Squeeze, and its bias, a BatchNormalization and the activation come after
the Squeeze (rules/squeeze.rules); MaxPooling1D runs ExpandDims -> MaxPool -> Squeeze the same way. The second residual block is causal and dilated.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 211
FEATURES = 40
CALIBRATION_SHAPE = (64, FEATURES)      # frames x features of the seeded batch that calibrates the batch norms


def model() -> keras.Model:
    # Explicit names: Keras' automatic ones carry per-process counters and would differ between builds.
    L = keras.layers
    x = inp = keras.Input((None, FEATURES), name="frames")
    x = L.Conv1D(64, 5, padding="same", use_bias=False, name="stem")(x)
    x = L.ReLU(name="stem_relu")(L.BatchNormalization(name="stem_bn")(x))
    x = L.MaxPooling1D(2, name="pool")(x)
    for i in range(2):
        # the second block is causal and dilated, as a temporal convolutional network's (TF runs a dilated conv as
        # SpaceToBatchND -> Conv2D -> BatchToSpaceND: rules/dilation.rules)
        pad, rate = ("same", 1) if i == 0 else ("causal", 2)
        skip = x
        x = L.Conv1D(64, 3, padding=pad, dilation_rate=rate, name=f"block{i}_conv1")(x)
        x = L.Activation("swish", name=f"block{i}_swish")(L.BatchNormalization(name=f"block{i}_bn1")(x))
        x = L.Conv1D(64, 3, padding=pad, dilation_rate=rate, use_bias=False, name=f"block{i}_conv2")(x)
        x = L.BatchNormalization(name=f"block{i}_bn2")(x)
        x = L.ReLU(name=f"block{i}_relu")(L.Add(name=f"block{i}_add")([x, skip]))
    x = L.Conv1D(128, 3, strides=2, padding="same", activation="relu", name="reduce")(x)
    x = L.GlobalAveragePooling1D(name="gap")(x)
    out = L.Dense(12, name="head")(x)
    return keras.Model(inp, out, name="conv1d_kws")


def build(export_dir: str) -> None:
    _keras.export(model(), CALIBRATION_SHAPE, SEED, export_dir)
