"""Cost models: exact FLOP counts, constant folding, the overhead that makes merges pay, and the measured model.

Hand-made e-graphs (one node per class, shapes given directly) keep the analytic tests instant and independent of
egglog. The measured tests time a handful of ops once in a worker process (module fixture) and check the cache and
that the analytic model ranks ops of very different sizes in the measured order.
"""
from __future__ import annotations

import json

import pytest

import tensorflow as tf

from tensat_tf import cost, verify
from tensat_tf.cost import analytic
from tensat_tf.cost.analytic import CPU, GPU, constant_classes, flops_and_bytes, node_cost
from tensat_tf.egraph.data import EGraphData, ENode
from tensat_tf.egraph.export import Exported
from tensat_tf.options import UNKNOWN_DIM

SAME = ((1, 1, 1, 1), "SAME", (1, 1, 1, 1))


def exported(nodes):
    """nodes: (op, child node indices, payload, shape or None[, sort]); node i is the only node of class i."""
    enodes = [ENode(n[0], i, tuple(n[1]), 0.0, tuple(n[2])) for i, n in enumerate(nodes)]
    shapes = {i: tuple(n[3]) for i, n in enumerate(nodes) if n[3] is not None}
    sorts = [n[4] if len(n) > 4 else "Tensor" for n in nodes]
    return Exported(EGraphData.build(enodes, [len(nodes) - 1]), {}, shapes, sorts)


# ---------------------------------------------------------------------------------------------- FLOPs and bytes
def test_matmul_flops_exact():
    assert flops_and_bytes("MatMul", (0, 0), [(8, 16), (16, 32)], (8, 32)) == (2 * 8 * 32 * 16,
                                                                              4 * (8 * 16 + 16 * 32 + 8 * 32))
    # transposes swap which dims are M, K, N
    assert flops_and_bytes("MatMul", (1, 1), [(16, 8), (32, 16)], None)[0] == 2 * 8 * 32 * 16
    # batch dims broadcast: [3,1,4,5] x [1,2,5,6] -> 3*2 matmuls of 4x5x6
    assert flops_and_bytes("BatchMatMulV2", (0, 0), [(3, 1, 4, 5), (1, 2, 5, 6)], None)[0] == 2 * 6 * 4 * 6 * 5
    assert flops_and_bytes("BatchMatMulV2", (1, 0), [(2, 5, 4), (2, 5, 6)], None)[0] == 2 * 2 * 4 * 6 * 5


def test_conv_flops_exact():
    # stride 2 SAME on 9x9 -> 5x5; 3x3x4 -> 8 channels
    f, b = flops_and_bytes("Conv2D", ((1, 2, 2, 1), "SAME", (1, 1, 1, 1)), [(2, 9, 9, 4), (3, 3, 4, 8)], None)
    assert f == 2 * 2 * 5 * 5 * 3 * 3 * 4 * 8
    assert b == 4 * (2 * 9 * 9 * 4 + 3 * 3 * 4 * 8 + 2 * 5 * 5 * 8)
    # VALID with dilation 2: effective kernel 5 -> 9 - 5 + 1 = 5
    f, _ = flops_and_bytes("Conv2D", ((1, 1, 1, 1), "VALID", (1, 2, 2, 1)), [(1, 9, 9, 4), (3, 3, 4, 8)], None)
    assert f == 2 * 5 * 5 * 3 * 3 * 4 * 8
    # the output shape, when known, is used as is
    assert flops_and_bytes("Conv2D", SAME, [(1, 7, 7, 4), (1, 1, 4, 8)], (1, 7, 7, 8))[0] == 2 * 49 * 4 * 8
    # depthwise: one KHxKW dot product per output element (channel x multiplier)
    f, _ = flops_and_bytes("DepthwiseConv2dNative", SAME, [(1, 8, 8, 6), (3, 3, 6, 2)], None)
    assert f == 2 * 8 * 8 * 12 * 3 * 3


