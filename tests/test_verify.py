"""Verification's noise floor: one rounding of every weight (verify.rounding_twin) is the model's float32 sensitivity."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

from tensat_tf import errors, verify
from tensat_tf.io import load as load_mod
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


def test_non_finite_values_must_match_in_kind_and_sign():
    """NaN, +inf and -inf are different values: each must be where the original has it."""
    f = tf.float32
    assert verify.compare(np.array([np.nan, -np.inf, 1.0]), np.array([np.nan, -np.inf, 1.0]), f, 1e-5)[2]
    assert not verify.compare(np.array([np.nan, 1.0]), np.array([np.inf, 1.0]), f, 1e-5)[2]
    assert not verify.compare(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]), f, 1e-5)[2]
    assert not verify.compare(np.array([-np.inf, 1.0]), np.array([np.nan, 1.0]), f, 1e-5)[2]
    assert not verify.compare(np.array([2.0, 1.0]), np.array([np.nan, 1.0]), f, 1e-5)[2]


# --- other lengths ----------------------------------------------------------------------------------------------

def _specs(**shapes):
    return [TensorSpec(k, f"{k}:0", tf.float32, s) for k, s in shapes.items()], \
        [TensorSpec("y", "y:0", tf.float32, None)]


def _attention(k, m):                            # k: the query (sorted first, so 9 long), m: the memory (10)
    return {"y": tf.nn.softmax(tf.einsum("btd,bsd->bts", k, m)) @ m}


def test_other_lengths_catch_a_rewrite_that_took_one_length_for_another():
    """At the standard inputs the query and the memory are both unknown_dim long; a candidate that reads the memory
    only as far as the query's length agrees there, and the check at other lengths (9 and 10) catches it."""
    ins, outs = _specs(k=(-1, -1, 4), m=(-1, -1, 4))
    apart = {("k", 0): 4, ("m", 0): 5}
    assert verify.other_lengths(ins, 8) == [{**apart, ("k", 1): 9, ("m", 1): 10}, {("k", 1): 9, ("m", 1): 10},
                                            {**apart, ("k", 1): 9, ("m", 1): 9}, {("k", 1): 9, ("m", 1): 9}]

    def wrong(k, m):
        return _attention(k, m[:, :tf.shape(k)[1]])
    result = verify.verify([("s", ins, outs, _attention, wrong, None)], (1, 4))
    assert not result.passed
    assert [k for k, v in result.per_output.items() if not v["passed"]] == ["s/y@4+lengths"]
    assert result.per_output["s/y@4+lengths"]["lengths"] == "k[1]=9, m[1]=10"
    assert verify.verify([("s", ins, outs, _attention, _attention, None)], (1, 4)).passed


def test_other_lengths_fall_back_to_one_length_per_input_then_one_for_all_then_none():
    """Tokens and their mask must agree: the per-dim and per-input lengths differ, the original refuses them, and the
    check runs with one length for both. An image whose height and width must be equal gets the per-input variant
    (one length for both) after the per-dim one fails. A model fixed at unknown_dim refuses every variant: nothing
    more is checked, and the verification still passes on the standard inputs."""
    ins, outs = _specs(ids=(-1, -1), mask=(-1, -1))

    def masked(ids, mask):
        return {"y": ids * mask}
    result = verify.verify([("s", ins, outs, masked, masked, None)], (1, 4))
    assert result.passed and result.per_output["s/y@4+lengths"]["lengths"] == "ids[1]=9, mask[1]=9"
    ins1, outs1 = _specs(x=(-1, -1, 4))

    def fixed(x):
        return {"y": tf.reshape(x, [-1, 8, 4]) * 2.0}
    result = verify.verify([("s", ins1, outs1, fixed, fixed, None)], (1, 4), unknown_dim=8)
    assert result.passed and not [k for k in result.per_output if "+lengths" in k]
    ins, outs = _specs(a=(-1, -1, -1, 3))

    def square(a):                               # runs only where height == width
        return {"y": a + tf.transpose(a, [0, 2, 1, 3])}
    assert verify.other_lengths(ins, 8) == [{("a", 1): 9, ("a", 2): 10}, {("a", 1): 9, ("a", 2): 9}]
    result = verify.verify([("s", ins, outs, square, square, None)], (1, 4))
    assert result.passed and result.per_output["s/y@4+lengths"]["lengths"] == "a[1]=9, a[2]=9"


