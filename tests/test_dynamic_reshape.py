"""A Reshape whose target is computed at run time (ReshapeT, tensat_tf/ops.py TENSOR_FORMS) on a real Keras 3 export:
Dense on [batch, seq, C] with a dynamic sequence writes MatMul -> Reshape(target from Shape) -> BiasAdd -> GELU.
Rules F23/F24 move the bias and the GELU before that Reshape, onto the MatMul the remapper fuses them with, when the
cost model says it pays: on a few rows the fused kernel is dearer (cost/fusion.py, "MatMul"), on many it is not."""
import numpy as np
import pytest

from conftest import exported_graph, run_graph


@pytest.fixture(scope="module")
def dense_gelu(tmp_path_factory):
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((None, 16))
    h = keras.layers.Dense(64, activation="gelu")(x)
    model = keras.Model(x, keras.layers.Dense(16)(h))
    randomize_weights(model, 0)
    return exported_graph(model, str(tmp_path_factory.mktemp("dense_gelu") / "m"))


def _optimized(gd, item, rows_per_unknown_dim):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    p = TensatPass(EngineOptions(enable_rules=["tf-fold"], unknown_dim=rows_per_unknown_dim))
    out = p.optimize(gd, item)
    return out, p.stats.rules_applied


def _bias_inputs(gd):
    by_name = {n.name: n for n in gd.node}
    return sorted(by_name[n.input[0].split(":")[0]].op for n in gd.node if n.op == "BiasAdd")


def test_the_run_time_reshape_is_a_typed_term(dense_gelu):
    from tensat_tf.egraph import ingest
    gd, item = dense_gelu
    ing = ingest.ingest(gd, item)
    reshape_t = [o for o in ing.typed.values() if o.op == "ReshapeT"]
    assert len(reshape_t) == 2                     # each Dense's reshape back to [batch, seq, units]
    assert sorted(o.payload[0][-1] for o in reshape_t) == [16, 64]   # the shape literal keeps the known last dim


def test_bias_and_gelu_move_onto_the_matmul_when_rows_are_many(dense_gelu):
    gd, item = dense_gelu
    assert _bias_inputs(gd) == ["Reshape", "Reshape"]
    out, applied = _optimized(gd, item, 256)
    assert "F24-gelu-through-dynamic-reshape" in applied
    # the GELU layer's bias joins its MatMul; the last layer's (16 units: 4k elements) is cheaper as a separate op
    assert _bias_inputs(out) == ["MatMul", "Reshape"]
    feeds = [np.random.RandomState(1).standard_normal((2, 5, 16)).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_bias_stays_after_the_reshape_on_a_few_rows(dense_gelu):
    gd, item = dense_gelu
    out, applied = _optimized(gd, item, 8)
    assert not {"F23-bias-through-dynamic-reshape", "F24-gelu-through-dynamic-reshape"} & set(applied)
    assert _bias_inputs(out) == ["Reshape", "Reshape"]


@pytest.mark.slow
def test_convert_prices_verifies_and_profiles_at_the_users_sequence_length(tmp_path):
    """--unknown_dim (EngineOptions.unknown_dim): the sequence length a model is served at decides what extraction
    prefers, and verification and profiling feed inputs of that length."""
    import keras
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((None, 16))
    model = keras.Model(x, keras.layers.Dense(16)(keras.layers.Dense(64, activation="gelu")(x)))
    randomize_weights(model, 0)
    src = str(tmp_path / "src")
    model.export(src, verbose=False)
    long = convert(src, str(tmp_path / "long"), Options(profile=True, profile_seconds=1.0, profile_threads=(1,),
                                                        engine=EngineOptions(unknown_dim=256)))
    short = convert(src, str(tmp_path / "short"), Options(profile=False))
    assert long["verification"]["unknown_dim"] == 256 and short["verification"]["unknown_dim"] == 8
    assert "F24-gelu-through-dynamic-reshape" in long["signatures"]["serving_default"]["rules_applied"]
    assert "F24-gelu-through-dynamic-reshape" not in short["signatures"]["serving_default"]["rules_applied"]
    assert long["verification"]["passed"] and long["signatures"]["serving_default"]["profile"]["settings"]
