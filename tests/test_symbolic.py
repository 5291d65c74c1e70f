"""Symbolic dims (tensat_tf/symbolic.py), the rules they let fire (rules/compile.py guards), and the shape plumbing
folds (passes/shapes.py), on small graphs with a dynamic batch and sequence."""
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from tensat_tf import rules
from tensat_tf import symbolic as S
from tensat_tf.options import UNKNOWN_DIM
from tensat_tf.cost import analytic
from tensat_tf.egraph import ingest, language
from tensat_tf.egraph.saturate import saturate
from tensat_tf.item import GrapplerItem
from tensat_tf.passes import canonicalize, pipeline, shapes
from tensat_tf.options import Budget, EngineOptions
from tensat_tf.passes.tensat import TensatPass
from tensat_tf.rules import compile_rule

PLUMBING = ("Shape", "StridedSlice", "Pack", "Prod", "GatherV2")


def frozen(fn, *specs):
    cf = tf.function(fn).get_concrete_function(*specs)
    ff = convert_variables_to_constants_v2(cf)
    item = GrapplerItem(tuple(t.name for t in ff.inputs), tuple(t.name for t in ff.outputs))
    return ff.graph.as_graph_def(), item


@pytest.fixture(scope="module")
def keras_attention():
    """Dense + reshape to heads + MultiHeadAttention + LayerNorm + FFN: batch and sequence dynamic."""
    import keras
    keras.utils.set_random_seed(0)
    inp = keras.Input((None, 8), name="x")
    h = keras.layers.Dense(16)(inp)
    h = keras.layers.Reshape((-1, 4, 4))(h)
    h = keras.layers.Reshape((-1, 16))(h)
    a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
    h = keras.layers.LayerNormalization()(a + h)
    out = h + keras.layers.Dense(16)(keras.layers.Dense(32, activation="relu")(h))
    model = keras.Model(inp, out)
    gd, item = frozen(lambda x: model(x), tf.TensorSpec([None, None, 8], tf.float32, name="x"))
    return canonicalize.optimize(gd, item), item


def run_graph(gd, item, x):
    fn = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(gd, name=""), [])
    g = fn.graph
    return fn.prune([g.get_tensor_by_name(item.feeds[0])], [g.get_tensor_by_name(t) for t in item.fetches])(x)


# ------------------------------------------------------------------ the symbolic analysis
def test_monomials_cancel():
    s1, s2 = S.Sym(1, (1,)), S.Sym(1, (2,))
    flat = S.mul(S.mul(s1, s2), 16)
    assert flat == S.Sym(16, (1, 2))
    assert S.div(flat, 16) == S.mul(s1, s2)
    assert S.div(flat, S.mul(16, s1)) == s2
    assert S.div(flat, 32) is None                    # s1*s2/2 is not a dim we can name
    assert S.mul(s1, None) is None and S.mul(s1, 0) == 0
    assert S.broadcast(s1, 1) == s1 and S.broadcast(s1, s2) is None and S.broadcast(s1, None) is None


def test_symbols_propagate_through_keras_attention(keras_attention):
    gd, item = keras_attention
    a = S.infer(gd)
    b, t = a.shapes["x:0"][:2]
    assert isinstance(b, S.Sym) and isinstance(t, S.Sym) and b != t
    assert a.shapes[item.fetches[0]] == (b, t, 16)
    softmax = [n.name for n in gd.node if n.op == "Softmax"]
    assert softmax and a.shapes[softmax[0] + ":0"] == (b, 2, t, t)
    # the facts the e-graph gets: one i64 <= -2 per symbol, the same one wherever the symbol goes
    _, facts, _, _ = ingest._infer(gd)
    eb, et, c = facts[item.fetches[0]]
    assert eb <= -2 and et <= -2 and eb != et and c == 16
    assert facts["x:0"] == (eb, et, 8)
    assert facts[softmax[0] + ":0"] == (eb, 2, et, et)


# ------------------------------------------------------------------ guards: equal symbols are equal dims
def _two_layer_sum(two_inputs: bool):
    """xA + hB with h computed from x (one batch symbol), or x1 A + x2 B from two inputs (two symbols)."""
    r = np.random.RandomState(0)
    w0, w1, w2 = (tf.constant(r.standard_normal(s).astype(np.float32)) for s in ((8, 16), (8, 4), (16, 4)))
    if two_inputs:
        return frozen(lambda x, y: tf.matmul(x, w1) + tf.matmul(y, w2),
                      tf.TensorSpec([None, 8], tf.float32, name="x"), tf.TensorSpec([None, 16], tf.float32, name="y"))
    return frozen(lambda x: tf.matmul(x, w1) + tf.matmul(tf.nn.relu(tf.matmul(x, w0)), w2),
                  tf.TensorSpec([None, 8], tf.float32, name="x"))


