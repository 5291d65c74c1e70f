"""Inception branches on a real Keras 3 export: 1x1 convs (no bias) + BatchNormalization + ReLU reading one input.
After freezing, each branch is Relu(AddV2(Conv2D, [C] bias)); ingest also gives that AddV2 its BiasAdd form
(egraph/ingest.py BIAS_AT_INGEST), so the first iteration's multi-pattern merges see BiasAdds, and
MERGE-CONV-BIAS-RELU-3 (rules/merge.rules) makes the three branches one fused conv kernel and one SplitV."""
import numpy as np
import pytest

from conftest import run_graph


def _export(path, widths, relu=True):
    import keras
    from tensat_tf.zoo._keras import randomize_weights
    x = keras.Input((9, 9, 24))
    branches = []
    for w in widths:
        h = keras.layers.Conv2D(w, 1, use_bias=False)(x)
        h = keras.layers.BatchNormalization(scale=False)(h)
        branches.append(keras.layers.Activation("relu")(h) if relu else h)
    # a 3x3 conv on each branch, so that no rule moves the ReLUs past a concatenation instead
    outs = [keras.layers.Conv2D(8, 3, padding="same")(b) for b in branches]
    model = keras.Model(x, keras.layers.Concatenate()(outs))
    randomize_weights(model, 0)
    model.export(path, verbose=False)
    from tensat_tf.io import load
    from tensat_tf.passes import canonicalize, shapes
    sig = load.load(path).signatures["serving_default"]
    return shapes.optimize(canonicalize.optimize(sig.graph_def, sig.item), sig.item), sig.item


def _count(gd, op):
    return sum(n.op == op for n in gd.node)


@pytest.mark.parametrize("widths", [(32, 16, 48), (32, 16)])
def test_conv_bias_relu_branches_merge_into_one_fused_conv(tmp_path, widths):
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    gd, item = _export(str(tmp_path / "m"), widths)
    assert _count(gd, "Conv2D") == 2 * len(widths) and _count(gd, "BiasAdd") == len(widths)   # the 3x3 convs' biases
    assert _count(gd, "AddV2") == len(widths) and _count(gd, "Relu") == len(widths)
    # the convs stay convs (F39 off), the forms under test being those TF fuses into a conv
    p = TensatPass(EngineOptions(disable_rules=["F39-conv1x1-as-matmul"]))
    out = p.optimize(gd, item)
    assert p.stats.rules_applied.get(f"MERGE-CONV-BIAS-RELU-{len(widths)}") == len(widths)
    # one conv for the branches, its bias and ReLU read it alone (what TF fuses), then the split
    assert _count(out, "Conv2D") == len(widths) + 1 and _count(out, "Relu") == 1 and _count(out, "SplitV") == 1
    by_name = {n.name: n for n in out.node}
    split = next(n for n in out.node if n.op == "SplitV")
    relu = by_name[split.input[0].split(":")[0]]
    assert relu.op == "Relu" and by_name[relu.input[0]].op == "BiasAdd"
    assert by_name[by_name[relu.input[0]].input[0]].op == "Conv2D"
    feeds = [np.random.RandomState(1).standard_normal((2, 9, 9, 24)).astype("f")]
    for a, b in zip(run_graph(gd, item, feeds), run_graph(out, item, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_an_addv2_bias_has_its_biasadd_form_from_ingest(tmp_path):
    from tensat_tf.egraph import export, ingest, language
    gd, item = _export(str(tmp_path / "m"), (32,), relu=False)
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = export.export(eg, ing.roots)
    add = next(name for name, o in ing.typed.items() if o.node.op == "AddV2")
    ops = sorted(exp.egraph.nodes[i].op for i in exp.egraph.classes[exp.lets[ing.lets[add]]])
    assert ops.count("BiasAdd") == 1 and "AddV2" in ops


def test_the_biasadd_form_takes_only_a_rank_1_bias():
    """AddV2(x, w) with x [2, 3, 4] and w [1, 1, 4]: BiasAdd(x, w squeezed to [4]). AddV2(v, w) with both [1, 1, 4]
    weights: only one operand gets a squeezed twin (ingest.BROADCAST_OPS), so only the BiasAdd on that [4] twin, never
    one whose bias is the other, rank-3, weight (TF rejects a bias of rank other than 1). AddV2(xw, vw): vw is no
    weight, so no BiasAdd."""
    import numpy as np
    import tensorflow as tf
    from tensat_tf.egraph import emit, export, ingest, language
    from tensat_tf.item import GrapplerItem
    gd = tf.compat.v1.GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = tf.float32.as_datatype_enum
    x.attr["shape"].shape.CopyFrom(tf.TensorShape([2, 3, 4]).as_proto())
    for name, seed in (("v", 1), ("w", 2)):
        c = gd.node.add(name=name, op="Const")
        c.attr["dtype"].type = tf.float32.as_datatype_enum
        c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.random.RandomState(seed).randn(1, 1, 4).astype("f")))
    for name, inputs in (("vw", ["v", "w"]), ("xw", ["x", "w"]), ("out", ["xw", "vw"])):
        n = gd.node.add(name=name, op="AddV2", input=inputs)
        n.attr["T"].type = tf.float32.as_datatype_enum
    item = GrapplerItem(("x:0",), ("out:0",))
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = export.export(eg, ing.roots)
    biases = [(exp.egraph.nodes[i].eclass, exp.shapes.get(exp.egraph.nodes[i].children[1]))
              for i in range(exp.egraph.num_nodes) if exp.egraph.nodes[i].op == "BiasAdd"]
    assert sorted(b for _, b in biases) == [(4,), (4,)]
    assert {c for c, _ in biases} == {exp.lets[ing.lets["vw"]], exp.lets[ing.lets["xw"]]}
    # the program that takes every BiasAdd computes the same values
    choice = emit.original_choice(ing, exp)
    for i, n in enumerate(exp.egraph.nodes):
        if n.op == "BiasAdd":
            choice[n.eclass] = i
    out = emit.emit(ing, exp, choice)
    feed = np.random.RandomState(3).randn(2, 3, 4).astype("f")
    np.testing.assert_allclose(run_graph(gd, item, [feed])[0], run_graph(out, item, [feed])[0], rtol=1e-6)
