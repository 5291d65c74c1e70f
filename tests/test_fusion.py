"""Fusion-aware costs (tensat_tf/cost/fusion.py): the epilogues TF's CPU remapper fuses into a contraction cost their
arithmetic only, exactly the patterns it fuses (checked on TF 2.21 by tensat_tf/cost/fusion_bench.py), and a pass
over a conv + per-channel scale + bias + Relu graph prices the folded result as one fused kernel and verifies."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import run_graph

from tensat_tf.cost import analytic, fusion
from tensat_tf.cost.analytic import CPU, GPU
from tensat_tf.egraph.data import EGraphData, ENode
from tensat_tf.egraph.export import Exported

SAME = ((1, 1, 1, 1), "SAME", (1, 1, 1, 1))
X, W, B = (1, 14, 14, 16), (1, 1, 16, 32), (32,)
Y = (1, 14, 14, 32)


def egraph(nodes, shapes, sorts=None):
    """nodes: (op, class, child classes, payload); shapes: class -> shape."""
    enodes = [ENode(op, c, tuple(ch), 0.0, tuple(p)) for op, c, ch, p in nodes]
    g = EGraphData.build(enodes, [enodes[-1].eclass])
    sorts = sorts or ["Tensor"] * g.num_classes
    return Exported(g, {}, dict(shapes), sorts)


def chain(contraction="Conv2D", bias_op="BiasAdd", bias_shape=B, act="Relu", x=X, w=W, y=Y):
    payload = SAME if contraction != "MatMul" else (0, 0)
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             (contraction, 3, (0, 1), payload), (bias_op, 4, (3, 2), ()), (act, 5, (4,), ())]
    return egraph(nodes, {0: x, 1: w, 2: bias_shape, 3: y, 4: y, 5: y})


def test_conv_bias_relu_costs_only_the_epilogue():
    exp = chain()
    assert fusion.fused_nodes(exp) == {4: "bias", 5: "act"}
    fused, unfused = analytic.costs(exp), analytic.costs(exp, fusion=False)
    assert fused[3] == unfused[3] > 0                          # the convolution itself is unchanged
    for i in (4, 5):
        assert fused[i] < unfused[i] - CPU.overhead_ms("BiasAdd") * 0.99  # no overhead, no memory pass
        assert fused[i] == pytest.approx(np.prod(Y) / (CPU.peak_gflops * 1e6))


def test_bias_semantic_addv2_is_fused_like_a_biasadd():
    """oneDNN's remapper turns Conv2D + AddV2([C] or [1,1,1,C]) into the same _FusedConv2D: both forms cost the same
    but for the hazard's tie-break (fusion.HAZARD_MS, a surcharge where the conv computes the AddV2's operand), which
    the F05 rewrite (AddV2 -> BiasAdd) gains."""
    for shape in ((32,), (1, 1, 1, 32)):
        (add, terms), bias = analytic.priced(chain(bias_op="AddV2", bias_shape=shape)), analytic.priced(chain())
        assert add == bias[0] and terms[4].surcharge == fusion.HAZARD_MS and bias[1][4].surcharge == 0.0
    # a residual add (same shape) and a non-channel broadcast are not biases
    assert fusion.fused_nodes(chain(bias_op="AddV2", bias_shape=Y)) == {}
    assert fusion.fused_nodes(chain(bias_op="AddV2", bias_shape=(1, 14, 1, 32))) == {}
    # MatMul's bias-semantic add needs a rank-1 bias
    mm = dict(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32))
    assert fusion.fused_nodes(chain(bias_op="AddV2", **mm)) == {4: "bias", 5: "act"}
    assert fusion.fused_nodes(chain(bias_op="AddV2", bias_shape=(1, 32), **mm)) == {}


def test_only_the_activations_tf_fuses():
    mm = dict(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32))
    assert fusion.fused_nodes(chain(act="Tanh", **mm)) == {4: "bias", 5: "act"}
    assert fusion.fused_nodes(chain(act="Tanh")) == {4: "bias"}            # Conv2D + BiasAdd + Tanh: Tanh separate
    assert fusion.fused_nodes(chain(act="Sigmoid")) == {4: "bias"}
    assert fusion.fused_nodes(chain(act="ReluSix", contraction="DepthwiseConv2dNative", w=(3, 3, 32, 1),
                                    x=Y)) == {4: "bias", 5: "act"}
    assert fusion.fused_nodes(chain(act="ReluSix")) == {4: "bias", 5: "act"}
    assert fusion.fused_nodes(chain(act="Rsqrt")) == {4: "bias"}
    # a depthwise conv's fused bias costs a fixed extra over its arithmetic (Device.fused_depthwise_us, fusion.py
    # "depthwise"), where that is cheaper than a separate BiasAdd (a large tensor), and its Relu its arithmetic; a
    # MatMul's bias costs the fused kernel's fixed extra (Device.fused_matmul_us) where that is cheaper than the
    # separate op (many rows), its Relu stays separate
    for hw, discounted in ((4, False), (56, True)):
        y = (1, hw, hw, 32)
        dw = dict(contraction="DepthwiseConv2dNative", w=(3, 3, 32, 1), x=y, y=y)
        fused, plain = analytic.costs(chain(**dw)), analytic.costs(chain(**dw), fusion=False)
        if discounted:
            assert CPU.fused_depthwise_us * 1e-3 <= fused[4] < min(plain[4], (CPU.fused_depthwise_us + 1) * 1e-3)
        else:
            assert fused[4] == plain[4]
        assert fused[5] < plain[5] and fused[:4] == plain[:4]
    fused, plain = analytic.costs(chain(**mm)), analytic.costs(chain(**mm), fusion=False)
    assert fused == plain                           # 8 rows: the separate bias is cheaper, and priced so
    terms = analytic.priced(chain(**mm))[1]
    assert terms[4].extra == 0.0 and terms[4].surcharge == pytest.approx(CPU.fused_matmul_us * 1e-3 - plain[4],
                                                                         rel=0.01)
    big = dict(contraction="MatMul", x=(4096, 16), w=(16, 32), y=(4096, 32))
    fused, plain = analytic.costs(chain(**big)), analytic.costs(chain(**big), fusion=False)
    assert CPU.fused_matmul_us * 1e-3 <= fused[4] < plain[4]
    assert fused[:4] + fused[5:] == plain[:4] + plain[5:]
    terms = analytic.priced(chain(**big))[1]
    assert terms[4].surcharge == 0.0 and terms[4].extra == pytest.approx(plain[4] - fused[4])
    assert fusion.fused_nodes(chain(**mm), CPU.fused_contractions) == {}
    # no contraction under the bias: nothing fused
    plain = chain(contraction="AvgPool")
    assert fusion.fused_nodes(plain) == {}


def swish(contraction="Conv2D", bias_op="BiasAdd", w=W, x=X, order=(4, 5)):
    """x -> contraction -> bias (class 4) -> Sigmoid (5) -> Mul of both (6), operands in `order`."""
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             (contraction, 3, (0, 1), SAME), (bias_op, 4, (3, 2), ()), ("Sigmoid", 5, (4,), ()),
             ("Mul", 6, order, ())]
    return egraph(nodes, {0: x, 1: w, 2: B, 3: Y, 4: Y, 5: Y, 6: Y})


def test_swish_joins_a_conv_and_its_biasadd_only():
    for order in ((4, 5), (5, 4)):
        sites = fusion.fusion_sites(swish(order=order))
        assert {i: s.kind for i, s in sites.items()} == {4: "bias", 5: "swish", 6: "swish"}
        assert sites[5] == fusion.Site("swish", 4, frozenset({4}), frozenset({6}))
        assert sites[6] == fusion.Site("swish", 4, frozenset({4}), frozenset({5}))
    # measured: after a bias-semantic AddV2, or a depthwise conv's or MatMul's bias, the swish is a separate kernel,
    # one _MklSwish: its Sigmoid runs inside the Mul ("mklswish")
    assert fusion.fused_nodes(swish(bias_op="AddV2")) == {4: "bias", 5: "mklswish"}
    assert fusion.fused_nodes(swish("DepthwiseConv2dNative", w=(3, 3, 32, 1), x=Y)) == {4: "bias", 5: "mklswish"}
    # priced: the fused swish costs its arithmetic, and each node's fusion allows the other as a reader of class 4
    costs, fused = analytic.priced(swish())
    plain = analytic.costs(swish(), fusion=False)
    assert costs[5] < plain[5] and costs[6] < plain[6]
    assert fused[5].partners == {6} and fused[6].partners == {5} and fused[5].producers == {4}


def test_extraction_picks_the_biasadd_a_swish_fuses_with():
    """Class 4 holds both bias forms (rule F05): equal alone, but only the BiasAdd takes the swish into the conv."""
    from tensat_tf.extract import dag
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             ("Conv2D", 3, (0, 1), SAME), ("AddV2", 4, (3, 2), ()), ("BiasAdd", 4, (3, 2), ()),
             ("Sigmoid", 5, (4,), ()), ("Mul", 6, (4, 5), ())]
    exp = egraph(nodes, {0: X, 1: W, 2: B, 3: Y, 4: Y, 5: Y, 6: Y})
    costs, fused = analytic.priced(exp)
    g = exp.egraph.with_costs(costs, fused)
    base = {0: 0, 1: 1, 2: 2, 3: 3, 5: 6, 6: 7}
    plain = analytic.costs(exp, fusion=False)
    saving = sum(plain[i] - costs[i] for i in (6, 7))
    assert saving > 0 and costs[4] == costs[5] and fused[4].surcharge == fusion.HAZARD_MS   # the same kernel
    assert dag.dag_cost(g, {**base, 4: 5}) == pytest.approx(dag.dag_cost(g, {**base, 4: 4}) - saving - fusion.HAZARD_MS)


def test_a_gelu_on_a_matmul_bias_runs_alone_where_extraction_computes_the_matmuls_class_otherwise():
    """A MatMul's bias is priced as fused (a plain price) but carries a Fused term: where the extracted program
    computes the MatMul's class by another node (F27b's AddV2 of the rewritten MatMul and beta W, in the class of the
    Dense's MatMul), TF runs the Dense's BiasAdd alone and the exact GELU after it unfused; the GELU's price says so
    (measured on ConvNeXt-Tiny: three unfused GELUs, 2.5 % of the model)."""
    from tensat_tf.extract import dag
    base = gelu(x=(64, 16), y=(64, 32))
    nodes = [(n.op, n.eclass, n.children, n.payload) for n in base.egraph.nodes]
    nodes.insert(4, ("AddV2", 3, (12, 2), ()))               # class 3: the MatMul, or z + b
    nodes.insert(0, ("Input", 12, (), ("z",)))
    shapes = dict(base.shapes) | {12: (64, 32)}
    exp = egraph(nodes, shapes)
    costs, fused = analytic.priced(exp)
    g = exp.egraph.with_costs(costs, fused)
    ops = [(n.op, n.eclass) for n in g.nodes]
    by_class = {c: ops.index(("Input" if c in (0, 12) else "Weight", c)) for c in (0, 1, 2, 10, 11, 12)}
    rest = {c: i for i, (op, c) in enumerate(ops) if c >= 4 and op != "Input"}
    gelu_nodes = {i for i, (op, c) in enumerate(ops) if c in (5, 6, 7, 8, 9)}
    with_matmul = {**by_class, **rest, 3: ops.index(("MatMul", 3))}
    with_add = {**with_matmul, 3: ops.index(("AddV2", 3))}
    assert dag.unfused(g, with_matmul) == set()
    assert dag.unfused(g, with_add) >= gelu_nodes | {ops.index(("BiasAdd", 4))}
    extra = sum(g.fused[i].extra for i in gelu_nodes)
    matmul = costs[ops.index(("MatMul", 3))]
    # with the MatMul the bias's surcharge is paid (64 rows: the fused kernel is dearer than the separate BiasAdd)
    surcharge = g.fused[ops.index(("BiasAdd", 4))].surcharge
    assert dag.surcharged(g, with_matmul) == [ops.index(("BiasAdd", 4))] and dag.surcharged(g, with_add) == []
    assert extra > 0 and dag.dag_cost(g, with_add) >= dag.dag_cost(g, with_matmul) - matmul - surcharge + extra


def test_a_bias_semantic_addv2_on_a_contraction_is_a_hazard_the_biasadd_is_not():
    """TF's remapper failed on a depthwise conv's AddV2 bias on MobileNetV3-Large (fusion.py, "Hazard"): every
    contraction's bias-semantic AddV2 costs HAZARD_MS more, so extraction takes the BiasAdd of the same class; a
    residual add (same shape) or an AddV2 on anything else is not a hazard, and a GPU prices none."""
    dw = dict(contraction="DepthwiseConv2dNative", w=(3, 3, 16, 2), act="ReluSix")
    for kw in ({}, dw, dict(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32))):
        assert fusion.remapper_hazards(chain(bias_op="AddV2", **kw)) == {4: ((3, frozenset({3})),)}
        assert fusion.remapper_hazards(chain(**kw)) == {}
    assert fusion.remapper_hazards(chain(bias_op="AddV2", bias_shape=Y)) == {}
    relu_bias = [("Input", 0, (), ("x",)), ("Weight", 2, (), ("b",)), ("Relu", 1, (0,), ()), ("AddV2", 3, (1, 2), ())]
    assert fusion.remapper_hazards(egraph(relu_bias, {0: Y, 1: Y, 2: B, 3: Y})) == {}
    # a depthwise bias this small is priced as a separate op, without a fusion term: the hazard is a plain price
    plain_dw = analytic.priced(chain(**dw)), analytic.priced(chain(bias_op="AddV2", **dw))
    assert 4 not in plain_dw[1][1] and plain_dw[1][0][4] == pytest.approx(plain_dw[0][0][4] + fusion.HAZARD_MS)
    assert analytic.costs(chain(bias_op="AddV2", **dw), device=GPU) == analytic.costs(chain(**dw), device=GPU)


def test_a_hazard_is_charged_only_where_the_contraction_computes_the_addv2s_operand():
    """A batch norm after a Dense without bias: AddV2(Mul(MatMul(x, w), s), b), and rule F03's MatMul(x, w s) in the
    Mul's class. The AddV2 is a bias of that MatMul (its Fused term, a surcharge on 8 rows) and a hazard; while the
    Mul computes its operand the remapper sees no contraction there, and neither is charged: 24 such layers were
    predicted 1.09x faster for F05's BiasAdds and measured 1.00x."""
    from tensat_tf.extract import dag
    mm = (0, 0)
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("s",)), ("Weight", 3, (), ("b",)),
             ("Weight", 7, (), ("ws",)), ("MatMul", 4, (0, 1), mm), ("Mul", 5, (4, 2), ()), ("MatMul", 5, (0, 7), mm),
             ("AddV2", 6, (5, 3), ())]
    exp = egraph(nodes, {0: (8, 16), 1: (16, 32), 7: (16, 32), 2: (32,), 3: (32,), 4: (8, 32), 5: (8, 32), 6: (8, 32)})
    assert fusion.remapper_hazards(exp) == {8: ((5, frozenset({7})),)}
    costs, fused = analytic.priced(exp)
    g = exp.egraph.with_costs(costs, fused)
    layer, folded = {0: 0, 1: 1, 2: 2, 3: 3, 4: 5, 5: 6, 6: 8}, {0: 0, 3: 3, 7: 4, 5: 7, 6: 8}
    assert dag.surcharged(g, layer) == [] and dag.surcharged(g, folded) == [8]
    assert fused[8].surcharge == pytest.approx(CPU.fused_matmul_us * 1e-3 - costs[8] + fusion.HAZARD_MS, rel=0.01)
    assert dag.dag_cost(g, layer) == pytest.approx(sum(costs[i] for i in (5, 6, 8)))
    assert dag.dag_cost(g, layer) < dag.dag_cost(g, folded)      # the layer as it is: MatMul, Mul and a lone AddV2