def test_bytes_only_ops_and_metadata_reshape():
    assert flops_and_bytes("Transpose", ((1, 0),), [(32, 64)], (64, 32)) == (0.0, 4 * 2 * 32 * 64)
    assert flops_and_bytes("ConcatV2", (1,), [(4, 8), (4, 8)], (4, 16)) == (0.0, 4 * 2 * 64)
    assert flops_and_bytes("Split", (2, 1), [(4, 16)], (4, 16)) == (0.0, 4 * 2 * 64)
    assert flops_and_bytes("Split", (2, 0), [(4, 16)], (4, 16)) == (0.0, 0.0)      # TF shares the buffer
    assert flops_and_bytes("Reshape", ((64,),), [(4, 16)], (64,)) == (0.0, 0.0)
    assert node_cost("Reshape", ((64,),), [(4, 16)], (64,)) == CPU.overhead_ms("Reshape")
    # a transpose that only moves size-1 dims is a reshape in TF; a real one pays the strided copy
    assert node_cost("Transpose", ((1, 0, 2),), [(1, 8, 16)], (8, 1, 16)) == CPU.overhead_ms("Reshape")
    assert node_cost("Transpose", ((0, 2, 1),), [(1, 8, 16)], (1, 16, 8)) > CPU.overhead_ms("Transpose")


