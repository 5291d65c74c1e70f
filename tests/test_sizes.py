"""Sizes for pricing (tensat_tf/cost/sizes.py): the rows of a Dense on a rank-4 input (flattened to [-1, C], a product
of the batch symbol and H x W that the e-graph's shapes hold as -1) are priced at batch x H x W, also on the classes
rewrites make."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from tensat_tf import symbolic as S
from tensat_tf.cost import analytic, sizes
from tensat_tf.egraph import export, ingest, language
from tensat_tf.egraph.data import EGraphData, ENode
from tensat_tf.egraph.export import Exported
from tensat_tf.item import GrapplerItem
from tensat_tf.options import UNKNOWN_DIM


def _dense_on_rank4():
    """Keras' Dense on [N, 8, 8, 16] as TF writes it (tensordot: reshape to [N*64, 16], MatMul, reshape back), the
    input itself the AddN of two tensors (Grappler's form of Keras' add chains)."""
    w = tf.constant(np.random.RandomState(0).standard_normal((16, 32)).astype(np.float32))

    def fn(x, y):
        h = tf.math.add_n([x, y])
        rows = tf.reshape(h, tf.stack([tf.reduce_prod(tf.shape(h)[:3]), 16]))
        return tf.reshape(tf.matmul(rows, w), tf.concat([tf.shape(h)[:3], [32]], 0))
    spec = tf.TensorSpec([None, 8, 8, 16], tf.float32)
    cf = tf.function(fn).get_concrete_function(spec, spec)
    ff = convert_variables_to_constants_v2(cf)
    return ff.graph.as_graph_def(), GrapplerItem(tuple(t.name for t in ff.inputs), tuple(t.name for t in ff.outputs))


def test_addn_keeps_the_batch_symbol():
    gd, item = _dense_on_rank4()
    a = S.infer(gd)
    addn = [n.name for n in gd.node if n.op == "AddN"][0]
    b = a.shapes[item.feeds[0]][0]
    assert isinstance(b, S.Sym) and a.shapes[addn + ":0"] == (b, 8, 8, 16)
    mm = [n.name for n in gd.node if n.op == "MatMul"][0]
    assert a.shapes[mm + ":0"] == (S.mul(64, b), 32)


def test_a_flattened_dense_is_priced_at_batch_times_rows():
    gd, item = _dense_on_rank4()
    ing = ingest.ingest(gd, item)
    eg = language.new_egraph()
    ingest.load(eg, ing)
    exp = export.export(eg, ing.roots)
    (i,) = [k for k, n in enumerate(exp.egraph.nodes) if n.op == "MatMul"]
    node = exp.egraph.nodes[i]
    b = ing.sizes[f"{item.feeds[0]}"][0] if f"{item.feeds[0]}" in ing.sizes else ing.sizes[f"{item.feeds[0]}:0"][0]
    # what the e-graph itself knows: 64 x the batch (H and W are static), a code of its own
    assert exp.shapes[node.eclass] == (S.encode(S.mul(64, b)), 32) and exp.shapes[node.eclass][0] <= -2
    before = analytic.node_shapes(exp, i, 4)
    assert before[1] == (4, 32)                     # without the batch's symbols, the fallback: one row per batch
    sizes.attach(exp, ing.sizes, ing.output_lets, ing.batch_bases)
    for batch in (1, 4):
        ins, out = analytic.node_shapes(exp, i, batch)
        assert out == (64 * batch, 32) and ins[0] == (64 * batch, 16)
        assert analytic.costs(exp, batch)[i] == pytest.approx(
            analytic.node_cost("MatMul", node.payload, [(64 * batch, 16), (16, 32)], (64 * batch, 32)))


def test_new_classes_take_sizes_from_their_inputs():
    """Classes 0 (input [N, 8, 8, 16]), 1 = Reshape to [-1, 16] (ingested: size 64 N), 2 = weight, 3 = a MatMul a rule
    made (no size of its own), 4 = its BiasAdd, 5 = a Reshape of it to [-1, 8]."""
    n = S.Sym(1, (1,))
    nodes = [ENode("Input", 0, (), 0.0, ("x",)), ENode("Reshape", 1, (0,), 0.0, ((-1, 16),)),
             ENode("Weight", 2, (), 0.0, (0,)), ENode("MatMul", 3, (1, 2), 0.0, (0, 0)),
             ENode("BiasAdd", 4, (3, 2), 0.0, ()), ENode("Reshape", 5, (4,), 0.0, ((-1, 8),))]
    g = EGraphData.build(nodes, [5])
    exp = Exported(g, {"x": 0, "r": 1}, {0: (-2, 8, 8, 16), 1: (-1, 16), 2: (16, 32), 3: (-1, 32), 4: (-1, 32),
                                         5: (-1, 8)}, ["Tensor"] * 6)
    sizes.attach(exp, {"x:0": (n, 8, 8, 16), "r:0": (S.mul(64, n), 16)}, {"x:0": "x", "r:0": "r"}, frozenset({1}))
    assert exp.sizes[3] == (S.mul(64, n), 32) and exp.sizes[4] == exp.sizes[3]
    assert exp.sizes[5] == (S.mul(256, n), 8)
    assert analytic.concrete(exp.shapes[5], 2, exp.sizes[5], exp.batch_bases) == (512, 8)


def test_evaluate_symbols():
    b, t = S.Sym(1, (1,)), S.Sym(1, (2,))
    assert sizes.evaluate(S.mul(b, t), 4, frozenset({1})) == 4 * UNKNOWN_DIM
    assert sizes.evaluate(S.mul(3, b), 2, frozenset({1})) == 6
    assert sizes.evaluate(7, 2, frozenset()) == 7 and sizes.evaluate(None, 2, frozenset()) is None
    assert sizes.evaluate(-1, 2, frozenset()) is None


def test_a_reshape_of_a_new_symbolic_class_is_sized():
    """Classes 0 (input [b, s, 8]), 1 = a product a rule made on it (shape [b, s, 8] with the e-graph's symbols, no
    size of its own), 2 = a Reshape of it to [-1, 8]: rows b x s (was one row: C09's MatMul looked 6x cheaper)."""
    b, s = S.Sym(1, (1,)), S.Sym(1, (2,))
    nodes = [ENode("Input", 0, (), 0.0, ("x",)), ENode("Weight", 3, (), 0.0, (0,)),
             ENode("Mul", 1, (0, 3), 0.0, ()), ENode("Reshape", 2, (1,), 0.0, ((-1, 8),))]
    g = EGraphData.build(nodes, [2])
    exp = Exported(g, {"x": 0}, {0: (-2, -3, 8), 1: (-2, -3, 8), 2: (-1, 8), 3: ()}, ["Tensor"] * 4)
    sizes.attach(exp, {"x:0": (b, s, 8)}, {"x:0": "x"}, frozenset({1}))
    assert exp.sizes[2] == (S.mul(b, s), 8)
    assert analytic.concrete(exp.shapes[2], 2, exp.sizes[2], exp.batch_bases) == (2 * UNKNOWN_DIM, 8)
    # a code is its symbol whether or not an ingested tensor names it (ops.symbol_code: -4 is input dim 3)
    exp2 = Exported(g, {"x": 0}, {0: (-2, -4, 8), 1: (-2, -4, 8), 2: (-1, 8), 3: ()}, ["Tensor"] * 4)
    sizes.attach(exp2, {"x:0": (b, None, 8)}, {"x:0": "x"}, frozenset({1}))
    assert exp2.sizes[2] == (S.mul(b, S.Sym(1, (3,))), 8)
    # an unknown dim (-1) stays unknown
    exp3 = Exported(g, {"x": 0}, {0: (-2, -1, 8), 1: (-2, -1, 8), 2: (-1, 8), 3: ()}, ["Tensor"] * 4)
    sizes.attach(exp3, {"x:0": (b, None, 8)}, {"x:0": "x"}, frozenset({1}))
    assert exp3.sizes.get(2, (None,))[0] is None


def test_a_broadcast_product_takes_the_dims_that_are_not_one():
    """Classes 0 (x [b, 4, 4, 8]), 1 (a row statistic [b, 4, 4, 1]), 2 = a product a rule made, with both operand
    orders in its class (the one with the statistic first used to size the product [b, 4, 4, 1]), 3 = its [-1, 8]
    reshape: rows b x 16."""
    b = S.Sym(1, (1,))
    nodes = [ENode("Input", 0, (), 0.0, ("x",)), ENode("Input", 1, (), 0.0, ("r",)),
             ENode("Mul", 2, (1, 0), 0.0, ()), ENode("Mul", 2, (0, 1), 0.0, ()),
             ENode("Reshape", 3, (2,), 0.0, ((-1, 8),))]
    g = EGraphData.build(nodes, [3])
    exp = Exported(g, {"x": 0, "r": 1}, {0: (-1, 4, 4, 8), 1: (-1, 4, 4, 1), 2: (-1, 4, 4, 8), 3: (-1, 8)},
                   ["Tensor"] * 4)
    sizes.attach(exp, {"x:0": (b, 4, 4, 8), "r:0": (b, 4, 4, 1)}, {"x:0": "x", "r:0": "r"}, frozenset({1}))
    assert exp.sizes[2] == (b, 4, 4, 8)
    assert exp.sizes[3] == (S.mul(16, b), 8)


def test_a_broadcast_the_shape_analysis_leaves_out_gets_its_shape_and_a_full_price():
    """A product of a layer norm's gamma [1, 1, C] and its row statistic [b, t, 1] (what rule S042 makes) is a full
    [b, t, C]: the e-graph's analysis derives no shape for it, and unshaped it was priced as one op's fixed cost,
    which made that form look cheaper than the centred layer norm. An undecided dim (an unknown -1 against a size)
    stays unshaped; so does a class that is not a tensor."""
    nodes = [ENode("Weight", 0, (), 0.0, (0,)), ENode("Input", 1, (), 0.0, ("m",)),
             ENode("Mul", 2, (0, 1), 0.0, ()), ENode("Neg", 3, (2,), 0.0, ()),
             ENode("Input", 4, (), 0.0, ("u",)), ENode("AddV2", 5, (4, 0), 0.0, ()),
             ENode("AddV2", 6, (0, 2), 0.0, ())]
    g = EGraphData.build(nodes, [3, 5, 6])
    shapes = {0: (1, 1, 768), 1: (-2, -3, 1), 4: (-2, -1)}
    exp = Exported(g, {}, dict(shapes), ["Tensor"] * 7)
    unshaped = analytic.costs(exp, device=analytic.CPU, unknown_dim=128)
    sizes.complete_shapes(exp)
    assert exp.shapes[2] == (-2, -3, 768) and exp.shapes[3] == (-2, -3, 768) and exp.shapes[6] == (-2, -3, 768)
    assert 5 not in exp.shapes                       # -1 against 768: undecided
    priced = analytic.costs(exp, device=analytic.CPU, unknown_dim=128)
    full = analytic.node_cost("Mul", (), [(1, 1, 768), (1, 128, 1)], (1, 128, 768), 1, analytic.CPU)
    assert priced[2] == pytest.approx(full) and priced[2] > 10 * unshaped[2]
    assert sizes._broadcast((4, 1), (3, 1, 5)) == (3, 4, 5) and sizes._broadcast((2, 3), (3, 3)) is None