def gelu(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32), c=(), swap=False, outer=(8, 4), grouping="remapper"):
    """x -> contraction -> BiasAdd (class 4) -> TF's exact GELU as the remapper matches it: Neg (5), Mul by c (6),
    Erfc (7), Mul of h and the Erfc (8), the product with y (9) (`outer`: its operand classes); `swap` writes the
    inner Muls' operands the other way round; grouping "tf.nn.gelu": class 8 is Mul(y, h) and 9 Mul(Erfc, it)."""
    payload = SAME if contraction != "MatMul" else (0, 0)
    o = (lambda a, b: (b, a)) if swap else (lambda a, b: (a, b))
    inner, product = ((o(11, 7), outer) if grouping == "remapper" else (o(4, 11), (7, 8)))
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             (contraction, 3, (0, 1), payload), ("BiasAdd", 4, (3, 2), ()), ("Weight", 10, (), ("c",)),
             ("Weight", 11, (), ("h",)), ("Neg", 5, (4,), ()), ("Mul", 6, o(5, 10), ()), ("Erfc", 7, (6,), ()),
             ("Mul", 8, inner, ()), ("Mul", 9, product, ())]
    shapes = {0: x, 1: w, 2: (y[-1],), 3: y, 10: c, 11: ()} | {k: y for k in range(4, 10)}
    return egraph(nodes, shapes)


