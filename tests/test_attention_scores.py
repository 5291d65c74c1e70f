"""MultiHeadAttention's scores outside Keras' dot_product_attention path (rules/einsum.rules E16-E18): with dropout
set, Keras' TF backend writes `aecd,abcd->acbe` as Transpose(k) @ Transpose(q) and a Transpose of the [t, s] scores;
the rules compute them as Transpose(q) @ Transpose(k)^T, with no copy of the scores. Older exports hold that
equation as one Einsum, whose kernel copies the scores too; with its operands swapped it does not."""
import numpy as np
import pytest

from conftest import cleaned_graph, exported_graph, run_graph


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


def test_which_einsums_copy_their_result():
    """TF's Einsum kernel contracts to [batch, operand 0's free labels, operand 1's] and copies into any other
    output order (tensat_tf/einsum.py Equation.output_transposed; the cost model prices that copy)."""
    from tensat_tf import einsum
    copies = {"aecd,abcd->acbe": True, "BTNH,BSNH->BNTS": False, "BNTS,BSNH->BTNH": True, "abc,cde->abde": False,
              "abcd,cde->abe": False, "ab,cb->ac": False, "abc,cd->abd": False, "ab,bc->ca": True}
    assert {e: einsum.parse(e).output_transposed for e in copies} == copies


@pytest.fixture(scope="module")
def key_first(tmp_path_factory):
    """Attention written with Einsum ops as older exports hold them: the scores `aecd,abcd->acbe` (key first)."""
    import tensorflow as tf
    rs = np.random.RandomState(0)

    class Attention(tf.Module):
        def __init__(self):
            self.w = [tf.Variable(rs.standard_normal(s).astype(np.float32) * 0.2)
                      for s in ((32, 4, 8), (32, 4, 8), (32, 4, 8), (4, 8, 32))]

        @tf.function(input_signature=[tf.TensorSpec([None, None, 32], tf.float32, name="x")])
        def f(self, x):
            q, k, v = (tf.einsum("abc,cde->abde", x, w) for w in self.w[:3])
            p = tf.nn.softmax(tf.einsum("aecd,abcd->acbe", k, q))
            return {"y": x + tf.einsum("abcd,cde->abe", tf.einsum("acbe,aecd->abcd", p, v), self.w[3])}

    path = str(tmp_path_factory.mktemp("key_first") / "m")
    m = Attention()
    tf.saved_model.save(m, path, signatures={"serving_default": m.f})
    return cleaned_graph(path)


def test_key_first_scores_are_computed_query_first(key_first):
    from tensat_tf import einsum
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    gd, item = key_first

    def eqs(g):
        return sorted(einsum.canonical(n.attr["equation"].s.decode()) for n in g.node if n.op == "Einsum")

    assert "abcd,aecd->aceb" in eqs(gd)
    for unknown_dim in (8, 64):
        p = TensatPass(EngineOptions(unknown_dim=unknown_dim))
        out = p.optimize(gd, item)
        assert p.stats.rules_applied.get("E18-einsum-operands-in-output-order") == 1, p.stats.rules_applied
        assert "abcd,aecd->aceb" not in eqs(out) and "abcd,aecd->acbe" in eqs(out)
        for b, t in ((1, 1), (2, 9), (3, 40)):
            feeds = [np.random.RandomState(b * t).standard_normal((b, t, 32)).astype(np.float32)]
            (want,), (got,) = run_graph(gd, item, feeds), run_graph(out, item, feeds)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_copy_is_priced():
    """The key-first scores cost the query-first ones plus a Transpose of the scores (cost/analytic.py)."""
    from tensat_tf.cost import analytic
    q, k, out = (1, 128, 12, 64), (1, 128, 12, 64), (1, 12, 128, 128)
    first_q = analytic.node_cost("Einsum", ("abcd,aecd->acbe",), [q, k], out)
    first_k = analytic.node_cost("Einsum", ("abcd,aecd->aceb",), [k, q], out)
    copy = analytic.node_cost("Transpose", ((0, 1, 3, 2),), [out], out) - analytic.CPU.overhead_ms("Transpose")
    assert first_k == pytest.approx(first_q + copy)
