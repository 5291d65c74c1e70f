"""Real Keras 3 exports reach the rules: broadcast weights ([1,1,1,C] after Grappler folds BatchNormalization) are
normalized once at ingest, and Einsum (EinsumDense, MultiHeadAttention) is a typed term with shape rules, emitter,
cost and rules (rules/einsum.rules)."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

from tensat_tf import einsum, rules
from tensat_tf.cost import analytic
from tensat_tf.egraph import emit, export, ingest, language
from tensat_tf.egraph.session import Session
from tensat_tf.item import GrapplerItem
from conftest import run_graph

RNG = np.random.RandomState(0)


def frozen(fn):
    cf = fn.get_concrete_function()
    ffn, gd = convert_to_constants.convert_variables_to_constants_v2_as_graph(cf, lower_control_flow=False)
    return gd, GrapplerItem(tuple(t.name for t in ffn.inputs), tuple(t.name for t in ffn.outputs))


def loaded(gd, item):
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    return ing, eg


def holds(eg, fact):
    return Session(eg).check(fact)


# ------------------------------------------------------------------ equations
def test_equations_canonical_and_typed_subset():
    assert einsum.canonical("BTNH,BSNH->BNTS") == "abcd,aecd->acbe"
    assert einsum.canonical("btd, df -> btf") == "abc,cd->abd"
    assert einsum.parse("abc,cde->abde").spec == (3, 3, 4, 0, 1, 4, 5, 2, 3)      # c is shared: positions 2 and 3
    assert einsum.parse("abcd,aecd->acbe").spec == (4, 4, 4, 0, 2, 1, 5, 0, 4, 2, 6, 3, 7)
    for eq in ("...a,ab->...b", "aa,ab->b", "ab,bc", "ab,bc->ad", "ab->a", "ab,bc,cd->ad", "ab,bc->aab"):
        assert einsum.parse(eq) is None, eq
    e = einsum.parse("abc,cde->abde")
    assert e.output_shape([(2, 3, 4), (4, 5, 6)]) == (2, 3, 5, 6)
    assert e.flops([(2, 3, 4), (4, 5, 6)]) == 2.0 * 2 * 3 * 4 * 5 * 6


def test_every_equation_the_rules_write_has_its_shape_fact():
    """The verifier's and the saturation's e-graphs hold facts for einsum.KNOWN only (plus the ingested graph's): every
    equation a right side writes is there; one that only a pattern names is matched in an ingested graph, which set
    its fact (E18's key-first scores)."""
    text = open(os.path.join(os.path.dirname(rules.__file__), "einsum.rules"), encoding="utf-8").read()
    found = set(re.findall(r'\(Einsum "([^"]+)"', text))
    assert all(einsum.canonical(e) == e for e in found)

    def written(term):
        if isinstance(term, (list, tuple)):
            if term[:1] == ["Einsum"]:
                yield term[1].strip('"')
            for t in term:
                yield from written(t)

    rhs = {e for r in rules.builtin().rules for t in r.targets for e in written(t)}
    assert rhs and rhs <= set(einsum.KNOWN) and rhs <= found
    assert found - set(einsum.KNOWN) == {"abcd,aecd->aceb"}          # E18's pattern alone


def test_einsum_cost_counts_its_flops():
    small = analytic.node_cost("Einsum", ("abc,cde->abde",), [(1, 16, 32), (32, 2, 8)], (1, 16, 2, 8))
    big = analytic.node_cost("Einsum", ("abc,cde->abde",), [(1, 128, 256), (256, 4, 64)], (1, 128, 4, 64))
    mm = analytic.node_cost("MatMul", (0, 0), [(128, 256), (256, 256)], (128, 256))
    assert small >= analytic.CPU.overhead_ms("Einsum") > analytic.CPU.overhead_ms("Op")
    assert big == pytest.approx(mm - analytic.CPU.overhead_ms("MatMul") + analytic.CPU.overhead_ms("Einsum"))


# ------------------------------------------------------------------ shapes, round trip
WQ = tf.constant(RNG.randn(6, 2, 4).astype("f"))
WK = tf.constant(RNG.randn(6, 2, 4).astype("f"))
BQ = tf.constant(RNG.randn(2, 4).astype("f"))
WO = tf.constant(RNG.randn(2, 4, 6).astype("f"))
W2 = tf.constant(RNG.randn(6, 5).astype("f"))


@tf.function(input_signature=[tf.TensorSpec([None, 7, 6], name="x")])
def attention(x):
    q = tf.einsum("abc,cde->abde", x, WQ) + BQ
    k = tf.einsum("abc,cde->abde", x, WK)
    s = tf.einsum("BTNH,BSNH->BNTS", q, k)
    c = tf.einsum("BNTS,BSNH->BTNH", s, k)
    o = tf.einsum("abcd,cde->abe", c, WO)
    return {"o": o, "d": tf.linalg.matmul(o, W2), "m": tf.einsum("ab,bc->ac", o[:, 0, :], W2)}


def test_einsum_shape_rules_agree_with_tf_and_round_trip():
    gd, item = frozen(attention)
    ing = ingest.ingest(gd, item)
    typed = {o.node.op for o in ing.typed.values()}
    assert "Einsum" in typed and "BatchMatMulV2" in typed
    eqs = {o.payload[0] for o in ing.typed.values() if o.node.op == "Einsum"}
    assert {"abcd,aecd->acbe", "abcd,adbe->acbe", "abc,cde->abde", "abcd,cde->abe", "ab,bc->ac"} <= eqs
    # the rules alone (no TF facts for typed nodes) recompute every typed shape
    typed_lets = {ing.lets[name] for name in ing.typed}
    eg = language.new_egraph()
    eg.run_program(*[c for c in ing.commands
                     if not ("(set (shape" in str(c) and any(f"(shape {l})" in str(c) for l in typed_lets))])
    language.run_shapes(eg)
    exp = export.export(eg, ing.roots)
    checked = 0
    for name, origin in ing.typed.items():
        if origin.node.op in ("Einsum", "BatchMatMulV2", "AddV2"):
            assert exp.shapes.get(exp.lets[ing.lets[name]]) == ing.shapes[f"{name}:0"], name
            checked += 1
    assert checked >= 8
    # no rules: every op comes back under its name with its attributes (weights are deduplicated by content)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = export.export(eg, ing.roots)
    out = emit.emit(ing, exp, emit.original_choice(ing, exp))
    by_name = {n.name: n for n in out.node}
    for n in gd.node:
        if n.op != "Const":
            assert dict(by_name[n.name].attr) == dict(n.attr), n.name
    feeds = [RNG.randn(3, 7, 6).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ broadcasting
G4 = tf.constant(RNG.randn(1, 1, 1, 3).astype("f"))
B4 = tf.constant(RNG.randn(1, 1, 1, 3).astype("f"))
G3 = tf.constant(RNG.randn(1, 1, 3).astype("f"))


@tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 3], name="img"), tf.TensorSpec([3], name="v")])
def batchnorm_like(img, v):
    y = G4 * img + B4                  # squeezed: both constants broadcast onto a rank-4 tensor
    z = v - G3                         # not squeezed: v has rank 1, the result rank 3
    return {"y": tf.nn.relu(y), "z": z}