def test_exact_gelu_joins_a_matmul_and_its_biasadd():
    for swap, outer in ((False, (8, 4)), (True, (8, 4)), (False, (4, 8))):
        sites = fusion.fusion_sites(gelu(swap=swap, outer=outer))
        assert {i: s.kind for i, s in sites.items() if s.kind == "gelu"} == {i: "gelu" for i in (7, 8, 9, 10, 11)}
        # Neg(y): the product reads y too (a partner); each step fuses only where the next is its only reader
        assert sites[7] == fusion.Site("gelu", 4, frozenset({4}), frozenset({11}), frozenset({8}))
        assert sites[8] == fusion.Site("gelu", 5, frozenset({7}), consumers=frozenset({9}))    # Mul by c
        assert sites[9] == fusion.Site("gelu", 6, frozenset({8}), consumers=frozenset({10}))   # Erfc
        # h * Erfc, which Grappler leaves to the remapper only when named before y (egraph/runtime_names.py)
        assert sites[10] == fusion.Site("gelu", 7, frozenset({9}), consumers=frozenset({11}), precedes=(4, "gelu"))
        assert sites[11] == fusion.Site("gelu", 8, frozenset({10}))                            # (h * Erfc) * y
    # tf.nn.gelu's grouping fuses only where Grappler's arithmetic optimizer regroups it (cost/fusion.py, gelu)
    assert "gelu" not in fusion.fused_nodes(gelu(grouping="tf.nn.gelu")).values()


