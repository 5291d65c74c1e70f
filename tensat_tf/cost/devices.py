"""The devices the analytic cost model prices for (cost/analytic.py): each one's constants, measured, and which
of TF's fused kernels it runs (cost/fusion.py). 'auto' picks the CPU profile of the TF runtime in this process."""
from __future__ import annotations

import dataclasses
import os

from tensat_tf import ops
from tensat_tf.cost.fusion import FUSED_ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class Device:
    """Constants of one device class. Only ratios matter for ranking; absolute values make reports readable.

    op_overhead_us is the fixed cost of one op (executor dispatch, output allocation, kernel setup);
    overhead_us_by_term overrides it for ops whose fixed cost differs a lot: vendor-library kernels (oneDNN / cuDNN
    primitive lookup for convolutions and pools) cost more, a metadata-only Reshape less; a term without an entry of
    its own takes the entry of the TF op it runs (ReshapeT and ReshapeS are Reshapes). flops_per_element_by_term
    gives the FLOP equivalent of one element of ops that are compute-bound although elementwise (tanh, sigmoid);
    other elementwise ops count 1. strided_copy_efficiency is the fraction of bandwidth_gbs a Transpose reaches;
    broadcast_efficiency the fraction a binary elementwise op reaches when it broadcasts a non-scalar operand (a
    per-channel scale or bias), which is what folding batch norms into convolutions removes. call_overhead_us is the
    fixed cost of one call of a served signature, whatever its graph: it ranks nothing, but a predicted speed-up
    (predicted_gain) is a ratio of whole calls.
    The per-term tables are tuples of (term, value) pairs so that a device stays hashable.
    """
    name: str
    peak_gflops: float
    bandwidth_gbs: float
    op_overhead_us: float
    overhead_us_by_term: tuple[tuple[str, float], ...] = ()
    flops_per_element_by_term: tuple[tuple[str, float], ...] = (("Tanh", 20.0), ("Sigmoid", 20.0))
    strided_copy_efficiency: float = 1.0
    broadcast_efficiency: float = 1.0
    # what a binary elementwise op pays per repetition of a per-channel vector it broadcasts along the last dim
    # (Eigen's broadcast runs an inner loop per row of C elements), as a floor under its memory time: the price of
    # a narrow last dim, an image's 3 channels
    broadcast_row_ns: float = 0.0
    # contractions whose bias / batch-norm / activation epilogue the runtime fuses AND runs faster (cost/fusion.py)
    fused_contractions: tuple[str, ...] = ()
    # (activation, contractions whose BiasAdd it joins in one kernel) pairs: cost/fusion.py FUSED_ACTIVATIONS
    fused_activations: tuple[tuple[str, tuple[str, ...]], ...] = ()
    call_overhead_us: float = 0.0
    # what a bias on a MatMul costs: the runtime always fuses it (_FusedMatMul), and that kernel takes this much more
    # than the plain MatMul, whatever the size (0: the bias is priced as a separate op)
    fused_matmul_us: float = 0.0
    # what a depthwise conv's fused bias costs more than its arithmetic (the activation after it costs only that),
    # whatever the size; used where "DepthwiseConv2dNative" is in fused_contractions
    fused_depthwise_us: float = 0.0
    # FLOP-equivalents per element of an op run as a fused epilogue (fused_cost), where it differs from 1
    fused_flops_per_element_by_term: tuple[tuple[str, float], ...] = ()
    # TF runs oneDNN's ops (cost/fusion.py, "Without oneDNN"): the remapper's oneDNN-only fusions happen (a
    # bias-semantic AddV2, Tanh / Sigmoid on a MatMul's bias, swish, GELU, a depthwise conv's epilogue)
    onednn: bool = False
    # a depthwise conv's time per output element on top of its arithmetic, whatever the filter size (Eigen's kernel)
    depthwise_ns_per_output: float = 0.0
    # the runtime runs a grouped Conv2D (input channels a multiple of the filter's): oneDNN's CPU kernels and cuDNN
    # do; Eigen's CPU kernels do not (cost/analytic.py UNRUNNABLE_MS)
    grouped_conv: bool = True
    # What a contraction (cost/analytic.py WEIGHTED) pays on every call to reorder a constant operand that the
    # output keeps as a variable (options.py MIN_VARIABLE_ELEMENTS and more elements), where oneDNN's kernels cache
    # only a Const's reordered copy (see CPU below): ns per element, and a depthwise conv's fixed cost on top.
    variable_weight_ns_per_element: float = 0.0
    variable_depthwise_us: float = 0.0
    # What a MatMul of 2 to streamed_matmul_rows rows pays per element more than that for a variable operand of
    # streamed_matmul_min_elements or more read from memory: in a model whose variables outgrow weight_cache_bytes
    # (the last-level cache), every call streams them from memory (see CPU below)
    streamed_matmul_rows: int = 0
    streamed_matmul_min_elements: int = 0
    streamed_matmul_ns_per_element: float = 0.0
    weight_cache_bytes: int = 0

    def overhead_ms(self, term: str) -> float:
        table = dict(self.overhead_us_by_term)
        spec = ops.BY_TERM.get(term)
        return table.get(term, table.get(spec.tf_op if spec else term, self.op_overhead_us)) * 1e-3

    def flops_per_element(self, term: str) -> float:
        return dict(self.flops_per_element_by_term).get(term, 1.0)

    def fused_flops_per_element(self, term: str) -> float:
        return dict(self.fused_flops_per_element_by_term).get(term, self.flops_per_element(term))

    def variable_weight_ms(self, term: str, elements: int, min_variable_elements: int, streamed_rows: int = 0) -> float:
        """The per-call reorder of a contraction's constant operand of `elements` elements (0 when it stays a
        Const: under min_variable_elements); streamed_rows: a MatMul's rows where that operand is its second and
        streamed from memory (weight_cache_bytes), else 0."""
        if elements < min_variable_elements:
            return 0.0
        fixed = self.variable_depthwise_us if term == "DepthwiseConv2dNative" else 0.0
        per_element = self.variable_weight_ns_per_element
        if term == "MatMul" and 2 <= streamed_rows <= self.streamed_matmul_rows \
                and elements >= self.streamed_matmul_min_elements:
            per_element += self.streamed_matmul_ns_per_element
        return (elements * per_element + fixed * 1e3) * 1e-6