def test_roofline_regimes():
    big = node_cost("MatMul", (0, 0), [(512, 512), (512, 512)], (512, 512))
    assert big == pytest.approx(2 * 512 ** 3 / (CPU.peak_gflops * 1e6) + CPU.overhead_ms("MatMul"))
    relu = node_cost("Relu", (), [(1024, 1024)], (1024, 1024))
    assert relu == pytest.approx(8 * 1024 * 1024 / (CPU.bandwidth_gbs * 1e6) + CPU.overhead_ms("Relu"))
    # transcendentals cost more than relu on the same tensor; relu6 like relu
    assert node_cost("Tanh", (), [(1024, 1024)], (1024, 1024)) > 2 * relu
    assert node_cost("Sigmoid", (), [(1024, 1024)], (1024, 1024)) > 2 * relu
    assert node_cost("ReluSix", (), [(1024, 1024)], (1024, 1024)) == relu
    # pools read the input and write the output (derived from ksize, strides and padding when not given)
    pool = ((1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    assert flops_and_bytes("MaxPool", pool, [(1, 8, 8, 4)], None) == (16 * 4 * 4.0, 4 * (256 + 64))
    assert node_cost("MaxPool", pool, [(1, 112, 112, 64)], None) > node_cost("MaxPool", pool, [(1, 56, 56, 64)], None)
    # broadcasting a per-channel vector is slower than same-shape or scalar operands (same bytes otherwise)
    x = (1, 32, 32, 16)
    assert node_cost("Mul", (), [(16,), x], x) > 2 * node_cost("Mul", (), [x, ()], x)


def test_fused_batch_norm_by_name():
    """FusedBatchNormV3 (inference) costs about what a per-channel BiasAdd over x costs (measured 0.8-1.6x at
    [1,56,56,64] and [4,28,28,128]), more than a Relu, and never less than the BiasAdd it folds into."""
    shapes = [(1, 28, 28, 64), (64,), (64,), (64,), (64,)]
    c = node_cost("FusedBatchNormV3", (), shapes, None)
    relu = node_cost("Relu", (), [(1, 28, 28, 64)], (1, 28, 28, 64))
    bias = node_cost("BiasAdd", (), shapes[:2], (1, 28, 28, 64))
    assert relu < c < 3 * bias
    assert c >= bias


def test_unknown_dims_use_batch_size_for_dim0_and_the_fed_length_elsewhere():
    at8 = node_cost("MatMul", (0, 0), [(-1, 256), (256, 256)], (-1, 256), batch_size=8)
    assert at8 == node_cost("MatMul", (0, 0), [(8, 256), (256, 256)], (8, 256))
    assert analytic.concrete((-1, -1, 3), 4) == (4, UNKNOWN_DIM, 3)
    # the length verification and profiling feed (verify.random_inputs), so a prediction prices what is measured
    from tensat_tf.io.load import TensorSpec
    (fed,) = verify.random_inputs([TensorSpec("ids", "ids:0", tf.int32, (-1, -1))], 4, seed=0).values()
    assert tuple(fed.shape) == analytic.concrete((-1, -1), 4)
    assert node_cost("Relu", (), [(-1, 1000)], (-1, 1000), batch_size=16) > node_cost("Relu", (), [(-1, 1000)],
                                                                                      (-1, 1000), batch_size=1)


# ---------------------------------------------------------------------------------------------- e-graph costs
def test_constant_subgraphs_cost_zero_and_structural_nodes_too():
    g = exported([
        ("Weight", [], (0,), (16, 16)),                  # 0
        ("Weight", [], (1,), (16, 16)),                  # 1
        ("MatMul", [0, 1], (0, 0), (16, 16)),            # 2 constant: weights only
        ("Transpose", [2], ((1, 0),), (16, 16)),         # 3 constant through a chain
        ("Split", [3], (2, 0), None, "TTuple"),          # 4 constant tuple
        ("Out", [4], (0,), (8, 16)),                     # 5 constant: output of a constant split
        ("Input", [], ("x",), (-1, 16)),                 # 6
        ("MatMul", [6, 3], (0, 0), (-1, 16)),            # 7 reads an input: runs
        ("MatMul", [5, 5], (0, 1), (8, 8)),              # 8 reads only constants: folded
        ("TNil", [], (), None, "TList"),                 # 9
        ("TCons", [7, 9], (), None, "TList"),            # 10
        ("Op", [10], ("softmax",), None, "TTuple"),      # 11 opaque
        ("Out", [11], (0,), (-1, 16)),                   # 12
    ])
    assert constant_classes(g.egraph) == {0, 1, 2, 3, 4, 5, 8}
    c = analytic.costs(g, batch_size=4)
    assert len(c) == g.egraph.num_nodes
    assert all(c[i] == 0.0 for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 12))
    assert c[7] == node_cost("MatMul", (0, 0), [(4, 16), (16, 16)], (4, 16))
    assert c[11] == CPU.overhead_ms("Op") > 0


def test_opaque_ops_never_make_a_class_constant():
    g = exported([
        ("Weight", [], (0,), (4,)),
        ("TNil", [], (), None, "TList"),
        ("TCons", [0, 1], (), None, "TList"),
        ("Op", [2], ("random",), None, "TTuple"),
        ("Out", [3], (0,), (4,)),
        ("Relu", [4], (), (4,)),
    ])
    assert constant_classes(g.egraph) == {0}
    assert analytic.costs(g)[5] > 0


def test_missing_shapes_cost_the_overhead_and_never_crash():
    g = exported([
        ("Input", [], ("x",), None),
        ("Relu", [0], (), None),
        ("Input", [], ("y",), (3, 5)),
        ("MatMul", [2, 2], (0, 0), None),       # inner dims do not match: no estimate, still a cost
        ("Conv2D", [2, 2], SAME, None),          # rank 2 for a conv
    ])
    c = analytic.costs(g)
    assert c[1] == CPU.overhead_ms("Relu")
    assert c[3] > 0 and c[4] == CPU.overhead_ms("Conv2D")


@pytest.mark.parametrize("device", [CPU, GPU, analytic.GPU_H100], ids=lambda p: p.name)
def test_merged_matmul_on_concatenated_weights_is_cheaper(device):
    """x·W1 and x·W2 vs x·concat(W1, W2): the concat is weight-only (free) and one op overhead is saved."""
    g = exported([
        ("Input", [], ("x",), (1, 64)),                  # 0
        ("Weight", [], (0,), (64, 64)),                  # 1
        ("Weight", [], (1,), (64, 64)),                  # 2
        ("MatMul", [0, 1], (0, 0), (1, 64)),             # 3
        ("MatMul", [0, 2], (0, 0), (1, 64)),             # 4
        ("ConcatV2", [1, 2], (1,), (64, 128)),           # 5 constant
        ("MatMul", [0, 5], (0, 0), (1, 128)),            # 6 merged
    ])
    c = analytic.costs(g, device=device)
    assert c[5] == 0.0
    separate, merged = c[3] + c[4], c[6]
    assert merged < separate
    assert separate - merged == pytest.approx(device.overhead_ms("MatMul"), rel=0.05)


def test_devices_and_factory():
    assert analytic.device_named("cpu") is CPU and analytic.device_named(GPU) is GPU
    with pytest.raises(ValueError):
        analytic.device_named("tpu")
    with pytest.raises(ValueError):
        cost.get_model("oracle")
    g = exported([("Input", [], ("x",), (-1, 64)), ("Relu", [0], (), (-1, 64))])
    assert cost.get_model("analytic", batch_size=8).costs(g) == analytic.costs(g, 8)
    assert cost.get_model("analytic", device="gpu-h100").costs(g) == analytic.costs(g, 1, analytic.GPU_H100)
    hash(CPU)                                            # devices are frozen and hashable


# ---------------------------------------------------------------------------------------------- measured model
RANKED = [  # (op, inputs, payload, out shape): sizes 10x+ apart, so noise cannot reorder them
    ("Relu", [(64,)], (), (64,)),
    ("AddV2", [(256, 256), (256, 256)], (), (256, 256)),
    ("MatMul", [(256, 256), (256, 256)], (0, 0), (256, 256)),
    ("Conv2D", [(1, 56, 56, 64), (3, 3, 64, 64)], SAME, (1, 56, 56, 64)),
]


def ranked_graph():
    """Each op reads Input leaves (never weights only, which would fold), plus a folded op, a Reshape that runs and
    one that cannot run at these shapes."""
    nodes, op_index = [], []
    for op, ins, payload, out in RANKED:
        kids = []
        for s in ins:
            nodes.append(("Input", [], (f"in{len(nodes)}",), s))
            kids.append(len(nodes) - 1)
        nodes.append((op, kids, payload, out))
        op_index.append(len(nodes) - 1)
    nodes.append(("Weight", [], (0,), (8, 8)))
    nodes.append(("Relu", [len(nodes) - 1], (), (8, 8)))          # folded: must stay 0 and never be timed
    nodes.append(("Reshape", [0], ((8, 8),), (8, 8)))
    nodes.append(("Input", [], ("odd",), (-1, 10)))
    nodes.append(("Reshape", [len(nodes) - 1], ((3, 7),), (3, 7)))   # 10 elements into 21: TF refuses to run it
    return exported(nodes), op_index


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory):
    from tensat_tf.cost.measured import MeasuredCostModel
    path = str(tmp_path_factory.mktemp("costs") / "cache.json")
    g, op_index = ranked_graph()
    model = MeasuredCostModel(cache_path=path)
    return path, g, op_index, model, model.costs(g)


