"""Projections of a [batch, seq, C] activation as Keras' Dense form (rules/einsum.rules E10-E15): a BatchMatMulV2 of
a matrix and EinsumDense's Einsums become Reshape -> MatMul (+ BiasAdd) -> ReshapeS, whose target holds both unknown
leading dims and is built at run time from Shape(graph input) (tensat_tf/ops.py, tensat_tf/shape_values.py)."""
import numpy as np
import pytest
import tensorflow as tf

from conftest import exported_graph, run_graph


@pytest.fixture(scope="module")
def projections(tmp_path_factory):
    """A Llama-style FFN (EinsumDense to one axis: Grappler lowers it to a BatchMatMulV2) and MultiHeadAttention's
    projections (Einsum with a [heads, dim] bias, and back), on a dynamic batch and sequence."""
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((None, 16))
    up = keras.layers.EinsumDense("btd,df->btf", (None, 64), name="up")(x)
    down = keras.layers.EinsumDense("btf,fd->btd", (None, 16), name="down")(keras.ops.relu(up))
    heads = keras.layers.EinsumDense("abc,cde->abde", (None, 4, 32), bias_axes="de", name="heads")(down)
    out = keras.layers.EinsumDense("abcd,cde->abe", (None, 128), bias_axes="e", name="merge")(keras.ops.tanh(heads))
    model = keras.Model(x, out)
    randomize_weights(model, 0)
    return exported_graph(model, str(tmp_path_factory.mktemp("projections") / "m"))


def _optimized(gd, item, rules, unknown_dim=16):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    p = TensatPass(EngineOptions(enable_rules=rules, unknown_dim=unknown_dim))
    return p.optimize(gd, item), p.stats.rules_applied


def _ops(gd):
    return sorted(n.op for n in gd.node if n.op in ("BatchMatMulV2", "Einsum", "MatMul", "Shape"))


def test_projections_become_dense_layers_on_any_batch_and_sequence(projections):
    gd, item = projections
    assert _ops(gd) == ["BatchMatMulV2", "BatchMatMulV2", "Einsum", "Einsum"]
    out, applied = _optimized(gd, item, ["einsum"])
    assert {"E10-batch-matmul-as-dense", "E11-einsum-heads-as-dense", "E12-einsum-merge-heads-as-dense"} <= set(applied)
    # four 2-D MatMuls; the reshapes back read one Shape of the graph input, shared
    assert _ops(out) == ["MatMul"] * 4 + ["Shape"]
    (shape,) = [n for n in out.node if n.op == "Shape"]
    assert shape.input[0].split(":")[0] in {f.split(":")[0] for f in item.feeds}
    # on many rows the biases join their MatMuls (E13, and E14 for the [heads, dim] one), where the remapper fuses
    # them; on 16 the fused bias costs more than a separate one (cost/fusion.py, "MatMul") and they stay
    many, applied_many = _optimized(gd, item, ["einsum"], unknown_dim=256)
    assert {"E13-bias-into-dense", "E14-head-bias-into-dense"} <= set(applied_many)
    by_name = {n.name: n for n in many.node}
    assert sorted(by_name[n.input[0].split(":")[0]].op for n in many.node if n.op == "BiasAdd") == ["MatMul"] * 2
    for g in (out, many):
        for b, t in ((1, 1), (1, 5), (3, 7), (2, 33)):
            feeds = [np.random.RandomState(b * t).standard_normal((b, t, 16)).astype("f")]
            (want,), (got,) = run_graph(gd, item, feeds), run_graph(g, item, feeds)
            assert got.shape == want.shape == (b, t, 128)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def static_sequence(tmp_path_factory):
    """A ViT-like stack on a dynamic batch and a static sequence of 5: Keras' Dense on [batch, 5, 16] (rows 5 x
    batch, reshaped back to [-1, 5, C]), then MultiHeadAttention-style projections and a Llama-style FFN, twice."""
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((5, 16))
    h = x
    for i in range(2):
        h = keras.layers.Dense(16, name=f"dense{i}")(h)
        heads = keras.layers.EinsumDense("abc,cde->abde", (5, 2, 8), bias_axes="de", name=f"heads{i}")(h)
        h = keras.layers.EinsumDense("abcd,cde->abe", (5, 16), bias_axes="e", name=f"merge{i}")(keras.ops.tanh(heads))
        h = keras.layers.EinsumDense("btd,df->btf", (5, 16), name=f"ffn{i}")(keras.ops.relu(h))
    model = keras.Model(x, h)
    randomize_weights(model, 0)
    return exported_graph(model, str(tmp_path_factory.mktemp("static_sequence") / "m"))