# CPU: the 2-vCPU AMD EPYC (Zen 4, AVX-512, 2 MB L2 per core, 32 MB L3) KVM test VM, TF 2.21 with oneDNN on, ONE
# intra-op and ONE inter-op thread (how every benchmark of the project runs: timings with 2 threads on this VM were
# bimodal, one thread is stable after warm-up). Fitted to tensat_tf.cost.measured.time_in_worker (R copies of
# the op in one Session, Grappler off, fastest of 5 rounds x 2 passes of time(R copies) - time(inputs only),
# divided by R), float32, on the VM while other jobs shared it:
#   peak_gflops 110: MatMul 512x768x768 114 GFLOP/s, 256x1024x1024 104, Mx256x256 101-113 for M = 4..256,
#     Conv2D 1x56x56x64 3x3->64 116, BatchMatMulV2 12x128x64x64 108 (earlier chain benchmarks: 105-112). Small inner
#     sizes do worse (Mx64x64: 65-100), so matmuls under ~1 MFLOP are under-estimated by up to 2x.
#   bandwidth_gbs 90: Relu / AddV2 / Mul on 64k-1M floats (0.5-12 MB per op, cache-resident) move 85-97 GB/s.
#     Working sets beyond the 32 MB L3 drop to 34-47 GB/s (AddV2 / Relu on 4M floats); batch-1 activations of the
#     zoo models stay under that, so one number is kept.
#   op_overhead_us 0.3: Relu, AddV2, Mul, BiasAdd, Tanh, ConcatV2, Split, MatMul on <= 128 floats take 0.2-0.6 us.
#   overhead_us_by_term: the same tiny-input measurement where an op's fixed cost stands out: Reshape 0.1 (no
#     kernel work: TF forwards the buffer), MatMul 0.5 (1x16x16 to 1x64x64), BatchMatMulV2 2.8, AvgPool 2.8,
#     Transpose 3.7, MaxPool 4.7, Conv2D 5.5, DepthwiseConv2dNative 8.3 (oneDNN primitive lookup and layout
#     checks, Eigen shuffle setup). Einsum 3.2 (abc,cde->abde from 1x1x16 . 16x1x16 to 1x16x32 . 32x6x8 all take
#     3.2-3.4 us; abcd,aecd->acbe at 1x16x2x8 4.8: TF's kernel reshapes and transposes around a batch matmul).
#     SpaceToBatchND 4.5, BatchToSpaceND 2.0 (a dilated conv's lowering, rules/dilation.rules: traced 5.5 and 2.8 us
#     per kernel on [1, 128 + pad, 64] in a WaveNet-like stack, where a copy of its 33 KB takes under 0.5 us, less
#     the ~1 us the trace adds to a small kernel; BENCHMARKS.md, "A deep dilated stack").
#   flops_per_element_by_term: Tanh takes 330 us on 1M floats (35 FLOP-equivalents per element at 110 GFLOP/s),
#     Sigmoid 614 us (64); Relu of the same size 87 us (bandwidth-bound). Erfc 22.6 us on 16k floats, 88.5 on 65k
#     (150; kernel trace, Grappler on).
#   fused_matmul_us 9, fused_flops_per_element_by_term Erfc 33: a MatMul's fused bias, and its fused GELU, timed
#     against the plain MatMul (cost/fusion.py, "MatMul"): 4.2-5.0 us more in chained layers, about twice that in
#     whole models. At 4.5 the bias and exact GELU moved onto a MatMul at 16 rows (F24) left six keras_hub text
#     models (ESM2, RoBERTa, XLNet, BART, Whisper, Falcon) 1.028-1.056x slower than what 9 extracts (paired,
#     BENCHMARKS.md, "The fused MatMul's fixed cost in whole models"), also with weights at a trained model's scale.
#     At 9 ConvNeXt-Tiny's, Swin's and keras_hub's ViT's fused GELUs (65 rows and more) stay; the suite's ViT (17
#     tokens) runs its two GELUs unfused, measuring the same as before (1.001x).
#   fused_depthwise_us 4: a depthwise conv's fused bias + Relu6 against the conv alone, 4.6 us at [1,14,14,256] and
#     11.5 us at [1,56,56,144] where the separate ops would take 20 and 175 (cost/fusion.py, "depthwise").
#   strided_copy_efficiency 0.5: Transpose 1024x1024 reaches 30 GB/s, [0,2,1,3] on 8x128x12x64 73 GB/s.
#   broadcast_efficiency 0.3: AddV2 / Mul / BiasAdd of a per-channel vector onto NHWC activations reach 20 GB/s with
#     16 channels, 29 with 32, 43 with 1024 (a scalar operand streams at full speed).
#   broadcast_row_ns 3: Mul / AddV2 / BiasAdd of a [C] vector onto [1, N / C, C], each followed by a Relu, 8 in a
#     chain, one thread, less the chain of Relus alone (/tmp script, 2026-12-06; BENCHMARKS.md "Narrow channels"), us
#     per op at N = 12,288 / 49,152: C = 2 19.9 / 73.6, 3 13.0 / 50.4, 4 9.6 / 29.4, 8 6.5 / 22.7, 16 5.0 / 12.9, 32
#     3.2 / 9.0, 64 2.7 / 7.1, 192 2.8 / 6.1, the same for the three ops: about 3 ns per row of C elements where C
#     is small, which the bandwidth price above (3.9 / 14.9 us) misses by 3x at C = 3.
#   fused_contractions ("Conv2D", "DepthwiseConv2dNative"): tensat_tf/cost/fusion_bench.py (`tensat_tf calibrate
#     --fusion`), Grappler on as when serving: Conv2D + BiasAdd (+ Relu) runs as one _MklNativeFusedConv2D whose
#     epilogue costs 0 +- 1.5 us against 3.1-3.4 us for BiasAdd + Relu as separate ops at [1,14,14,32] (this model
#     predicts 3.0), 7-8 us at C=128, 11-13 at C=256; Conv2D + AddV2([C]) fuses the same way. A depthwise conv's
#     epilogue is fused too, at a fixed cost (fused_depthwise_us); a MatMul's at another (fused_matmul_us; fusion.py
#     has the numbers). Per-node overhead in the same runs (a [1] Relu, R=8 copies): 0.13-0.55 us, so op_overhead_us
#     0.3 stands.
#   call_overhead_us 160: a SavedModel whose signature computes one Sin of a [1,64] tensor takes 0.163-0.171 ms per
#     call (tensat_tf/latency.py's measurement: the signature called from Python, outputs forced), and a chain of
#     400 more small ops adds 0.10 ms (0.26 us per op, which op_overhead_us 0.3 matches). For the transformer exports
#     (0.4-0.6 ms per call) that fixed cost is a third of the time: without it their gains were predicted 1.15-1.23x
#     against 0.98-1.11x measured.
#   fused_flops_per_element_by_term Swish 40: a swish no conv takes runs as one _MklSwish, 0.475-0.505 ns per element
#     beyond the layer's Relu form (cost/fusion.py, "mklswish"), of which the Mul's pass is ~0.13.
#   fused_activations: MatMul + BiasAdd + TF's exact GELU is one _MklNativeFusedMatMul, the GELU 22 us over the
#     matmul + bias at [784,96]x[96,384]; Conv2D + BiasAdd + swish likewise. Numbers in fusion.py.
#   variable_weight_ns_per_element 0.13, variable_depthwise_us 2.5: the ops above were timed with Const filters, which
#     oneDNN's kernels reorder into their blocked layout once and keep; a served SavedModel's filters are variables
#     (options.py MIN_VARIABLE_ELEMENTS), reordered on every call unless TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (tensorflow's
#     mkl_util.h AreWeightsFrozen; profile CPU_FROZEN). Fitted to whole real exports, our output served with and without
#     that variable (tools/bench_frozen.py, BENCHMARKS.md "Weights as variables on oneDNN"), ms saved per call against
#     the weights each holds: ResNet50V2 4.5 (53 convs, 23.5 M filter elements; a 2 M-element MatMul: 0.18 ns per
#     element), ConvNeXt-Tiny 2.4 (1.6 M in convs, 26.7 M in 37 MatMuls: 0.09), DenseNet-121 0.6-1.7 in two runs (7.9 M:
#     0.07-0.22), MobileNet 0.66-0.75 (4.2 M, 11 depthwise convs); MobileNetV3-Small 0.17 and EfficientNet-B0 0-0.46,
#     within their run-to-run noise (separate processes, +-0.5 ms on such models). So 0.13 ns per element, one rate for
#     every contraction (the measurements do not separate convs from matmuls, and one rate keeps rewrites between them,
#     F29's conv as a batch matmul, E07's Einsum as one, neutral), and 2.5 us more per depthwise conv: a chain of 8
#     depthwise convs with variable filters, one thread (/tmp script, 2026-12-06; BENCHMARKS.md "Tiny depthwise
#     convs as filter taps"), 11.1 us each at [1,2,2,176] 3x3, 11.8 at 5x5, 14.7 at [1,2,2,960] 5x5, 12.6 at
#     [1,4,4,176], 26.8 at [1,28,28,128] 3x3, where 8.3 + 8 priced them 5-6 us dearer each (the 8 us was the
#     residual of the whole-model fit above); Sum 1 us: F32's taps form (Reshape, Mul, Sum, Reshape) measured 4.4 us at
#     [1,2,2,352] where the model without it priced 3.8. Merging two contractions keeps their elements, so for most
#     rewrites this is the same cost on both sides: it lowers a CNN's predicted gain toward what is measured.
#   streamed_matmul_rows 16, streamed_matmul_min_elements 256 Ki, streamed_matmul_ns_per_element 0.04,
#     weight_cache_bytes 32 MiB (the L3 cache): a MatMul of a few rows by a variable weight that comes from memory runs
#     slower than a 1x1 Conv2D of as many pixels on the same weight, where one whose weight stays in the cache runs
#     faster. `python tools/bench_forms.py --experiments=matmul_vs_conv1x1` (both fused with bias + Relu; conv time /
#     MatMul time, paired; six copies, each with its own weight, per form), where six weights outgrow the L3 cache, at K
#     x N = 1024 x 2048: 1.48x at one row (a gemv), 0.90x at 2, 0.91x at 4, 0.93x at 8, 0.89x at 16 rows (0.035-0.063 ns
#     per weight element); at 1024 x 1024 0.89x (4 rows), 0.91x (16), 1.12x at 64 rows (where the arithmetic hides the
#     weight's traffic); where they fit it, at 512 x 512 1.04-1.15x at every row count; at 1024 x 512, 512 x 1024 and
#     2048 x 256 (12 MB in all) 0.97x, 0.90x and 1.05x; 1024 x 1024's six weights (24 MB) already behaved as streamed,
#     so in this VM, whose L3 other guests share, the boundary lies between 6 and 24 MB of weights; weight_cache_bytes
#     is the L3's size, not fitted (a model of 6-32 MB of weights is priced as cached). With 48 copies (the same
#     experiment's last rows) 512 x 512 streamed too: 0.94x [0.92, 0.97] at 4 rows (0.03 ns per element), 1024 x 256
#     0.97x at 16 rows and 0.98x at 4, 512 x 128 1.06x at 64. So it is the model's whole set of variables against the
#     cache that decides (cost/analytic.py weights_streamed): ResNet50V2's 94 MB do not fit, MobileNetV3's 10-22 MB do.
#     With the weights as Consts the MatMul is the faster (1.50x at 4 x 1024 x 2048, six copies, /tmp script): the fused
#     MatMul keeps a Const's reordered copy, so CPU_FROZEN has none of it. Priced from 256 Ki elements, the smallest
#     weight measured slower: under about 125 Ki the MatMul's smaller fixed cost (overhead_us_by_term) outweighs the
#     price anyway, and priced in between it left sites within a us or two of the conv that doubled
#     Inception-ResNet-v2's probe ILP (HiGHS 0.9 -> 1.9 s; the tensat pass 4.3 -> 5.2 s). Before this price ResNet50V2's
#     1x1 convs on 2x2 and 4x4 images were taken as F39's MatMuls, a few us cheaper each as priced, and the model
#     measured 2-3 % slower with them than without (BENCHMARKS.md, "MatMuls of a few rows by weights streamed from
#     memory").
# Large ops land within ~30 % of their measurement; sub-microsecond ops are as noisy as that between runs. The
# measurements ran while other jobs shared the VM (fastest rounds kept); BENCHMARKS.md has whole-model sums.
# `tensat_tf calibrate MODEL` prints the measured and the analytic sum of a model's op costs side by side.
CPU = Device(
    "cpu", peak_gflops=110.0, bandwidth_gbs=90.0, op_overhead_us=0.3,
    overhead_us_by_term=(("Reshape", 0.1), ("MatMul", 0.5), ("BatchMatMulV2", 2.8), ("AvgPool", 2.8),
                         ("Transpose", 3.7), ("MaxPool", 4.7), ("Conv2D", 5.5), ("DepthwiseConv2dNative", 8.3),
                         ("FusedBatchNormV3", 4.5), ("Einsum", 3.2), ("SpaceToBatchND", 4.5), ("BatchToSpaceND", 2.0),
                         ("Sum", 1.0)),
    flops_per_element_by_term=(("Tanh", 35.0), ("Sigmoid", 64.0), ("Erfc", 150.0)),
    strided_copy_efficiency=0.5, broadcast_efficiency=0.3, broadcast_row_ns=3.0,
    fused_contractions=("Conv2D", "DepthwiseConv2dNative"), fused_activations=FUSED_ACTIVATIONS,
    call_overhead_us=160.0, fused_matmul_us=9.0, fused_depthwise_us=4.0,
    fused_flops_per_element_by_term=(("Erfc", 33.0), ("Swish", 40.0)), onednn=True,
    variable_weight_ns_per_element=0.13,
    variable_depthwise_us=2.5, streamed_matmul_rows=16, streamed_matmul_min_elements=256 * 1024,
    streamed_matmul_ns_per_element=0.04, weight_cache_bytes=32 << 20)
