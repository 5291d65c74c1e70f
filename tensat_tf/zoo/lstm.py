"""`lstm`: a Keras 3 LSTM + Dense head, exported with model.export().

Keras' TF backend runs the recurrence as a tf.while_loop, so the frozen graph keeps a `While` node (with
lower_control_flow=False) whose body/cond live in the function library, plus TensorList ops around it. It is the
zoo's control-flow case: the optimizer must treat While as opaque (or recurse into its body) and not break it.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 606
INPUT_SHAPE = (8, 16)


def model() -> keras.Model:
    inp = keras.Input(INPUT_SHAPE, name="sequence")
    h = keras.layers.LSTM(32, name="lstm")(inp)
    out = keras.layers.Dense(4, name="head")(h)
    return keras.Model(inp, out, name="lstm")


def build(export_dir: str) -> None:
    _keras.export(model(), INPUT_SHAPE, SEED, export_dir)