def _matches(gd, item, rule):
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    res = saturate(eg, rules.select([rule]), Budget(iterations=2))
    assert not res.banned
    return sum(it.matches.get(rule, 0) for it in res.iterations)


def test_equal_batch_symbols_let_S070_fire(monkeypatch):
    gd, item = _two_layer_sum(two_inputs=False)
    assert _matches(gd, item, "S070") == 1
    # two inputs: two symbols that nothing proves equal (one may be a broadcast 1 at run time)
    gd2, item2 = _two_layer_sum(two_inputs=True)
    assert _matches(gd2, item2, "S070") == 0
    # with TF's shapes alone (every unknown dim -1) the rule could not fire on the first graph either
    monkeypatch.setattr(ingest, "_infer", lambda g: (*S.tf_inferred(g), S.Analysis(), S.Analysis()))
    assert _matches(gd, item, "S070") == 0


def _fires(rule_name: str, shapes_: dict) -> bool:
    """Run one compiled rule on Relu leaves with the given (encoded) shapes."""
    eg = language.new_egraph()
    prog = [compile_rule(rules.builtin().by_name(rule_name))]
    for v, s in shapes_.items():
        prog.append(f'(let $V_{v}_ (Input "{v}"))\n(set (shape $V_{v}_) (vec-of {" ".join(map(str, s))}))')
        prog.append(f"(let $R_{v}_ (Relu $V_{v}_))")
    prog.append("(run-schedule (saturate (run shapes)))")
    prog.append(f"(run-schedule (run rs_{rule_name}_))")
    outs = eg.run_program(*eg.parse_program("\n".join(prog)))
    return any(getattr(o, "report", None) is not None and o.report.num_matches_per_rule.get(rule_name, 0)
               for o in outs)


def test_a_symbol_is_never_used_as_a_number():
    # M04 merges two relus by a concat on axis 1 and splits them back with sizes read from dim 1
    assert _fires("M04", {"a": (-2, 4), "b": (-2, 5)})           # equal batch symbols: merged
    assert not _fires("M04", {"a": (-2, 4), "b": (-3, 5)})       # different symbols: not provably equal
    assert not _fires("M04", {"a": (-2, -3), "b": (-2, 5)})      # a split size would be a symbol: refused
    assert not _fires("M04", {"a": (-1, 4), "b": (-1, 5)})       # unknown is still unknown
    text = compile_rule(rules.builtin().by_name("M04"))
    assert "(>= (vec-get s_1 1) 0)" in text and "(>= (vec-get s_2 1) 0)" in text


def test_shape_rules_copy_symbols_and_never_compute_with_them():
    eg = language.new_egraph()
    prog = """
    (let $a_ (Input "a")) (set (shape $a_) (vec-of -2 -3 8))
    (let $b_ (Input "b")) (set (shape $b_) (vec-of -2 -3 8))
    (let $w_ (Weight 0)) (set (shape $w_) (vec-of 8 4))
    (let $t_ (Transpose (vec-of 1 0 2) $a_))
    (let $c_ (ConcatV2 1 $a_ $b_))
    (let $s_ (AddV2 $a_ $b_))
    (run-schedule (saturate (run shapes)))
    (check (= (shape $t_) (vec-of -3 -2 8)))
    (check (= (shape $c_) (vec-of -2 -1 8)))
    (check (= (shape $s_) (vec-of -2 -3 8)))
    """
    eg.run_program(*eg.parse_program(prog))


def test_a_reshape_scales_a_leading_symbol_exactly_and_never_overflows():
    """The Reshape rule for a leading -1 over a leading symbol (tensat_tf/ops.py _reshape_symbol_rules): 17 x the
    batch and back, -1 where the quotient is not a whole multiple, and no shape (not a panic) where the product
    would overflow an i64."""
    b = S.Sym(1, (1,))
    rows, half = S.encode(S.mul(17, b)), S.encode(b)
    eg = language.new_egraph()
    prog = f"""
    (let $x_ (Input "x")) (set (shape $x_) (vec-of {half} 17 64))
    (let $r_ (Reshape (vec-of -1 64) $x_))
    (let $b_ (Reshape (vec-of -1 17 64) $r_))
    (let $h_ (Reshape (vec-of -1 2176) $x_))
    (let $big_ (Input "big")) (set (shape $big_) (vec-of {rows} 46116860184273879 64))
    (let $o_ (Reshape (vec-of -1 64) $big_))
    (run-schedule (saturate (run shapes)))
    (check (= (shape $r_) (vec-of {rows} 64)))
    (check (= (shape $b_) (vec-of {half} 17 64)))
    (check (= (shape $h_) (vec-of -1 2176)))
    (fail (check (shape $o_)))
    """
    eg.run_program(*eg.parse_program(prog))