# CPU_FROZEN: the same runtime serving with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (README, "Serving on a CPU with
# oneDNN"): every filter's reordered copy is kept, as a Const's is.
CPU_FROZEN = dataclasses.replace(CPU, name="cpu-frozen", variable_weight_ns_per_element=0.0, variable_depthwise_us=0.0,
                                 streamed_matmul_ns_per_element=0.0)
# oneDNN's switch for keeping every kernel's reordered weights (tensorflow's mkl_util.h AreWeightsFrozen)
FROZEN_WEIGHTS_VAR = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"

# CPU_EIGEN: the same TF 2.21 where oneDNN's ops are off (TF's default on CPUs without AVX-512's deep-learning
# extensions; cost/fusion.py "Without oneDNN"): Eigen's kernels, and only the remapper's generic fusions. Fitted the
# same way as CPU (tensat_tf.cost.measured.time_in_worker, one thread, Grappler off, fastest of the rounds) on the
# 2-vCPU AMD EPYC Zen 3 VM (AVX2, no AVX-512) of 2026-12-03, with a test run sharing the VM:
#   peak_gflops 80: Conv2D 3x3 1x56x56x64->64 83 GFLOP/s, 1x1 28x28x128->128 92, 3x3 8x8x256->256 81, MatMul
#     64x256x256 89, Einsum abc,cd->abd 1x64x256 . 256x256 83; large MatMuls do worse (128x512x512 63, 256x1024x1024
#     42), so do BatchMatMulV2 12x128x64x64 (55) and a first conv with 3 input channels (18).
#   bandwidth_gbs 70: Relu / AddV2 on 1M floats 70 GB/s; broadcast_efficiency 0.4: a per-channel Mul / BiasAdd /
#     AddV2 on NHWC activations 24 GB/s with 32 channels, 31 with 128, 35 with 1024.
#   overhead_us_by_term: a 1x1x1x8 Conv2D or DepthwiseConv2dNative takes 1.1 us, a [1,16]x[16,16] MatMul 0.6, a
#     1x1x16 BatchMatMulV2 0.9, a 1x4x4x8 MaxPool 1.1, a 1x8x8x8 AvgPool 1.8, Relu on 16 floats 0.3: Eigen's kernels
#     have none of oneDNN's primitive lookup (CPU's Conv2D 5.5, DepthwiseConv2dNative 8.3).
#   depthwise_ns_per_output 0.36 and flops_per_element_by_term DepthwiseConv2dNative 4.6: Eigen's depthwise conv
#     takes about 0.36 + 0.115 * KH * KW ns per output element (3x3 at 1x56x56x64 278 us, 1x28x28x128 122 us,
#     1x14x14x256 54 us; 5x5 at 1x28x28x144 392 us; 1x1 at 1x32x32x64 31 us, slower per element than a broadcast
#     Mul, 34 us at 1x56x56x32: rule F30's form does not pay without oneDNN), 5-7x CPU's; flops_per_element_by_term
#     Sigmoid 70 (1M floats 1041 us, 65k 52 us), Tanh 37 (466 and 31 us), Erfc 154 (65k: 127 us), MaxPool 12 (3x3
#     stride 2 on 1x56x56x64 75 us, 1x28x28x128 30 us), AvgPool 20 (2x2 on 1x32x32x128 35 us).
#   strided_copy_efficiency 0.5: Transpose [0,2,1,3] of 8x128x12x64 40 GB/s (a 1024x1024 one only 3.3 GB/s).
#   fused_matmul_us 1: MatMul [196,32]x[32,32] + BiasAdd + Relu as one _FusedMatMul 0.9 us over the MatMul alone
#     (fusion_bench). A Conv2D's fused BiasAdd (+ Relu) costs nothing measurable over the conv (fusion_bench: 12.7 and
#     11.8 us against 12.9 alone), as on CPU.
#   call_overhead_us: not re-measured (CPU's 160).
CPU_EIGEN = Device(
    "cpu-eigen", peak_gflops=80.0, bandwidth_gbs=70.0, op_overhead_us=0.3,
    overhead_us_by_term=(("Reshape", 0.1), ("MatMul", 0.6), ("BatchMatMulV2", 0.9), ("AvgPool", 1.8),
                         ("Transpose", 3.7), ("MaxPool", 1.1), ("Conv2D", 1.1), ("DepthwiseConv2dNative", 1.1),
                         ("FusedBatchNormV3", 4.5), ("Einsum", 3.2)),
    flops_per_element_by_term=(("Tanh", 37.0), ("Sigmoid", 70.0), ("Erfc", 154.0), ("DepthwiseConv2dNative", 4.6),
                               ("MaxPool", 12.0), ("AvgPool", 20.0)), depthwise_ns_per_output=0.36,
    strided_copy_efficiency=0.5, broadcast_efficiency=0.4, fused_contractions=("Conv2D",),
    call_overhead_us=160.0, fused_matmul_us=1.0, onednn=False, grouped_conv=False)