def test_a_gelu_whose_erfc_has_another_reader_runs_alone_whole():
    """The remapper takes the GELU whole or not at all: a second reader of the Erfc (here the program's output adds
    it in) leaves all five nodes unfused, the steps before the Erfc included."""
    from tensat_tf.extract import dag
    base = gelu(x=(64, 16), y=(64, 32))
    nodes = [(n.op, n.eclass, n.children, n.payload) for n in base.egraph.nodes] + [("AddV2", 12, (9, 7), ())]
    exp = egraph(nodes, dict(base.shapes) | {12: (64, 32)})
    g = exp.egraph.with_costs(*analytic.priced(exp))
    choice = {n.eclass: i for i, n in enumerate(g.nodes)}
    gelu_nodes = {i for i, n in enumerate(g.nodes) if n.eclass in (5, 6, 7, 8, 9)}
    assert dag.unfused(g, choice) >= gelu_nodes
    alone = {i for i, n in enumerate(base.egraph.nodes) if n.eclass in (5, 6, 7, 8, 9)}
    plain = base.egraph.with_costs(*analytic.priced(base))
    assert dag.unfused(plain, {n.eclass: i for i, n in enumerate(plain.nodes)}) & alone == set()
    # a Conv2D's bias, or a non-scalar constant, is not the pattern
    assert "gelu" not in fusion.fused_nodes(gelu("Conv2D", x=X, w=W, y=Y)).values()
    assert "gelu" not in fusion.fused_nodes(gelu(c=(32,))).values()
    # priced on the CPU (Device.fused_activations), where the MatMul's own bias costs the fused kernel's fixed extra
    # (Device.fused_matmul_us); not on a GPU. Here the separate BiasAdd is cheaper: the bias is priced so, and its
    # Fused term charges the difference where the MatMul computes its input (a surcharge) and has no extra; the
    # GELU on it runs alone when the bias does (extract/dag.py unfused)
    costs, fused = analytic.priced(gelu())
    plain = analytic.costs(gelu(), fusion=False)
    assert all(costs[i] < plain[i] for i in (7, 8, 9, 10, 11))
    assert costs[4] == plain[4] < CPU.fused_matmul_us * 1e-3
    assert fused[4].producers == {3} and fused[4].extra == 0.0
    assert costs[4] + fused[4].surcharge == pytest.approx(CPU.fused_matmul_us * 1e-3, rel=0.01)
    assert fused[7].partners == {11}
    assert analytic.costs(gelu(), device=GPU) == analytic.costs(gelu(), device=GPU, fusion=False)