def test_cost_model_evaluates_symbols_at_the_batch_size():
    assert analytic.concrete((-2, -3, 16), 8) == (8, UNKNOWN_DIM, 16)
    assert analytic.concrete((-1, -7, 16), 4) == (4, UNKNOWN_DIM, 16)
    # where the batch's symbols are known, a code is read as what it is, wherever it stands: 17 x batch, the
    # sequence first and the batch second
    b, t = S.Sym(1, (1,)), S.Sym(1, (2,))
    assert analytic.concrete((S.encode(S.mul(17, b)), 16), 2, batch_bases=frozenset({1})) == (34, 16)
    assert analytic.concrete((S.encode(t), S.encode(b), 16), 2, batch_bases=frozenset({1})) == (UNKNOWN_DIM, 2, 16)


def test_symbol_codes_round_trip_and_refuse_what_they_cannot_hold():
    from tensat_tf import ops
    for d in (S.Sym(1, (1,)), S.Sym(17, (1,)), S.Sym(3136, (4,)), S.Sym(ops.MAX_SYMBOL_COEF, (2,))):
        assert S.encode(d) <= -2 and S.decode(S.encode(d)) == d
    assert len({S.encode(S.Sym(c, (k,))) for c in (1, 2, 17) for k in (1, 2, 3)}) == 9
    assert S.encode(S.Sym(ops.MAX_SYMBOL_COEF + 1, (1,))) == -1          # past the coefficient bound
    assert S.encode(S.mul(S.Sym(1, (1,)), S.Sym(1, (2,)))) == -1         # a product of two symbols
    assert S.encode(None) == -1 and S.encode(7) == 7


# ------------------------------------------------------------------ the fold pass
def test_shape_plumbing_folds_and_verifies(keras_attention):
    gd, item = keras_attention
    stats = {}
    out = shapes.optimize(gd, item, stats)
    before, after = Counter(n.op for n in gd.node), Counter(n.op for n in out.node)
    assert sum(before[o] for o in PLUMBING) >= 15
    assert sum(after[o] for o in PLUMBING) <= 2                # one Shape(x) and one slice of it, shared
    assert len(out.node) < len(gd.node) - 20
    assert stats["reshapes_const"] >= 2 and stats["reshapes_built"] >= 2
    assert shapes.optimize(gd, item).SerializeToString(deterministic=True) == out.SerializeToString(deterministic=True)
    rng = np.random.RandomState(0)
    for batch in (1, 4):
        for seq in (3, 7):
            x = tf.constant(rng.standard_normal((batch, seq, 8)).astype(np.float32))
            ref, got = run_graph(gd, item, x), run_graph(out, item, x)
            assert got[0].shape == (batch, seq, 16)
            np.testing.assert_array_equal(ref[0].numpy(), got[0].numpy())


def test_shape_pass_in_the_pipeline_then_the_egraph(keras_attention):
    gd, item = keras_attention
    tp = TensatPass(EngineOptions())
    out, results = pipeline.run(gd, item, [shapes, tp])
    assert [r.ok for r in results] == [True, True], results
    assert not tp.stats.saturation.get("banned")
    x = tf.constant(np.random.RandomState(1).standard_normal((2, 5, 8)).astype(np.float32))
    np.testing.assert_allclose(run_graph(gd, item, x)[0].numpy(), run_graph(out, item, x)[0].numpy(), atol=1e-5)