# GPU devices: peak and bandwidth from the vendor datasheets, dense FP32 without tensor cores (the graphs are
# float32): NVIDIA T4 datasheet, 8.1 TFLOPS FP32 and 320 GB/s GDDR6; NVIDIA H100 SXM5 datasheet, 67 TFLOPS FP32
# and 3.35 TB/s HBM3. The overheads are NOT measured (no GPU in this project's runs): op_overhead_us 5 stands for a
# CUDA kernel launch (a few us) plus TF's GPU executor bookkeeping; convolutions and matmuls get more for cuDNN /
# cuBLAS algorithm selection and workspace; Reshape launches no kernel. Tanh / sigmoid count 8 FLOPs per element
# (special-function units run at a fraction of the FP32 rate; an estimate). Small ops are therefore overhead-bound
# on GPUs, which is the property that matters for ranking (merging small ops pays off more than on CPU).
_GPU_OVERHEADS = (("Reshape", 1.0), ("MatMul", 8.0), ("BatchMatMulV2", 8.0), ("Einsum", 8.0), ("Conv2D", 10.0),
                  ("DepthwiseConv2dNative", 10.0))
GPU_T4 = Device("gpu-t4", peak_gflops=8100.0, bandwidth_gbs=320.0, op_overhead_us=5.0,
                       overhead_us_by_term=_GPU_OVERHEADS, flops_per_element_by_term=(("Tanh", 8.0), ("Sigmoid", 8.0)),
                       strided_copy_efficiency=0.5)