def test_broadcast_weights_are_squeezed_only_where_sound():
    gd, item = frozen(batchnorm_like)
    ing, eg = loaded(gd, item)
    squeezed = {let: ing.weights[ing.terms[let].payload[0]] for let in ing.terms if let.endswith("sq_")}
    shapes = sorted(tuple(tf.make_ndarray(n.attr["value"].tensor).shape) for n in squeezed.values())
    assert shapes == [(3,), (3,)]
    # the op's class holds both forms: e.g. the Mul reads the [3] weight too
    mul = next(name for name, o in ing.typed.items() if o.node.op == "Mul")
    assert any(holds(eg, f"(= {ing.lets[mul]} (Mul {sq} {ing.output_lets[o.node.input[1] + ':0']}))")
               for sq in squeezed for o in [ing.typed[mul]])
    sub = next(name for name, o in ing.typed.items() if o.node.op == "Sub")
    exp = export.export(eg, ing.roots)
    sub_class = exp.lets[ing.lets[sub]]
    assert len(exp.egraph.classes[sub_class]) == 1          # x[3] - c[1,1,3] keeps its one (rank-3) form
    # a choice that takes every squeezed form computes the same values
    choice = emit.original_choice(ing, exp)
    sq_classes = {exp.lets[l] for l in squeezed}
    took = set()
    for c, nodes in enumerate(exp.egraph.classes):
        for i in nodes:
            if set(exp.egraph.nodes[i].children) & sq_classes:
                choice[c] = i           # the AddV2's class also holds BiasAdd(x, [3] weight): ingest's bias form
                took.add(exp.egraph.nodes[i].op)
    assert took == {"Mul", "AddV2", "BiasAdd"}
    out = emit.emit(ing, exp, choice)
    assert sum(n.op == "Const" and n.name.endswith("/squeezed") for n in out.node) == 2
    feeds = [RNG.randn(2, 4, 4, 3).astype("f"), RNG.randn(3).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_one_filter_convs_bias_has_no_scalar_bias_add():
    """Keras adds a Conv2D's bias as a [1, 1, 1, filters] constant; with one filter (an autoencoder's grayscale output,
    a one-class mask) that squeezes to a scalar, and its BiasAdd form was unioned in at ingest: every emit that took
    it failed ("Shape must be rank 1 but is rank 0"), and the tensat pass kept its input. Now the AddV2 keeps no
    BiasAdd form there; the pass runs and computes the original's values."""
    from tensat_tf.passes.tensat import TensatPass
    w = tf.constant(RNG.standard_normal((3, 3, 3, 1)).astype(np.float32))
    b = tf.constant(RNG.standard_normal((1, 1, 1, 1)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 6, 6, 3], name="img")])
    def fn(img):
        return {"y": tf.sigmoid(tf.nn.conv2d(img, w, 1, "SAME") + b)}
    gd, item = frozen(fn)
    ing, eg = loaded(gd, item)
    exp = export.export(eg, ing.roots)
    assert "BiasAdd" not in {n.op for n in exp.egraph.nodes}
    out = TensatPass().optimize(gd, item)
    feeds = [RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)]
    np.testing.assert_allclose(run_graph(out, item, feeds)[0], run_graph(gd, item, feeds)[0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ real Keras exports
@pytest.fixture(scope="module")
def keras_exports(tmp_path_factory):
    """A tiny CNN with BatchNormalization(axis=3) (keras.applications' form: [1,1,1,C] constants after Grappler)
    and a tiny encoder (MultiHeadAttention + LayerNormalization + Dense GELU FFN), random weights, dynamic batch."""
    import keras
    from tensat_tf.zoo._keras import calibrate_batchnorm, randomize_weights
    root = tmp_path_factory.mktemp("keras_exports")
    x = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(x)
    h = keras.layers.ReLU()(keras.layers.BatchNormalization(axis=3, epsilon=1.001e-5)(h))
    h2 = keras.layers.Conv2D(8, 3, padding="same")(keras.layers.BatchNormalization(axis=3)(h))
    h = keras.layers.Concatenate()([h, keras.layers.BatchNormalization(axis=3)(h2)])
    y = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(h))
    cnn = keras.Model(x, y)
    randomize_weights(cnn, 0)
    calibrate_batchnorm(cnn, (12, 12, 3), 0)
    cnn.export(str(root / "cnn"), verbose=False)
    x = keras.Input((None, 16))
    a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
    h = keras.layers.LayerNormalization()(x + a)
    f = keras.layers.Dense(16)(keras.layers.Dense(32, activation="gelu")(h))
    enc = keras.Model(x, keras.layers.LayerNormalization()(h + f))
    randomize_weights(enc, 1)
    enc.export(str(root / "encoder"), verbose=False)
    return {"cnn": str(root / "cnn"), "encoder": str(root / "encoder")}


def tensat_pass(path, families, monkeypatch=None, squeeze=True):
    from tensat_tf.io import load
    from tensat_tf.passes import canonicalize
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    sig = load.load(path).signatures["serving_default"]
    gd = canonicalize.optimize(sig.graph_def, sig.item)
    if not squeeze:
        monkeypatch.setattr(ingest, "BROADCAST_OPS", ())
    p = TensatPass(EngineOptions(enable_rules=families))
    out = p.optimize(gd, sig.item)
    return gd, sig.item, out, p.stats


def test_keras_cnn_batchnorm_folds_only_with_broadcast_normalized(keras_exports, monkeypatch):
    gd, item, _, before = tensat_pass(keras_exports["cnn"], ["tf-fold"], monkeypatch, squeeze=False)
    assert any(n.op == "Const" and len(n.attr["value"].tensor.tensor_shape.dim) == 4
               and n.attr["value"].tensor.tensor_shape.dim[0].size == 1 for n in gd.node)
    assert before.rules_applied == {}
    monkeypatch.undo()
    _, _, out, after = tensat_pass(keras_exports["cnn"], ["tf-fold"])
    assert after.rules_applied.get("F02-conv-mul-fold", 0) >= 1
    assert after.extraction["cost_after"] < after.extraction["cost_before"]
    feeds = [RNG.rand(2, 12, 12, 3).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


DENSE_FORM = ["E10-batch-matmul-as-dense", "E11-einsum-heads-as-dense", "E12-einsum-merge-heads-as-dense"]


def test_keras_encoder_qkv_einsums_merge_and_verify(keras_exports, tmp_path):
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    # the projections as Einsums (without the Dense forms, which take them on this encoder: the next test)
    report = convert(keras_exports["encoder"], str(tmp_path / "out"),
                     Options(engine=EngineOptions(enable_rules=["tf-fold", "merge", "einsum"],
                                                  disable_rules=DENSE_FORM)))
    sig = report["signatures"]["serving_default"]
    assert sig["rules_applied"].get("EINSUM-MERGE-PROJ-BIAS-3") == 3
    assert sig["ops_before"]["Einsum"] - sig["ops_after"]["Einsum"] == 2
    assert sig["ops_after"]["SplitV"] == 1
    assert sig["verification"]["passed"]


def test_keras_encoder_projections_as_dense_layers_verify(keras_exports, tmp_path):
    from tensat_tf.convert import convert
    from tensat_tf.options import EngineOptions, Options
    report = convert(keras_exports["encoder"], str(tmp_path / "out"),
                     Options(engine=EngineOptions(enable_rules=["tf-fold", "merge", "einsum"])))
    sig = report["signatures"]["serving_default"]
    assert sig["rules_applied"].get("E11-einsum-heads-as-dense", 0) >= 1
    assert sig["rules_applied"].get("E12-einsum-merge-heads-as-dense") == 1
    # every projection a MatMul: the Einsums left are the attention's two products
    assert sig["ops_before"]["Einsum"] == 6 and sig["ops_after"]["Einsum"] == 2
    assert sig["verification"]["passed"]


# ------------------------------------------------------------------ two graph inputs' symbols
def _two_inputs(fn, a_shape, b_shape):
    spec = [tf.TensorSpec(a_shape, tf.float32), tf.TensorSpec(b_shape, tf.float32)]
    return frozen(tf.function(fn, input_signature=spec))


@pytest.mark.parametrize("case", ["cross_attention", "concat"])
def test_two_inputs_dims_of_one_label_load_and_optimize(case):
    """A cross attention's query and key have their batch from two graph inputs (two symbols; TF's inference leaves
    the product's batch unknown), as do two inputs' features concatenated. The shape rules read such a dim from one
    operand, which disagreed with ingest's fact: egglog panicked on the shape analysis and the pass kept its input.
    Now the rules derive an output only where the operands agree; the pass runs and the result is the original's."""
    from tensat_tf.passes.tensat import TensatPass
    if case == "cross_attention":
        w = tf.constant(RNG.standard_normal((8, 2, 4)).astype(np.float32))

        def fn(q, m):
            qh, kh = tf.einsum("btd,dnh->btnh", q, w), tf.einsum("bsd,dnh->bsnh", m, w)
            return tf.einsum("btnh,bsnh->bnts", qh, kh) * 0.5
        gd, item = _two_inputs(fn, [None, None, 8], [None, None, 8])
        feeds = [RNG.standard_normal((2, 3, 8)).astype(np.float32), RNG.standard_normal((2, 5, 8)).astype(np.float32)]
    else:
        w = tf.constant(RNG.standard_normal((12, 3)).astype(np.float32))

        def fn(a, b):
            return tf.matmul(tf.concat([a, b], 1), w)
        gd, item = _two_inputs(fn, [None, 5], [None, 7])
        feeds = [RNG.standard_normal((2, 5)).astype(np.float32), RNG.standard_normal((2, 7)).astype(np.float32)]
    loaded(gd, item)                                        # raised "Illegal merge attempted for function shape"
    out = TensatPass().optimize(gd, item)
    want = run_graph(gd, item, feeds)
    got = run_graph(out, item, feeds)
    for x, y in zip(want, got):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ the N-way merges' explosion control
def _projections(k: int):
    """x [batch, 4, 8] read by k Keras-style Q/K/V projections (Einsum by a [8, 2, 4] weight); their sum is out."""
    ws = [tf.constant(RNG.standard_normal((8, 2, 4)).astype(np.float32)) for _ in range(k)]

    def fn(x):
        return tf.math.add_n([tf.einsum("btd,dnh->btnh", x, w) for w in ws])
    return frozen(tf.function(fn, input_signature=[tf.TensorSpec([None, 4, 8], tf.float32)]))


@pytest.mark.parametrize("k", [1, 3, 4, 5])
def test_merges_run_on_an_input_that_a_few_projections_read(k):
    """(FewReaders x) holds where 2 to MERGE_READERS projections of one kind read x: the merge rules' guard. Five
    readers would give the 2- and 3-way merges 20 overlapping alternatives (an encoder-decoder's memory, read by every
    decoder layer's key and value, 84), so they do not run there and the pass keeps the projections apart."""
    from tensat_tf.passes.tensat import TensatPass
    gd, item = _projections(k)
    ing, eg = loaded(gd, item)
    x = next(n.name for n in gd.node if n.op == "Placeholder")
    assert holds(eg, f"(FewReaders {ing.lets[x]})") == (2 <= k <= ingest.MERGE_READERS)
    p = TensatPass()
    out = p.optimize(gd, item)
    matched = {r for it in p.stats.saturation["per_iteration"] for r in it["matches"]}
    assert ("EINSUM-MERGE-PROJ-2" in matched) == (2 <= k <= ingest.MERGE_READERS), matched
    feeds = [RNG.standard_normal((2, 4, 8)).astype(np.float32)]
    np.testing.assert_allclose(run_graph(out, item, feeds)[0], run_graph(gd, item, feeds)[0], rtol=1e-5, atol=1e-5)
