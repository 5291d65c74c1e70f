"""MultiHeadAttention's scores outside Keras' dot_product_attention path (rules/einsum.rules E16/E17): with dropout
set, Keras' TF backend writes `aecd,abcd->acbe` as Transpose(k) @ Transpose(q) and a Transpose of the [t, s] scores;
the rules compute them as Transpose(q) @ Transpose(k)^T, with no copy of the scores."""
import numpy as np
import pytest

from conftest import exported_graph, run_graph


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    """Two self-attention blocks (dropout 0.1, inactive when served) on token embeddings, a dynamic batch and
    sequence; the second block causal, so that a mask's AddV2 reads the scores."""
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(50, 32)(ids)
    x = x + keras.layers.MultiHeadAttention(4, 8, dropout=0.1, name="mha0")(x, x)
    x = x + keras.layers.MultiHeadAttention(2, 16, dropout=0.1, name="mha1")(x, x, use_causal_mask=True)
    model = keras.Model(ids, x)
    randomize_weights(model, 0)
    return exported_graph(model, str(tmp_path_factory.mktemp("attention") / "m"))


def _scores_transposes(gd):
    """Transposes of a BatchMatMulV2's last two axes: the scores copied from [b, n, s, t] to [b, n, t, s]."""
    import tensorflow as tf
    nodes = {n.name: n for n in gd.node}

    def perm(name):
        n = nodes.get(name.split(":")[0])
        return None if n is None or n.op != "Const" else tf.make_ndarray(n.attr["value"].tensor).tolist()

    return [n.name for n in gd.node if n.op == "Transpose" and nodes[n.input[0].split(":")[0]].op == "BatchMatMulV2"
            and perm(n.input[1]) == [0, 1, 3, 2]]


def test_scores_are_computed_in_place(attention):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    gd, item = attention
    assert len(_scores_transposes(gd)) == 2          # as Keras exports them: what the rules are for
    for unknown_dim in (8, 64):                       # removing a copy pays at every length (tools/bench_forms.py)
        p = TensatPass(EngineOptions(unknown_dim=unknown_dim))
        out = p.optimize(gd, item)
        assert p.stats.rules_applied.get("E17-adjoint-of-transpose") == 2, p.stats.rules_applied
        assert _scores_transposes(out) == []
        for b, t in ((1, 1), (1, 5), (3, 7), (2, 33)):
            feeds = [np.random.RandomState(b * t).randint(0, 50, (b, t)).astype(np.int32)]
            (want,), (got,) = run_graph(gd, item, feeds), run_graph(out, item, feeds)
            assert got.shape == want.shape == (b, t, 32)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