GPU_H100 = Device("gpu-h100", peak_gflops=67000.0, bandwidth_gbs=3350.0, op_overhead_us=5.0,
                         overhead_us_by_term=_GPU_OVERHEADS,
                         flops_per_element_by_term=(("Tanh", 8.0), ("Sigmoid", 8.0)), strided_copy_efficiency=0.5)
GPU = GPU_T4

DEVICES = {p.name: p for p in (CPU, CPU_FROZEN, CPU_EIGEN, GPU_T4, GPU_H100)} | {"gpu": GPU}
# the device name that means "the CPU profile of the TF runtime in this process" (runtime_cpu)
AUTO = "auto"


def runtime_cpu() -> Device:
    """CPU where this process's TensorFlow runs oneDNN's ops, CPU_EIGEN where it does not (TF decides per machine,
    or by TF_ENABLE_ONEDNN_OPTS: cost/fusion.py "Without oneDNN"); CPU_FROZEN where it runs them with
    FROZEN_WEIGHTS_VAR set (TF reads it as a bool: 1 or true). The conversion is assumed to run on the kind of
    machine, and in the environment, that serves the model; --device names a profile when it does not."""
    try:
        from tensorflow.python.util import _pywrap_util_port      # TF's own answer; no public API says it
        onednn = _pywrap_util_port.IsMklEnabled()
    except (ImportError, AttributeError):
        onednn = True
    if not onednn:
        return CPU_EIGEN
    return CPU_FROZEN if os.environ.get(FROZEN_WEIGHTS_VAR, "").strip().lower() in ("1", "true") else CPU


def device_named(name_or_device) -> Device:
    if isinstance(name_or_device, Device):
        return name_or_device
    if name_or_device == AUTO:
        return runtime_cpu()
    try:
        return DEVICES[name_or_device]
    except KeyError:
        raise ValueError(f"unknown device {name_or_device!r}; known: {', '.join(sorted(DEVICES) + [AUTO])}") from None