def test_batchnorm_after_conv_but_not_after_depthwise():
    def bn(contraction, w):
        nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",))] + \
                [("Weight", c, (), (f"s{c}",)) for c in (2, 3, 4, 5)] + \
                [(contraction, 6, (0, 1), SAME), ("FusedBatchNormV3", 7, (6, 2, 3, 4, 5), (1e-3, "NHWC", 0)),
                 ("Out", 8, (7,), (0,)), ("Relu", 9, (8,), ())]
        shapes = {0: X, 1: w, 6: Y, 8: Y, 9: Y} | {c: B for c in (2, 3, 4, 5)}
        sorts = ["Tensor"] * 7 + ["TTuple"] + ["Tensor"] * 2
        return egraph(nodes, shapes, sorts)
    assert fusion.fused_nodes(bn("Conv2D", W)) == {7: "bn", 9: "act"}
    assert fusion.fused_nodes(bn("DepthwiseConv2dNative", (1, 1, 16, 2))) == {}
    c, u = analytic.costs(bn("Conv2D", W)), analytic.costs(bn("Conv2D", W), fusion=False)
    assert c[7] < u[7] and c[9] < u[9]


def test_class_that_offers_a_conv_is_enough_and_gpu_devices_do_not_fuse():
    # the conv class also holds an opaque alternative: the discount still applies (documented approximation)
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             ("Op", 3, (0,), ("Foo",)), ("Conv2D", 3, (0, 1), SAME), ("BiasAdd", 4, (3, 2), ())]
    exp = egraph(nodes, {0: X, 1: W, 2: B, 3: Y, 4: Y})
    assert fusion.fused_nodes(exp) == {5: "bias"}
    assert analytic.costs(exp, device=GPU) == analytic.costs(exp, device=GPU, fusion=False)
    # a bias on constants only is folded (0), never "fused"
    folded = egraph([("Weight", 0, (), ("a",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
                     ("Conv2D", 3, (0, 1), SAME), ("BiasAdd", 4, (3, 2), ())], {0: X, 1: W, 2: B, 3: Y, 4: Y})
    assert analytic.costs(folded)[4] == 0.0


def test_pass_prices_the_folded_conv_bias_relu_as_one_kernel_and_verifies(monkeypatch):
    """Conv2D + per-channel Mul + per-channel AddV2 + Relu (a Keras BatchNormalization in inference form): the fold
    puts the add and the Relu right on the conv, which the fusion-aware model prices as one fused kernel, so the
    predicted gain is larger than without fusion; the result computes the same values."""
    from conftest import conv_scale_bias_relu
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    gd, item = conv_scale_bias_relu(8)

    def run(fused):
        if not fused:
            monkeypatch.setattr(analytic, "fusion_terms", lambda exp, c, *a: (c, {}))
        p = TensatPass(EngineOptions(enable_rules=["tf-fold"]))
        out = p.optimize(gd, item)
        monkeypatch.undo()
        return out, p.stats
    out, st = run(True)
    _, st_plain = run(False)
    ex, ex_plain = st.extraction, st_plain.extraction
    assert st.rules_applied.get("F02-conv-mul-fold")
    assert "Mul" not in {n.op for n in out.node}
    assert ex["cost_after"] < ex["cost_before"]
    # the extracted conv -> bias -> Relu is priced as one kernel: the bias and the Relu lose their overheads and
    # memory passes. (cost_before is discounted too: after the fold, the Mul's class also offers a conv, and the
    # discount is per class; see cost/fusion.py.)
    assert ex_plain["cost_after"] - ex["cost_after"] > 2 * CPU.op_overhead_us * 1e-3
    assert {n.op for n in out.node} & {"BiasAdd", "AddV2"}
    data = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype(np.float32)
    results = [run_graph(graph_def, item, [data])[0] for graph_def in (gd, out)]
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-5)


def test_fusion_bench_sees_the_fused_kernels():
    """The facts fusion.py encodes, on this TF build: conv + BiasAdd and conv + AddV2([C]) (+ Relu) run as one
    fused conv kernel, and a Tanh after a conv's bias stays a separate op. Kernel names only: timings are noisy."""
    import os
    from tensat_tf.cost import fusion_bench
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        pytest.skip("oneDNN off: TF runs other kernels (and no bias-semantic Add fusion)")
    res = fusion_bench.run_in_worker()
    k = res["patterns"]
    for name in ("conv+bias", "conv+addv2", "conv+bias+relu"):
        assert [x for x in k[name]["kernels"] if "Conv2D" in x] == ["_MklNativeFusedConv2D"], k[name]
        assert "Relu" not in k[name]["kernels"] and "AddV2" not in k[name]["kernels"]
    assert "Tanh" in k["conv+bias+tanh"]["kernels"]
    assert "Tanh" not in k["matmul+bias+tanh"]["kernels"]


def eigen_sites(exp):
    e = analytic.CPU_EIGEN
    return fusion.fused_nodes(exp, e.fused_contractions, e.fused_activations, e.onednn)


def test_without_onednn_only_the_generic_fusions():
    """CPU_EIGEN, TF without oneDNN's ops (fusion.py "Without oneDNN"): a BiasAdd on a Conv2D or a MatMul and a Relu
    or Relu6 after it fuse; a bias-semantic AddV2, Tanh on a MatMul's bias, a depthwise conv's epilogue and swish do
    not, and are priced as the separate ops they are."""
    mm = dict(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32))
    dw = dict(contraction="DepthwiseConv2dNative", w=(3, 3, 32, 1), x=Y, act="ReluSix")
    assert eigen_sites(chain()) == eigen_sites(chain(act="ReluSix")) == {4: "bias", 5: "act"}
    assert eigen_sites(chain(bias_op="AddV2")) == {}
    assert eigen_sites(chain(**dw)) == {}
    # a MatMul's bias is priced as the fused kernel's fixed extra (matmul_bias_sites), whichever runtime: a BiasAdd
    assert set(fusion.matmul_bias_sites(chain(**mm), onednn=False)) == {4}
    assert set(fusion.matmul_bias_sites(chain(bias_op="AddV2", **mm), onednn=False)) == set()
    assert set(fusion.matmul_bias_sites(chain(bias_op="AddV2", **mm))) == {4}
    assert fusion.fused_nodes(chain(act="Tanh", **mm), frozenset({"MatMul"}), (), onednn=False) == {4: "bias"}
    assert fusion.fused_nodes(chain(act="Tanh", **mm), frozenset({"MatMul"}), ()) == {4: "bias", 5: "act"}
    assert eigen_sites(swish()) == {4: "bias"}
    # the oneDNN profile fuses each of them (the tests above)
    assert fusion.fused_nodes(chain(**dw)) == {4: "bias", 5: "act"}
    e = analytic.CPU_EIGEN
    add, bias = analytic.costs(chain(bias_op="AddV2"), device=e), analytic.costs(chain(), device=e)
    assert add[4] > bias[4] + e.overhead_ms("AddV2")       # only the BiasAdd runs inside the conv (rule F05 pays)
    assert add[5] == analytic.costs(chain(bias_op="AddV2"), device=e, fusion=False)[5]   # so the Relu is separate too
    assert analytic.costs(chain(**dw), device=e) == analytic.costs(chain(**dw), device=e, fusion=False)
    # the hazard's tie-break is oneDNN's (its remapper fuses the AddV2 form)
    assert analytic.with_hazards(chain(bias_op="AddV2"), [0.0] * 6, e) == ([0.0] * 6, {})
    # a grouped Conv2D (rules S092/S093) cannot run there once a BiasAdd is fused into it: never extracted
    grouped = [(1, 8, 8, 88), (1, 1, 44, 44)]
    assert analytic.node_cost("Conv2D", SAME, grouped, (1, 8, 8, 44), device=e) == analytic.UNRUNNABLE_MS
    assert analytic.node_cost("Conv2D", SAME, grouped, (1, 8, 8, 44), device=CPU) < 1e-2
    # GPUs run grouped convs through cuDNN: priced like any conv there
    gpu = analytic.DEVICES["gpu-h100"]
    assert analytic.node_cost("Conv2D", SAME, grouped, (1, 8, 8, 44), device=gpu) < 1e-1
    assert analytic.node_cost("Conv2D", SAME, [(1, 8, 8, 44), (1, 1, 44, 44)], (1, 8, 8, 44), device=e) < 1e-2