def test_measured_costs_positive_and_cached(measured_run):
    from tensat_tf.cost.measured import MeasuredCostModel
    path, g, op_index, first, costs = measured_run
    assert first.timed == len(RANKED) + 2                       # the four ops and two Reshapes; not the folded Relu
    nodes = g.egraph.nodes
    folded = [i for i, n in enumerate(nodes) if n.op == "Relu" and nodes[n.children[0]].op == "Weight"]
    for i, n in enumerate(nodes):
        assert (costs[i] == 0.0) == (n.op in ("Input", "Weight") or i in folded), (i, n.op)
    with open(path) as f:
        data = json.load(f)
    assert len(data["entries"]) == len(RANKED) + 2 and data["tf_version"]
    second = MeasuredCostModel(cache_path=path)
    assert second.costs(g) == costs                              # read back: identical numbers
    assert second.timed == 0 and second.hits == len(RANKED) + 2


def test_analytic_ranks_ops_like_the_measurements(measured_run):
    _, g, op_index, _, measured = measured_run
    predicted = analytic.costs(g)
    by_measured = sorted(op_index, key=lambda i: measured[i])
    by_analytic = sorted(op_index, key=lambda i: predicted[i])
    assert by_analytic == by_measured == op_index, (
        [(g.egraph.nodes[i].op, measured[i], predicted[i]) for i in op_index])


def test_measured_falls_back_to_analytic_when_tf_cannot_run_the_op(measured_run):
    _, g, _, model, costs = measured_run
    bad = g.egraph.num_nodes - 1
    assert costs[bad] == analytic.costs(g)[bad]
    failed = [e for e in model.entries.values() if e["ms"] is None]
    assert len(failed) == 1 and "error" in failed[0]