def test_other_sizes_give_two_towers_their_own_batch():
    """A dual encoder's inputs need not share a batch: a candidate that took one tower's batch for the other's agrees
    on the standard inputs (one batch for all) and fails where they differ. Inputs that must share one batch (the
    attention above) fall back to it; a single input gets no variant of its batch."""
    ins, outs = _specs(a=(-1, 4), b=(-1, 4))
    assert verify.other_lengths(ins, 8) == [{("a", 0): 4, ("b", 0): 5}]
    assert verify.other_lengths(_specs(x=(-1, 4))[0], 8) == []

    def ref(a, b):
        return {"y": a * tf.reduce_mean(b)}

    def wrong(a, b):                             # sum / (a's batch * 4): the mean only where the batches agree
        return {"y": a * tf.reduce_sum(b) / tf.cast(tf.shape(a)[0] * 4, tf.float32)}
    result = verify.verify([("s", ins, outs, ref, wrong, None)], (1, 4))
    assert [k for k, v in result.per_output.items() if not v["passed"]] == ["s/y@4+lengths"]
    assert result.per_output["s/y@4+lengths"]["lengths"] == "a[0]=4, b[0]=5"
    assert verify.verify([("s", ins, outs, ref, ref, None)], (1, 4)).passed


def test_a_signature_that_fails_at_another_length_is_not_written():
    """A candidate that fixed the sequence at unknown_dim (a reshape to 8 rows) runs on the standard inputs and fails
    at length 9: a verification failure, not a pass."""
    from tensat_tf import errors
    ins, outs = _specs(x=(-1, -1, 4))

    def ref(x):
        return {"y": x * 2.0}

    def fixed(x):
        return {"y": tf.reshape(x, [-1, 8, 4]) * 2.0}
    try:
        verify.verify([("s", ins, outs, ref, fixed, None)], (1, 4), unknown_dim=8)
    except errors.VerificationFailed as e:
        assert "x[1]=9" in str(e)
    else:
        raise AssertionError("a candidate that fails at another length passed")


# --- precision ----------------------------------------------------------------------------------------------------

def test_a_graph_that_computes_in_bfloat16_is_held_to_bfloat16s_tolerance():
    """Keras' mixed_bfloat16 keeps float32 inputs, variables and outputs and rounds every intermediate to 8 bits:
    precision_rtol reads the least precise float type of the graph, and verification holds float outputs to it."""
    def graph(dtype):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def f(x):
            return {"y": tf.cast(tf.nn.relu(tf.cast(x, dtype) * tf.cast(3.0, dtype)), tf.float32)}
        return f.get_concrete_function().graph.as_graph_def()
    assert verify.precision_rtol(graph(tf.bfloat16)) == verify.DEFAULT_RTOL[tf.bfloat16]
    assert verify.precision_rtol(graph(tf.float16)) == verify.DEFAULT_RTOL[tf.float16]
    assert verify.precision_rtol(graph(tf.float32)) == verify.DEFAULT_RTOL[tf.float32]
    ins, outs = _specs(x=(-1, 4))

    def ref(x):
        return {"y": x * 3.0}

    def rounded(x):                              # what a sound rewrite in bfloat16 may give: 0.5 % off
        return {"y": x * 3.0 * 1.005}
    pairs = [("s", ins, outs, ref, rounded, None)]
    assert not verify.verify(pairs, (1, 4)).passed
    assert verify.verify(pairs, (1, 4), precision={"s": verify.DEFAULT_RTOL[tf.bfloat16]}).passed
    assert not verify.verify(pairs, (1, 4), rtol=1e-5, precision={"s": 2e-2}).passed   # the user's rtol wins


def test_a_signature_of_fixed_batch_is_labelled_by_draw_not_by_a_batch_that_never_ran():
    fixed = [TensorSpec("ids", "ids:0", tf.int32, (1, 16))]
    assert [t for t, _ in verify.verification_inputs(fixed, (1, 4), 0)] == ["1#1", "1#2"]
    assert [t for t, _ in verify.verification_inputs(_specs(x=(-1, 16))[0], (1, 4), 0)] == ["1", "4"]
    # and its check at another length is labelled by that draw too
    ids = [TensorSpec("ids", "ids:0", tf.float32, (1, -1))]
    fn = tf.function(lambda ids: {"y": tf.reduce_sum(ids, -1)})
    result = verify.verify([("s", ids, [TensorSpec("y", "y:0", tf.float32, (1,))], fn, fn, None)], (1, 4))
    assert sorted(result.per_output) == ["s/y@1#1", "s/y@1#2", "s/y@1#2+lengths"]


class _TooShort(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, None], name="x")])
    def f(self, x):
        return {"y": tf.reshape(x, [-1, 20])}


def test_an_original_that_needs_longer_inputs_is_told_to_use_a_larger_unknown_dim(tmp_path):
    """A model with a dynamic length the verification inputs are too short for (DenseNet at 16 x 16) fails in TF
    itself: the one line says which --unknown_dim it ran at."""
    path = str(tmp_path / "m")
    m = _TooShort()
    tf.saved_model.save(m, path, signatures={"serving_default": m.f})
    model = load_mod.load(path)
    with pytest.raises(errors.OriginalFails, match="was 16 long; --unknown_dim sets that length: larger for a "
                                                   "model that needs longer inputs, smaller"):
        verify.check_original(model, unknown_dim=16)
    assert verify.check_original(model, unknown_dim=20) == {"serving_default": {}}