@pytest.mark.slow
def test_the_default_profile_follows_the_runtime():
    """'auto' (options.EngineOptions.device) is CPU where TF runs oneDNN's ops and CPU_EIGEN where it does not,
    whichever TF chose or TF_ENABLE_ONEDNN_OPTS forced, in the converting process; a profile named is used as is."""
    import os
    import subprocess
    import sys
    from tensat_tf.cost.devices import FROZEN_WEIGHTS_VAR
    code = "from tensat_tf.cost import get_model; print(get_model(device=None).device.name)"
    base = {k: v for k, v in os.environ.items() if k != FROZEN_WEIGHTS_VAR}
    # with oneDNN's weight cache on (README, "Serving on a CPU with oneDNN"), cpu-frozen; without oneDNN it means
    # nothing
    for flag, frozen, name in (("0", None, "cpu-eigen"), ("1", None, "cpu"), ("1", "1", "cpu-frozen"),
                               ("1", "0", "cpu"), ("0", "1", "cpu-eigen")):
        env = base | {"TF_ENABLE_ONEDNN_OPTS": flag} | ({FROZEN_WEIGHTS_VAR: frozen} if frozen else {})
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=env).stdout.split()[-1]
        assert out == name
    from tensat_tf.cost import get_model
    assert get_model(device="cpu-eigen").device is analytic.CPU_EIGEN
    from tensat_tf import errors
    from tensat_tf.options import EngineOptions
    EngineOptions(device="cpu-eigen").check()
    with pytest.raises(errors.BadInput, match="--device"):
        EngineOptions(device="tpu").check()


def test_fusion_bench_without_onednn_sees_the_generic_fusions_only():
    """The facts CPU_EIGEN encodes, on this TF build with oneDNN's ops off: conv + BiasAdd (+ Relu) and MatMul +
    BiasAdd + Relu run as one Eigen kernel; a bias-semantic AddV2, a depthwise conv's bias and Relu6, and Tanh after
    a MatMul's bias run as separate ops."""
    from tensat_tf.cost import fusion_bench
    k = {name: p["kernels"] for name, p in fusion_bench.run_in_worker(onednn=False)["patterns"].items()}
    for name in ("conv+bias", "conv+bias+relu"):
        assert "_FusedConv2D" in k[name] and "BiasAdd" not in k[name] and "Relu" not in k[name], k[name]
    assert "_FusedMatMul" in k["matmul+bias+relu"] and "Relu" not in k["matmul+bias+relu"]
    assert {"Conv2D", "AddV2"} <= set(k["conv+addv2"]), k["conv+addv2"]
    assert {"DepthwiseConv2dNative", "BiasAdd", "Relu6"} <= set(k["depthwise+bias+relu6"])
    assert "Tanh" in k["matmul+bias+tanh"]