def test_an_elementwise_op_with_an_unnamed_operand_is_priced_on_its_output():
    """A product whose operand has no shape in the analysis (a broadcast it does not derive) costs at least what an
    op on output-sized operands costs, not the op's overhead alone (which made such forms look free)."""
    from tensat_tf.cost import analytic
    out = (1, 16, 16, 96)
    unnamed = analytic.node_cost("Mul", (), None, out)
    named = analytic.node_cost("Mul", (), [out, out], out)
    assert unnamed == pytest.approx(named) and unnamed > 10 * analytic.CPU.overhead_ms("Mul")
    assert analytic.node_cost("MatMul", (0, 0), None, (16, 96)) == analytic.CPU.overhead_ms("MatMul")


def test_a_variable_weight_is_reordered_on_every_call_where_onednn_keeps_only_consts():
    """A contraction's constant operand that the output saves as a variable (MIN_VARIABLE_ELEMENTS or more) costs
    its reorder on the cpu profile, per element, a depthwise conv a fixed amount more; nothing on cpu-frozen
    (TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1), for a Const-sized weight, or for an operand computed at run time."""
    from tensat_tf.cost.devices import CPU_FROZEN
    g = exported([
        ("Input", [], ("x",), (1, 4, 4, 512)),                    # 0
        ("Weight", [], (0,), (3, 3, 512, 512)),                   # 1 a variable when saved
        ("Conv2D", [0, 1], SAME, (1, 4, 4, 512)),                 # 2
        ("Weight", [], (1,), (1, 1, 16, 16)),                     # 3 saved as a Const
        ("Input", [], ("y",), (1, 4, 4, 16)),                     # 4
        ("Conv2D", [4, 3], SAME, (1, 4, 4, 16)),                  # 5
        ("Weight", [], (2,), (3, 3, 512, 1)),                     # 6
        ("DepthwiseConv2dNative", [0, 6], SAME, (1, 4, 4, 512)),  # 7
        ("Input", [], ("z",), (64, 512)),                         # 8
        ("MatMul", [8, 8], (0, 1), (64, 64)),                     # 9 both operands computed at run time
        ("Weight", [], (3,), (512, 1024)),                        # 10
        ("MatMul", [8, 10], (0, 0), (64, 1024)),                  # 11
    ])
    new, old = analytic.costs(g, device=CPU), analytic.costs(g, device=CPU_FROZEN)
    per = CPU.variable_weight_ns_per_element * 1e-6
    assert new[2] - old[2] == pytest.approx(3 * 3 * 512 * 512 * per) and new[2] - old[2] > 0.2   # ResNet50V2's size
    assert new[5] == old[5] and new[9] == old[9]
    assert new[7] - old[7] == pytest.approx(3 * 3 * 512 * per + CPU.variable_depthwise_us * 1e-3)
    assert new[11] - old[11] == pytest.approx(512 * 1024 * per)
    # one rate for every contraction: a conv and the matmul that F29 makes of it pay the same; so does a merge
    assert CPU.variable_weight_ms("Conv2D", 4096, 1024) == CPU.variable_weight_ms("BatchMatMulV2", 4096, 1024)
    assert 2 * CPU.variable_weight_ms("Conv2D", 4096, 1024) == pytest.approx(
        CPU.variable_weight_ms("Conv2D", 8192, 1024))
    assert analytic.CPU_EIGEN.variable_weight_ms("Conv2D", 10 ** 6, 1024) == 0.0
    # --min_variable_elements reaches the price: above every weight's size, all are Consts, reordered once
    from tensat_tf.cost import get_model
    assert get_model(device=CPU, min_variable_elements=2 ** 40).costs(g) == old
    mid = get_model(device=CPU, min_variable_elements=512 * 1024).costs(g)
    assert mid[2] == new[2] and mid[11] == new[11] and mid[7] == old[7]