def test_reshape_targets_with_one_unknown_get_minus_one_and_with_two_stay():
    def folded(target_fn):
        gd, item = frozen(lambda x: tf.reshape(x, target_fn(tf.shape(x))),
                          tf.TensorSpec([None, None, 4], tf.float32, name="x"))
        gd = canonicalize.optimize(gd, item)
        stats = {}
        out = shapes.optimize(gd, item, stats)
        x = tf.constant(np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4))
        np.testing.assert_array_equal(run_graph(gd, item, x)[0].numpy(), run_graph(out, item, x)[0].numpy())
        return stats, Counter(n.op for n in out.node)
    # [b, t, 4] -> [b*t/2, 8]: one dim that no symbol names, so a constant target [-1, 8]
    stats, ops_ = folded(lambda s: tf.stack([s[0] * s[1] // 2, 8]))
    assert stats["reshapes_const"] == 1 and ops_["Shape"] == 0
    # [b, t, 4] -> [2b, 2t]: two dims that no symbol names: one -1 cannot stand for both, the target stays
    stats, ops_ = folded(lambda s: tf.stack([s[0] * 2, s[1] * 2]))
    assert stats["reshapes_const"] == 0 and stats["reshapes_built"] == 0 and ops_["Shape"] >= 1


def test_egglog_shape_rules_agree_with_the_symbolic_facts():
    """Typed ops on symbolic inputs: the egglog rules alone recompute every ingested fact (a disagreement would be a
    `shape` conflict that bans a rule during saturation)."""
    from tensat_tf.egraph import export
    r = np.random.RandomState(0)
    w = tf.constant(r.standard_normal((3, 3, 3, 16)).astype(np.float32))
    m = tf.constant(r.standard_normal((400, 10)).astype(np.float32))

    def net(img, seq):
        y = tf.nn.relu(tf.nn.conv2d(tf.pad(img, [[0, 0], [1, 1], [1, 1], [0, 0]]), w, 1, "VALID"))
        y = tf.nn.max_pool2d(y, 2, 2, "VALID")                      # [b, 5, 5, 16]
        flat = tf.matmul(tf.reshape(y, [-1, 400]), m)               # the -1 is b: named
        rows = tf.reshape(y, [-1, 8]) * 2.0                         # 50 b: a multiple of b, named
        back = tf.reshape(rows, [-1, 5, 5, 16])                     # 50 b x 8 / 400: b again
        half = tf.reshape(y, [-1, 800])                             # b / 2: no whole multiple, unknown
        heads = tf.transpose(tf.reshape(seq, [-1, 4, 2]), [1, 0, 2])   # [b*t, 4, 2] of a [b, t, 8]
        return flat + 1.0, back, half, heads, tf.concat([flat, flat], 1)

    gd, item = frozen(net, tf.TensorSpec([None, 10, 10, 3], tf.float32, name="img"),
                      tf.TensorSpec([None, None, 8], tf.float32, name="seq"))
    gd = canonicalize.optimize(gd, item)
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    typed_lets = {ing.lets[name] for name in ing.typed}
    eg.run_program(*[c for c in ing.commands
                     if not ("(set (shape" in str(c) and any(f"(shape {t})" in str(c) for t in typed_lets))])
    language.run_shapes(eg)
    exp = export.export(eg, ing.roots)
    checked, symbolic_facts = 0, 0
    for name, origin in ing.typed.items():
        if origin.spec.outputs != "one":
            continue
        fact = ing.shapes[f"{name}:0"]
        assert exp.shapes.get(exp.lets[ing.lets[name]]) == fact, (name, fact)
        checked += 1
        symbolic_facts += any(d <= -2 for d in fact)
    assert checked >= 8 and symbolic_facts >= 6
    flat = [n.name for n in gd.node if n.op == "Reshape" and ing.shapes[n.name + ":0"][1:] == (400,)]
    b = ing.shapes["img:0"][0]
    assert flat and ing.shapes[flat[0] + ":0"][0] == b <= -2
    by_tail = {ing.shapes[n.name + ":0"][1:]: ing.shapes[n.name + ":0"][0] for n in gd.node if n.op == "Reshape"}
    assert by_tail[(8,)] == S.encode(S.mul(50, S.decode(b))) <= -2       # 50 b, its own code
    assert by_tail[(5, 5, 16)] == b and by_tail[(800,)] == -1


def test_one_symbol_target_needs_no_shape_and_two_share_one():
    # [b, 8] -> [b, 2, 4] (Keras' Reshape layer, a squeeze-excite block): the constant [-1, 2, 4]
    gd, item = frozen(lambda x: tf.reshape(x, tf.stack([tf.shape(x)[0], 2, 4])),
                      tf.TensorSpec([None, 8], tf.float32, name="x"))
    gd = canonicalize.optimize(gd, item)
    stats = {}
    out = shapes.optimize(gd, item, stats)
    assert stats["reshapes_const"] == 1 and not any(n.op in PLUMBING for n in out.node)
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(3, 8))
    np.testing.assert_array_equal(run_graph(gd, item, x)[0].numpy(), run_graph(out, item, x)[0].numpy())
    # [b, t, 4] -> [b, t, 2, 2] twice, from two different Shape ops: one Shape(x) and one slice serve both
    gd, item = frozen(lambda x: tf.reshape(x, tf.concat([tf.shape(x)[:2], [2, 2]], 0)) * 2.0
                      + tf.reshape(tf.nn.relu(x), tf.concat([tf.shape(tf.nn.relu(x))[:2], [2, 2]], 0)),
                      tf.TensorSpec([None, None, 4], tf.float32, name="x"))
    gd = canonicalize.optimize(gd, item)
    stats = {}
    out = shapes.optimize(gd, item, stats)
    ops_ = Counter(n.op for n in out.node)
    assert stats["reshapes_built"] == 2 and ops_["Shape"] == 1 and ops_["StridedSlice"] == 1 and ops_["ConcatV2"] == 1
    x = tf.constant(np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_array_equal(run_graph(gd, item, x)[0].numpy(), run_graph(out, item, x)[0].numpy())


def test_the_emitters_target_computes_multiples_of_a_symbol():
    """shape_values.Builder.target for a rule's reshape (scaled=True): with more than one dim that is not a size or
    a symbol, the first is -1 and the others, multiples of one symbol, are computed from Shape(input); without
    `scaled` (the shapes pass) the target is refused as before."""
    from tensat_tf import shape_values
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.placeholder(tf.float32, [None, None, 4], name="x")
    gd = g.as_graph_def()
    a = S.infer(gd)
    b, t = a.shapes["x:0"][:2]
    dims = [S.mul(b, t), S.mul(3, t), 4]                   # rows b x t (no code), 3 t, 4
    assert shape_values.Builder(gd, a, {"x": tf.float32}).target(dims, tf.int32) is None
    builder = shape_values.Builder(gd, a, {"x": tf.float32}, reuse=False)
    name = builder.target(dims, tf.int32, scaled=True)
    assert name is not None and Counter(n.op for n in builder.new)["Mul"] == 1
    out = tf.compat.v1.GraphDef()
    out.node.extend(list(gd.node) + builder.new)
    g2 = tf.Graph()
    with g2.as_default():
        tf.graph_util.import_graph_def(out, name="")
    with tf.compat.v1.Session(graph=g2) as sess:
        got = sess.run(f"{name}:0", {"x:0": np.zeros((2, 5, 4), np.float32)})
    assert list(got) == [-1, 15, 4]


def test_tf_inferred_is_the_same_with_weights_left_out():
    """tf_inferred imports the graph with its large float constants as Placeholders of the same shape: the shapes
    and dtypes must be what importing the real graph gives (a Reshape whose target is computed from a constant's
    shape, a Range with float bounds, a Pad: the small constants their shape functions read stay constants)."""
    w = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32)     # more than _SHAPE_LIKE elements

    def fn(x):
        y = tf.matmul(x, tf.constant(w))
        y = tf.reshape(y, tf.concat([tf.shape(tf.constant(w))[:1], [-1]], 0))
        r = tf.range(tf.constant(0.0), tf.constant(4.0), tf.constant(1.0))
        return tf.pad(y, [[1, 1], [0, 2]]) * tf.reduce_sum(r) + tf.reduce_sum(tf.constant(w), 0, keepdims=True)[:, :1]
    gd, _ = frozen(fn, tf.TensorSpec([None, 6], tf.float32))
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    want = {f"{op.name}:{k}": (None if t.shape.rank is None else tuple(-1 if d is None else d for d in t.shape.as_list()))
            for op in g.get_operations() for k, t in enumerate(op.outputs)}
    dtypes, got = S.tf_inferred(gd)
    assert got == want and dtypes == {op.name: [t.dtype for t in op.outputs] for op in g.get_operations()}
    assert any(n.op == "Placeholder" and n.name != "x" for n in S._without_weights(gd).node)


def test_weight_arrays_read_from_their_bytes_equal_tf_make_ndarray():
    g = tf.Graph()
    with g.as_default():
        consts = [tf.constant(np.arange(24, dtype=dt).reshape(2, 3, 4)) for dt in (np.float32, np.int64, np.float16)]
        consts += [tf.constant(2.5), tf.constant(["a", "bc"]), tf.constant(np.zeros((3, 3), np.float32))]
    for c in consts:
        t = c.op.node_def.attr["value"].tensor
        a, b = ingest._array(t), tf.make_ndarray(t)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        assert ingest._weight_key(c.op.node_def, a) == ingest._weight_key(c.op.node_def, b)
    keys = {ingest._weight_key(c.op.node_def, ingest._array(c.op.node_def.attr["value"].tensor)) for c in consts}
    assert len(keys) == len(consts)