def test_a_matmul_bias_costs_a_fixed_extra_that_pays_only_on_many_rows():
    """cost/fusion.py "MatMul": the fused bias is dearer than a separate BiasAdd on a few rows, cheaper on many. The
    bias is priced as the cheaper of the two, and its Fused term adds the difference where the other one runs."""
    for rows, fused_dearer in ((8, True), (32, True), (4096, False)):
        mm = dict(contraction="MatMul", x=(rows, 64), w=(64, 128), y=(rows, 128), act="Relu")
        (price, terms), separate = analytic.priced(chain(**mm)), analytic.costs(chain(**mm), fusion=False)[4]
        fused = price[4] + terms[4].surcharge if fused_dearer else price[4]
        assert price[4] == min(fused, separate) and (fused > separate) == fused_dearer, (rows, fused, separate)
        assert (terms[4].surcharge > 0) == fused_dearer and (terms[4].extra > 0) != fused_dearer
    # only on a class a MatMul computes: a BiasAdd on a Conv2D's output keeps its own price
    assert set(fusion.matmul_bias_sites(chain())) == set()
    assert set(fusion.matmul_bias_sites(chain(contraction="MatMul", x=(8, 16), w=(16, 32), y=(8, 32)))) == {4}


def hard_swish(contraction="Conv2D", bias_op="BiasAdd", w=W, x=X, three=3.0, sixth=1.0 / 6.0, keras=False):
    """x -> contraction -> bias y (class 4) -> AddV2(3, y) (6) -> Relu6 (7) -> Mul(., 1/6) (9) -> Mul(., y) (10), the
    remapper's form; keras: Keras' spelling relu6(3 + y) * (1/6 * y) instead (9 = Mul(1/6, y), 10 = Mul(7, 9))."""
    nodes = [("Input", 0, (), ("x",)), ("Weight", 1, (), ("w",)), ("Weight", 2, (), ("b",)),
             (contraction, 3, (0, 1), SAME), (bias_op, 4, (3, 2), ()), ("Weight", 5, (), ("three",)),
             ("AddV2", 6, (5, 4), ()), ("ReluSix", 7, (6,), ()), ("Weight", 8, (), ("sixth",))]
    nodes += [("Mul", 9, (8, 4), ()), ("Mul", 10, (7, 9), ())] if keras else \
        [("Mul", 9, (7, 8), ()), ("Mul", 10, (9, 4), ())]
    exp = egraph(nodes, {0: x, 1: w, 2: B, 3: Y, 4: Y, 5: (), 6: Y, 7: Y, 8: (), 9: Y, 10: Y})
    exp.scalars.update({5: three, 8: sixth})
    return exp


def test_a_hard_swish_in_the_remappers_form_joins_a_conv_and_its_biasadd():
    """cost/fusion.py "hardswish": the four nodes are one pattern on a Conv2D's or a depthwise conv's BiasAdd, with
    3 and 1/6 for constants, in the form Grappler leaves fusable (and no other), on oneDNN only."""
    sites = fusion.fusion_sites(hard_swish())
    assert {i: s.kind for i, s in sites.items()} == {4: "bias", 6: "hardswish", 7: "hardswish", 9: "hardswish",
                                                     10: "hardswish"}
    assert sites[6] == fusion.Site("hardswish", 4, frozenset({4}), frozenset({10}), frozenset({7}))
    assert sites[7] == fusion.Site("hardswish", 6, frozenset({6}), frozenset(), frozenset({9}))
    assert sites[9] == fusion.Site("hardswish", 7, frozenset({7}), frozenset(), frozenset({10}))
    assert sites[10] == fusion.Site("hardswish", 9, frozenset({9}))
    dw = fusion.fused_nodes(hard_swish("DepthwiseConv2dNative", w=(3, 3, 32, 1), x=Y))
    assert sorted(k for k, v in dw.items() if v == "hardswish") == [6, 7, 9, 10]
    for other in (hard_swish(keras=True), hard_swish(three=2.0), hard_swish(sixth=0.2), hard_swish(bias_op="AddV2"),
                  hard_swish("MatMul", w=(16, 32), x=(8, 16))):
        assert "hardswish" not in fusion.fused_nodes(other).values()
    assert "hardswish" not in eigen_sites(hard_swish()).values()
    costs, fused = analytic.priced(hard_swish())
    plain = analytic.costs(hard_swish(), fusion=False)
    assert all(costs[i] < plain[i] for i in (6, 7, 9, 10))
    assert fused[6].consumers == {7} and fused[6].partners == {10} and not fused[10].consumers