def test_a_matmul_of_a_few_rows_on_weights_streamed_from_memory_is_slower_than_a_conv():
    """oneDNN's MatMul of 2-16 rows by a variable weight read from memory measured about 0.04 ns per element slower
    than a 1x1 conv of as many pixels on it (Device.streamed_matmul_*), where weights that stay in the L3 cache ran
    faster as MatMuls: whether they stay is the model's whole set of variables against the cache. Priced so, rule F39
    keeps ResNet50V2's (94 MB) 1x1 convs on 2x2 and 4x4 images. One row (a gemv), 32 rows or more, a weight under
    256 Ki elements, frozen weights: no such price. Same FLOPs and bytes otherwise, so the roofline prices the two
    alike."""
    import dataclasses
    from tensat_tf.cost.devices import CPU_FROZEN

    def matmul_over_conv(rows, k=1024, n=2048, transpose_a=0, device=CPU, others=0):
        """MatMul minus 1x1 conv, each in a program that holds `others` more weights of 2 Mi elements."""
        more = [("Weight", [], (9 + i,), (1024, 2048)) for i in range(others)]
        x = ("Input", [], ("x",), (k, rows) if transpose_a else (rows, k))
        mm = [x, ("Weight", [], (0,), (k, n)), ("MatMul", [0, 1], (transpose_a, 0), (rows, n))] + more
        conv = [("Input", [], ("y",), (1, 1, rows, k)), ("Weight", [], (0,), (1, 1, k, n)),
                ("Conv2D", [0, 1], SAME, (1, 1, rows, n))] + more
        return analytic.costs(exported(mm), device=device)[2] - analytic.costs(exported(conv), device=device)[2]

    fixed = CPU.overhead_ms("MatMul") - CPU.overhead_ms("Conv2D")
    streamed = 1024 * 2048 * CPU.streamed_matmul_ns_per_element * 1e-6
    assert streamed > 0.05                                      # 2 Mi elements: 84 us, against 5 us of fixed costs
    assert matmul_over_conv(4) == pytest.approx(fixed)          # 8 MB of weights in all: they stay in the cache
    for rows in (2, 4, 16):                                     # 40 MB in all: streamed
        assert matmul_over_conv(rows, others=4) == pytest.approx(fixed + streamed)
        assert matmul_over_conv(rows, transpose_a=1, others=4) == pytest.approx(fixed + streamed)
    for rows in (1, 32, 64):
        assert matmul_over_conv(rows, others=4) == pytest.approx(fixed)
    assert matmul_over_conv(4, 512, 512, others=4) == pytest.approx(fixed + streamed / 8)
    assert matmul_over_conv(4, 512, 256, others=4) == pytest.approx(fixed)     # under streamed_matmul_min_elements
    assert matmul_over_conv(4, others=4, device=CPU_FROZEN) == pytest.approx(fixed)  # reordered once, as Consts
    small_cache = dataclasses.replace(CPU, weight_cache_bytes=4 << 20)
    assert matmul_over_conv(4, device=small_cache) == pytest.approx(fixed + streamed)
    # --min_variable_elements above every weight: all Consts, none reordered or streamed
    from tensat_tf.cost import get_model
    g = exported([("Input", [], ("x",), (4, 1024)), ("Weight", [], (0,), (1024, 2048)),
                  ("MatMul", [0, 1], (0, 0), (4, 2048))])
    assert not analytic.weights_streamed(g, small_cache, min_variable_elements=2 ** 40)
    assert analytic.weights_streamed(g, small_cache) and not analytic.weights_streamed(g, CPU)
    assert get_model(device=small_cache, min_variable_elements=2 ** 40).costs(g) == analytic.costs(g, device=CPU_FROZEN)


def test_an_outer_product_broadcast_costs_what_a_row_broadcast_does():
    """Both operands broadcast ([1,1,C] x [1,T,1], a layer norm's gamma times its row statistic): it reads almost
    nothing but runs as slowly per output element as a broadcast of one output-sized operand (measured 31.4 us at
    [1,128,768] against 24.0 for a row vector and 10.9 for same-shape operands, one thread)."""
    from tensat_tf.cost import analytic
    out = (1, 128, 768)
    outer = analytic.node_cost("Mul", (), [(1, 1, 768), (1, 128, 1)], out)
    row = analytic.node_cost("Mul", (), [out, (1, 128, 1)], out)
    same = analytic.node_cost("Mul", (), [out, out], out)
    assert outer == pytest.approx(row, rel=0.02) and outer > 1.5 * same
