"""`keras_cnn`: a small Keras 3 functional CNN exported with model.export().

Keras 3 lowers BatchNormalization to Rsqrt/Mul/Sub/AddV2 (never FusedBatchNormV3), so Conv+BN folding is left to us;
the DepthwiseConv2D+BN pair covers the depthwise variant of that folding.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 202
INPUT_SHAPE = (32, 32, 3)


def model() -> keras.Model:
    # Explicit names: Keras' automatic ones carry per-process counters and would differ between builds.
    L = keras.layers
    x = inp = keras.Input(INPUT_SHAPE, name="image")
    x = L.Conv2D(16, 3, padding="same", name="conv1")(x)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.ReLU(name="relu1")(x)
    x = L.Conv2D(32, 3, strides=2, padding="same", name="conv2")(x)
    x = L.BatchNormalization(name="bn2")(x)
    x = L.ReLU(name="relu2")(x)
    x = L.DepthwiseConv2D(3, padding="same", name="dw3")(x)
    x = L.BatchNormalization(name="bn3")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(10, activation="softmax", name="head")(x)
    return keras.Model(inp, out, name="keras_cnn")


def build(export_dir: str) -> None:
    _keras.export(model(), INPUT_SHAPE, SEED, export_dir)