def test_a_pass_writes_keras_hard_swish_in_the_form_tf_fuses():
    """A conv + bias + Keras' hard swish + depthwise conv + bias + hard swish graph (TF1, as Grappler leaves a Keras
    export): the pass writes each hard swish as Mul(Mul(Relu6(AddV2(3, y)), 1/6), y) on a BiasAdd (rules A07/A08;
    before, extraction folded the 1/6 into the next conv and three ops ran alone), the values stay the same, and
    where TF runs oneDNN's ops its runtime runs each conv, bias and hard swish as one kernel."""
    import tensorflow as tf
    from tensat_tf.cost import get_model
    from tensat_tf.item import GrapplerItem
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    rng = np.random.default_rng(3)
    const = lambda *s: tf.constant(rng.normal(size=s).astype(np.float32))  # noqa: E731

    def hs(y):
        return tf.nn.relu6(tf.add(tf.constant(3.0), y)) * tf.multiply(tf.constant(1.0 / 6.0), y)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 4], name="x")
        h = hs(tf.nn.bias_add(tf.nn.conv2d(x, const(1, 1, 4, 8), 1, "SAME"), const(8)))
        h = hs(tf.nn.bias_add(tf.nn.depthwise_conv2d(h, const(3, 3, 8, 1), [1, 1, 1, 1], "SAME"), const(8)))
        tf.identity(tf.nn.conv2d(h, const(1, 1, 8, 4), 1, "SAME"), name="out")
    gd, item = g.as_graph_def(), GrapplerItem(feeds=("x:0",), fetches=("out:0",))
    # the convs stay convs (F39 off), the forms under test being those TF fuses into a conv
    p = TensatPass(EngineOptions(disable_rules=["F39-conv1x1-as-matmul"]))
    out = p.optimize(gd, item)
    by = {n.name: n for n in out.node}
    src = lambda i: by[i.split(":")[0]]  # noqa: E731
    value = lambda n: float(tf.make_ndarray(n.attr["value"].tensor))  # noqa: E731
    forms = 0
    for n in out.node:
        if n.op != "Mul" or src(n.input[0]).op != "Mul":
            continue
        m, y = src(n.input[0]), src(n.input[1])
        r, c6 = src(m.input[0]), src(m.input[1])
        a = src(r.input[0])
        assert (y.op, r.op, a.op, c6.op) == ("BiasAdd", "Relu6", "AddV2", "Const"), n
        assert src(y.input[0]).op in ("Conv2D", "DepthwiseConv2dNative")
        assert value(c6) == pytest.approx(1 / 6) and {i.split(":")[0] for i in a.input} - {y.name}
        forms += 1
    assert forms == 2, [(n.name, n.op, list(n.input)) for n in out.node]
    data = rng.normal(size=(2, 8, 8, 4)).astype(np.float32)
    want, got = (run_graph(graph_def, item, [data])[0] for graph_def in (gd, out))
    np.testing.assert_allclose(want, got, rtol=1e-4, atol=1e-5)
    if not get_model(device=None).device.onednn:
        return
    tf1 = tf.compat.v1
    with tf.Graph().as_default() as run:
        tf.graph_util.import_graph_def(out, name="")
        cfg = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        with tf1.Session(graph=run, config=cfg) as s:
            md = tf1.RunMetadata()
            s.run("out:0", {"x:0": data}, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                  run_metadata=md)
    kernels = [ns.timeline_label.split(" = ", 1)[1].split("(", 1)[0] for d in md.step_stats.dev_stats
               for ns in d.node_stats if " = " in ns.timeline_label]
    assert not {"Relu6", "AddV2", "Mul"} & set(kernels), kernels


def test_a_swish_no_conv_takes_is_one_mklswish_kernel():
    """cost/fusion.py "mklswish": with oneDNN the Sigmoid of Mul(y, Sigmoid(y)) runs inside the Mul whatever computes
    y and whoever else reads it, priced at the swish's measured arithmetic (cheaper than the Tanh form A03/A04 write
    for Eigen); it runs alone when something else reads the Sigmoid; Eigen has no such kernel."""
    dw = swish("DepthwiseConv2dNative", w=(3, 3, 32, 1), x=Y)
    site = fusion.fusion_sites(dw)[5]
    assert (site.kind, site.reads, site.consumers) == ("mklswish", 4, {6}) and site.partners == {5, 6}
    assert 5 not in eigen_sites(dw)
    costs, fused = analytic.priced(dw)
    plain = analytic.costs(dw, fusion=False)
    n = int(np.prod(Y))
    assert costs[5] == pytest.approx(n * 40.0 / (CPU.peak_gflops * 1e6)) and costs[6] == plain[6]
    assert fused[5].extra == pytest.approx(plain[5] - costs[5]) and fused[5].consumers == {6}
    # the swish (Mul + fused Sigmoid) against h + h tanh(h) (Tanh, Mul, AddV2): the swish is cheaper
    tanh_form = analytic.node_cost("Tanh", None, [Y], Y) + 2 * analytic.node_cost("Mul", None, [Y, Y], Y)
    assert costs[5] + costs[6] < tanh_form
    # a second reader of the Sigmoid: TF runs Sigmoid and Mul apart
    shared = egraph([(n.op, n.eclass, n.children, n.payload) for n in dw.egraph.nodes]
                    + [("Relu", 7, (5,), ()), ("AddV2", 8, (6, 7), ())], {**dw.shapes, 7: Y, 8: Y})
    from tensat_tf.extract import dag
    g = shared.egraph.with_costs(*analytic.priced(shared))
    choice = {c: members[0] for c, members in enumerate(g.classes)}
    assert 6 in dag.reachable_classes(g, choice) and 5 in dag.unfused(g, choice)
