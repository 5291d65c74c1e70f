"""`keras_resnext`: a ResNeXt / RegNetY-style Keras 3 CNN with grouped convolutions, exported with model.export().

Keras 3 runs `Conv2D(groups=...)` on CPU as a call to an XLA-compiled function that the e-graph sees as one opaque
node (passes/grouped_conv.py), and keras.applications has no model with groups below the channel count. This one has
the two families' blocks at 64 x 64: ResNeXt bottlenecks (cardinality 32, width 4 per group, 1x1 -> grouped 3x3 ->
1x1, projection shortcuts) and RegNetY blocks (group width 8 and a squeeze-excite gate), each grouped conv followed by
BatchNormalization and ReLU, plus a grouped Conv1D over the final feature map's rows (its XLA function holds
ExpandDims and Squeeze too).
"""
import keras

from tensat_tf.zoo import _keras

SEED = 203
INPUT_SHAPE = (64, 64, 3)


def _bn(x, name: str, relu: bool = True):
    L = keras.layers
    x = L.BatchNormalization(name=name + "_bn")(x)
    return L.ReLU(name=name + "_relu")(x) if relu else x


def _resnext(x, name: str, width: int, out: int, strides: int, project: bool):
    L = keras.layers
    short = _bn(L.Conv2D(out, 1, strides=strides, use_bias=False, name=name + "_proj")(x), name + "_proj", False) \
        if project else x
    y = _bn(L.Conv2D(width, 1, use_bias=False, name=name + "_reduce")(x), name + "_reduce")
    y = _bn(L.Conv2D(width, 3, strides=strides, padding="same", groups=32, use_bias=False, name=name + "_grouped")(y),
            name + "_grouped")
    y = _bn(L.Conv2D(out, 1, use_bias=False, name=name + "_expand")(y), name + "_expand", False)
    return L.ReLU(name=name + "_out")(L.Add(name=name + "_add")([y, short]))


def _regnety(x, name: str, width: int, strides: int):
    L = keras.layers
    short = _bn(L.Conv2D(width, 1, strides=strides, use_bias=False, name=name + "_proj")(x), name + "_proj", False)
    y = _bn(L.Conv2D(width, 1, use_bias=False, name=name + "_reduce")(x), name + "_reduce")
    y = _bn(L.Conv2D(width, 3, strides=strides, padding="same", groups=width // 8, use_bias=False,
                     name=name + "_grouped")(y), name + "_grouped")
    se = L.GlobalAveragePooling2D(keepdims=True, name=name + "_se_pool")(y)
    se = L.Conv2D(width // 4, 1, activation="relu", name=name + "_se_reduce")(se)
    se = L.Conv2D(width, 1, activation="sigmoid", name=name + "_se_expand")(se)
    y = L.Multiply(name=name + "_se")([y, se])
    y = _bn(L.Conv2D(width, 1, use_bias=False, name=name + "_expand")(y), name + "_expand", False)
    return L.ReLU(name=name + "_out")(L.Add(name=name + "_add")([y, short]))


def model() -> keras.Model:
    # Explicit names: Keras' automatic ones carry per-process counters and would differ between builds.
    L = keras.layers
    x = inp = keras.Input(INPUT_SHAPE, name="image")
    x = _bn(L.Conv2D(32, 3, strides=2, padding="same", use_bias=False, name="stem")(x), "stem")      # 32 x 32
    x = _resnext(x, "x1a", 128, 128, 1, True)
    x = _resnext(x, "x1b", 128, 128, 1, False)
    x = _resnext(x, "x2a", 256, 256, 2, True)                                                          # 16 x 16
    x = _regnety(x, "y3a", 208, 2)                                                                     # 8 x 8
    x = _regnety(x, "y4a", 440, 2)                                                                     # 4 x 4
    x = L.Reshape((16, 440), name="rows")(x)
    x = L.Conv1D(64, 3, padding="same", groups=8, name="rows_grouped")(x)
    x = L.GlobalAveragePooling1D(name="gap")(x)
    out = L.Dense(10, name="head")(x)
    return keras.Model(inp, out, name="keras_resnext")


def build(export_dir: str) -> None:
    _keras.export(model(), INPUT_SHAPE, SEED, export_dir)
