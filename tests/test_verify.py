"""Verification's noise floor: one rounding of every weight (verify.rounding_twin) is the model's float32 sensitivity."""
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

from tensat_tf import verify
from tensat_tf.io.load import TensorSpec


def _deep_mlp(scale: float = 1.0):
    """A 12-layer tanh MLP frozen to a GraphDef; `scale` multiplies the last weight (a wrong rewrite when != 1)."""
    rng = np.random.RandomState(0)
    ws = [tf.constant(rng.standard_normal((32, 32)).astype(np.float32) * 0.5) for _ in range(12)]

    @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32, name="x")])
    def f(x):
        for i, w in enumerate(ws):
            x = tf.tanh(tf.matmul(x, w * (scale if i == len(ws) - 1 else 1.0)))
        return {"y": x}
    fn = f.get_concrete_function()
    frozen, gd = convert_to_constants.convert_variables_to_constants_v2_as_graph(fn, lower_control_flow=False)
    inputs = [TensorSpec("x", frozen.inputs[0].name, tf.float32, (-1, 32))]
    outputs = [TensorSpec("y", frozen.outputs[0].name, tf.float32, (-1, 32))]
    return gd, inputs, outputs, fn


def test_rounding_twin_measures_float32_sensitivity():
    gd, inputs, outputs, fn = _deep_mlp()
    x = tf.constant(np.random.RandomState(1).standard_normal((4, 32)).astype(np.float32))
    ref = fn(x=x)["y"].numpy()
    twin = verify.rounding_twin(gd, inputs, outputs)(x=x)["y"].numpy()
    again = verify.rounding_twin(gd, inputs, outputs)(x=x)["y"].numpy()
    _, rel, _ = verify.compare(ref, twin, tf.float32, 1.0)
    assert 0 < rel < 1e-4                      # moved, by float32 rounding only
    assert np.array_equal(twin, again)         # seeded: the same floor every run


def test_wrong_weight_is_far_above_the_rounding_floor():
    gd, inputs, outputs, fn = _deep_mlp()
    wrong = _deep_mlp(scale=1.001)[3]          # one weight off by 0.1 %: a subtly wrong rewrite
    pairs = [("s", inputs, outputs, fn, wrong, (verify.rounding_twin(gd, inputs, outputs),))]
    result = verify.verify(pairs, (1, 4))
    assert not result.passed
    floor = max(v["noise_floor"] for v in result.per_output.values())
    assert result.max_rel_diff > verify.NOISE_FACTOR * floor