def test_a_static_sequence_keeps_the_batch_through_every_block(static_sequence):
    """The first Dense flattens [batch, 5, 16] to rows of 5 x batch and reshapes back to [-1, 5, 16]: the e-graph
    holds 5 x batch as a multiple of the batch symbol (tensat_tf/ops.py symbol_code), so the reshape back gives the
    batch again and the second block's projections are rewritten too (they kept their BatchMatMulV2 when 5 x batch
    was unknown)."""
    from tensat_tf import symbolic as S
    from tensat_tf.egraph import ingest
    gd, item = static_sequence
    ing = ingest.ingest(gd, item)
    b = ing.sizes[item.feeds[0]][0]
    mm = [n.name for n in gd.node if n.op == "MatMul"]
    assert mm and all(ing.shapes[f"{m}:0"][0] == S.encode(S.mul(5, b)) for m in mm)
    last = [n.name for n in gd.node if n.op == "Reshape"][-1]
    assert ing.shapes[f"{last}:0"][0] == S.encode(b)
    # on a static sequence Grappler lowers every EinsumDense to a BatchMatMulV2 (and reshapes)
    assert _ops(gd) == ["BatchMatMulV2"] * 6 + ["MatMul"] * 2
    out, applied = _optimized(gd, item, ["einsum"])
    assert _ops(out) == ["MatMul"] * 8
    for bs in (1, 3, 8):
        feeds = [np.random.RandomState(bs).standard_normal((bs, 5, 16)).astype("f")]
        (want,), (got,) = run_graph(gd, item, feeds), run_graph(out, item, feeds)
        assert got.shape == want.shape == (bs, 5, 16)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_static_shape_reshapes_back_to_a_constant_target():
    """With batch and sequence known the reshape back is an ordinary Reshape (no Shape op), and the flattening
    reshape's -1 is derived (tensat_tf/ops.py _reshape_concrete_rules) so the MatMul is priced at its rows."""
    from tensat_tf.item import GrapplerItem
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 5, 16], name="x")
        w = tf.constant(np.random.RandomState(0).standard_normal((16, 64)).astype("f"))
        y = tf.identity(tf.raw_ops.BatchMatMulV2(x=x, y=w), name="y")
    item = GrapplerItem(feeds=("x:0",), fetches=("y:0",))
    out, applied = _optimized(g.as_graph_def(), item, ["einsum"])
    assert "E10-batch-matmul-as-dense" in applied
    assert _ops(out) == ["MatMul"]
    feeds = [np.random.RandomState(1).standard_normal((2, 5, 16)).astype("f")]
    (want,), (got,) = run_graph(g.as_graph_def(), item, feeds), run_graph(out, item, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_symbolic_shape_needs_the_emitters_target():
    from tensat_tf import ops
    from tensat_tf.egraph import nodedef
    spec = ops.BY_TERM["ReshapeS"]
    node, consts = nodedef.build(spec, ((2, 5, 4),), "r", ["y"], tf.float32)
    assert node.op == "Reshape" and list(node.input) == ["y", "r/shape"] and len(consts) == 1
    node, consts = nodedef.build(spec, ((-2, -3, 4),), "r", ["y", "target"], tf.float32)
    assert list(node.input) == ["y", "target"] and consts == []
    with pytest.raises(ValueError, match="run-time target"):
        nodedef.build(spec, ((-2, -3, 4),), "r", ["y"], tf.float32)


def test_only_reshape_s_may_copy_a_symbol_into_a_literal():
    from tensat_tf.rules import compile as rc
    from tensat_tf.rules.syntax import parse_file
    text = """(family t)
(rule A (BatchMatMulV2 0 0 ?x ?w) => (ReshapeS (vec-of (dim ?x 0) (dim ?x 1) (dim ?w 1)) (MatMul 0 0 (Reshape (vec-of -1 (dim ?x 2)) ?x) ?w))
  :when ((known ?x)) :test ((?x 2 5 6) (?w 6 4)) :reject ((?x 2 -1 6) (?w 6 4)))
(rule B (BatchMatMulV2 0 0 ?x ?w) => (Reshape (vec-of (dim ?x 0) (dim ?x 1) (dim ?w 1)) (MatMul 0 0 (Reshape (vec-of -1 (dim ?x 2)) ?x) ?w))
  :when ((known ?x)) :test ((?x 2 5 6) (?w 6 4)) :reject ((?x 2 -1 6) (?w 6 4)))"""
    _, rules, _ = parse_file(text, "t")
    a, b = (rc.compile_rule(r) for r in rules)
    assert "(>= (vec-get s_x 2) 0)" in a and "(>= (vec-get s_w 1) 0)" not in a     # C is a number, the copies not
    assert "(>= (vec-get s_x 0) 0)" not in a and "(>= (vec-get s_x 0) 0)" in b
    assert "(!= (vec-get s_x 0) -1)" in a and "(!= (vec-get s_x 1) -1)" in a      # a symbol, never an unknown
