"""Which e-nodes TF's CPU runtime runs inside a convolution kernel (Grappler's remapper), so they cost only their
epilogue arithmetic: no per-op overhead and no extra pass over memory.

What TF 2.21 fuses on CPU with oneDNN's ops on, when a SavedModel is served: checked by running each pattern with
Grappler on and listing the kernels that ran (tensat_tf/cost/fusion_bench.py), and in the remapper's source. Whether
they are on is TF's choice per machine (see "Without oneDNN" at the end for the other case):
  bias   BiasAdd(C, b), and an Add/AddV2 of C and a bias-shaped tensor (remapper's IsBiasSemanticAdd, oneDNN only:
         for a convolution every dim but the last is 1 and the last is the channel count, rank <= 4; for a MatMul
         rank 1), where C is a Conv2D, DepthwiseConv2dNative or MatMul  -> _FusedConv2D / _FusedDepthwiseConv2dNative
         / _FusedMatMul.
  bn     FusedBatchNormV3 (inference) of a Conv2D (not a depthwise one)  -> _FusedConv2D.
  act    Relu / Relu6 (also Elu, LeakyRelu: opaque `Op` nodes here) of a fused bias or bn node; Tanh / Sigmoid only
         after a MatMul's bias (after a Conv2D's they stay separate ops).
  swish  Mul(y, Sigmoid(y)) (either operand order) where y is a Conv2D's BiasAdd: one _MklNativeFusedConv2D. Not
         after a bias-semantic AddV2 (the AddV2 fuses, the swish stays a separate _MklSwish), nor after a depthwise
         conv's or a MatMul's bias (a separate _MklSwish). Both nodes read y: each is the other's partner
         (EGraphData.fused). Measured here (one thread, 8 copies of a 1x1 conv, fastest of 7 blocks; /tmp script):
         conv + bias + swish against conv + AddV2 + swish, us per copy: 125 vs 157 at [1,56,56,32], 90 vs 100 at
         [1,28,28,64], 92 vs 101 at [1,7,7,256]; conv + bias alone 100, 81, 86. EfficientNetV2-B0's export has 23 of
         its 39 swishes after an AddV2 bias (equal in cost until now, so extraction kept the AddV2).
  gelu   TF's exact GELU as the remapper's pattern groups it, Mul(Mul(h, Erfc(Mul(Neg(y), c))), y) with scalar c
         and h (any operand order of the three Muls), where y is a MatMul's BiasAdd: one _MklNativeFusedMatMul
         (Device.fused_activations contractions). Grappler's arithmetic optimizer runs first and reorders a
         product's factors, partly by node name (egraph/runtime_names.py): with the inner Mul's name sorting before
         y's the grouping stays and fuses, in either outer order; with the emitter's own names it was regrouped and
         ran unfused. As tf.nn.gelu writes it, (h * y) * erfc, it fused only where that optimizer moved it into the
         remapper's grouping, which depends on what the runtime knows of the shapes: a converted MLP-Mixer and ViT
         fused it, a Dense layer on a rank-2 input did not (/tmp SavedModels, grappler.runtime_graph: Grappler run
         as a served call runs it). Rules F19, F24 and F31 write the remapper's grouping, and the inner Mul's Site
         asks the emitter to name it before y (Site.precedes, egraph/runtime_names.py). Measured (one
         thread, fastest of 7 blocks of 30 runs; /tmp script): [784,96] x [96,384] + bias + GELU 641 us against 619
         us for the matmul + bias alone, while unfused on ConvNeXt-Tiny ([3136,384]) each GELU ran Erfc 65 us, Neg
         19 us and three Muls. Keras' Dense on a rank-3/4 input puts a Reshape between the MatMul and its bias; rules
         F18/F19 (rules/tf_fold.rules) move the bias and the GELU before it.
         The five nodes are priced fused; Neg(y) and the last Mul both read y (partners), the others read one node
         each, and each fuses only where the next one is the only reader of its class (consumers).
  MatMul The fused kernel is dearer than the plain one by a fixed amount. MatMul [R,64] x [64,128] in 16 chained
         layers, one thread, Grappler on, median of 7 blocks of 100 runs (/tmp script), us per layer at R = 8 / 32 /
         128 / 512: MatMul 13.8 / 16.9 / 24.9 / 62.6; + fused BiasAdd 18.0 / 21.9 / 29.8 / 67.4 (+4.2-5.0); + a
         separate BiasAdd (after a reshape, as Keras' Dense on [batch, seq, C] writes it) 15.1 / 18.8 / 29.8 / 74.9;
         + fused bias + GELU 18.4 / 22.6 / 35.7 / 87.3 (the GELU epilogue 0.3 ns per element); + separate bias and
         GELU 17.8 / 26.8 / 59.5 / 189.8 (a kernel trace at 128 / 512 rows: Erfc 22.6 / 88.5 us). So a MatMul's
         bias costs Device.fused_matmul_us where the program computes its input with the MatMul, and a separate
         op's price where it does not (matmul_bias_sites; cost/analytic.py fusion_terms prices the cheaper of the
         two and charges the other through its Fused term), the fused Erfc 33 FLOP-equivalents per element
         (Device.fused_flops_per_element_by_term), and moving a bias and a GELU onto a MatMul (F18, F19, F23, F24)
         pays from a few dozen rows, not on a handful (measured on the zoo's encoder at sequence 8: 0.97x). In
         whole models the fused kernel's fixed cost measured about twice the chained layers' (cost/devices.py CPU).
  depthwise  The bias and activation of a DepthwiseConv2dNative cost a fixed amount, not a pass over memory. A 3x3
         depthwise conv + BiasAdd + Relu6 against the conv alone (one thread, paired, 8 copies each followed by a
         1x1 conv, ratio of medians of 10 blocks; /tmp script): 4.6 us more per copy at [1,14,14,256], 11.5 us at
         [1,56,56,144], where BiasAdd + Relu6 as separate ops take about 20 and 175 us. A 1x1 depthwise conv by a
         per-channel scale (rule F30) likewise: + BiasAdd + Relu ~4 us dearer than alone at [1,14,14,256], no
         difference at [1,28,28,256]; alone it runs as fast as a broadcast Mul of the scale plus its fixed cost
         (cost/analytic.py node_cost). So the bias costs Device.fused_depthwise_us more than its arithmetic (where
         that is cheaper than the separate op) and the activation after it costs its arithmetic.
         (fusion_bench's depthwise+bias+relu6 at [1,14,14,256], TENSAT_FUSION_BENCH_C=256: 13.6 us fused, 15.5 us
         separate.)
         Priced as separate ops until now, a depthwise's epilogue made a second, 1x1 depthwise conv look cheaper
         than folding a batch norm's scale into the first (MobileNetV2 at 224: 0.93x). Against AddV2 + Relu (a
         scale folded into the next conv, the form F30 replaces), per copy, the 1x1 depthwise form: 48 us faster at
         [1,56,56,128], 33 at [1,28,28,256], 10-18 at 100k elements, 2 us slower at 50k, 9-12 us slower at 16k-32k;
         this model takes it from about 165k elements.
  mklswish  A swish Mul(y, Sigmoid(y)) that no conv takes (after a depthwise conv's bias, a bias-semantic AddV2,
         anything): the remapper's FindSigmoidAndMul makes it one _MklSwish kernel (oneDNN only), whatever computes
         y and whoever else reads it; only the Sigmoid's own output must go to the Mul alone. Priced as the Mul's
         pass plus the Sigmoid's arithmetic at Device.fused_flops_per_element("Swish"). Measured (6 layers of 3x3
         depthwise conv + bias + activation, one thread, paired, 12 blocks, /tmp script, the test suite running
         beside it): against the same layers with Relu, the swish adds 0.475 ns per element at [1,56,56,96] and
         0.505 at [1,14,14,480], Sigmoid alone more (0.68 and 0.62: TF's Sigmoid kernel is slower than _MklSwish),
         and the form rules A03/A04 write for Eigen, h + h tanh(h) with the halving folded, 0.568 and 0.560: 10 %
         and 4 % slower per layer than the swish. Priced as a Sigmoid (64) and a Mul until now, the swish looked
         dearer than the Tanh form, which EfficientNet-B0's 16 depthwise swishes took.
  hardswish  Mul(Mul(Relu6(AddV2(3, y)), 1/6), y), where y is a Conv2D's or DepthwiseConv2dNative's BiasAdd read by
         nothing but the pattern: one _MklNativeFused{Conv2D,DepthwiseConv2dNative} with fused_ops [BiasAdd,
         _FusedHardSwish] (TF's remapper, FindContractionWithBiasAddAndHardSwish; oneDNN only). The remapper's
         patterns are that form and Mul(Mul(Relu6(..), y), 1/6), but Grappler's constant push-down runs first and
         rewrites a product with the scalar outside (Keras' relu6(3 + y) * (1/6 * y), and the second pattern) into a
         form that depends on node names. With the emitter's names, on a three-layer Conv / DepthwiseConv + BN + hard
         swish Keras model, only this form fused; with the nodes renamed in reverse order not even this one did, so
         the form is what the emitter's names are known to fuse, not a law. Rules A07/A08 (rules/activation.rules)
         reach it.
         The four nodes are one pattern: each fuses only when the next one reads it (Fused.consumers), the AddV2 and
         the last Mul both read y (partners). Measured (one thread, 6 layers [1,28,28,64], paired, 12 blocks, /tmp
         script): conv + bias + hard swish fused 0.98x of conv + bias + Relu (1x1 conv), 0.94x (depthwise), where
         AddV2 + Relu6 + Mul as separate ops made it 0.90x / 0.85x; so each node costs its fused arithmetic. Until
         this was priced, extraction folded the 1/6 into the next convolution (one Mul less) and the other three ran
         as separate ops: MobileNetV3-Small's e-graph gain went 1.03x -> 1.16x in one paired run, 1.09x -> 1.13x
         between two suite tables (BENCHMARKS.md).
  Hazard: a bias-semantic AddV2 on a contraction, where a BiasAdd would do. On MobileNetV3-Large's rewritten graph
         (a depthwise conv's folded BatchNorm left as AddV2(conv, bias), then Keras' hard swish, the squeeze-excite
         Mean and its Conv2D + BiasAdd) TF's remapper failed ("Mutation::Apply error: fanout 'activation_16_1/mul'
         exist for missing node 'DepthwiseConv2dNative_12'"), so a served model runs with none of its fusions and the
         pass had to keep its input (tensat_tf/grappler.py). The failure depends on the order of node names: on the
         17-node subgraph cut from that graph (random weights, /tmp script), with Keras' names for the activation the
         AddV2 form failed whenever the conv's name sorted after them (as the emitter's tensat/... names do), the
         BiasAdd form under all nine namings tried of the conv and the bias; with all 17 names random the BiasAdd
         form failed too (11 of 20). So a BiasAdd lowers the risk, it does not remove it: the Grappler check stays
         the guard. Both forms cost the same otherwise (rule F05 puts them in one class), so remapper_hazards marks
         the AddV2s and the cost model adds HAZARD_MS to each: extraction takes the BiasAdd. Both MobileNetV3s then
         pass the check.
Without oneDNN: TF 2.21 turns oneDNN's ops on by default only on some CPUs. On the AVX-512 VM of the earlier
  sessions it was on; on an AMD EPYC Zen 3 VM (AVX2, no AVX-512) it is off unless TF_ENABLE_ONEDNN_OPTS=1
  (tensorflow's IsMklEnabled() is False, the kernels are Eigen's: _FusedConv2D, not _MklNativeFusedConv2D). Then the
  remapper's oneDNN-only fusions do not happen (its source gates them on IsMKLEnabled(); fusion_bench on that VM,
  and kernel lists of served SavedModels: EfficientNet-B0's rewritten graph ran 65 separate Sigmoids and 16 plain
  DepthwiseConv2dNative kernels with separate BiasAdds): a bias-semantic AddV2 stays a separate op (only a BiasAdd
  fuses), Tanh / Sigmoid after a MatMul's bias, swish and GELU stay separate, and a depthwise conv's bias and
  activation too. Conv2D / MatMul + BiasAdd (+ Relu / Relu6) still run as one _FusedConv2D / _FusedMatMul.
  devices.CPU_EIGEN is that runtime's profile (Device.onednn False: fusion_sites(onednn=False)).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tensat_tf.egraph.export import Exported

CONTRACTIONS = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})
# activation term -> contractions whose fused bias it joins (remapper's FindContractionWithBiasAndActivation)
ACTIVATIONS = {"Relu": CONTRACTIONS, "ReluSix": CONTRACTIONS,
               "Tanh": frozenset({"MatMul"}), "Sigmoid": frozenset({"MatMul"})}
# what the remapper does only where TF runs oneDNN's ops (module docstring, "Without oneDNN"): the activations it
# fuses otherwise, and the bias forms (a bias-semantic AddV2 is oneDNN's)
EIGEN_ACTIVATIONS = {"Relu": CONTRACTIONS, "ReluSix": CONTRACTIONS}
# activation -> contractions whose BiasAdd it joins in one kernel (Device.fused_activations)
FUSED_ACTIVATIONS = (("swish", ("Conv2D",)), ("gelu", ("MatMul",)),
                     ("hardswish", ("Conv2D", "DepthwiseConv2dNative")), ("mklswish", ()))
# the hard swish's constants, as the remapper checks them (module docstring, "hardswish")
HARD_SWISH_CONSTANTS = (3.0, 1.0 / 6.0)
# activations that also join a Conv2D + FusedBatchNormV3: the two measured (the remapper excludes Sigmoid; Tanh there
# was not checked, so it is not discounted)
BN_ACTIVATIONS = frozenset({"Relu", "ReluSix"})
# what a hazard (module docstring) costs more: a tie-break between forms of equal cost (on both MobileNetV3s
# extraction then takes every BiasAdd; 50 us did the same), small enough not to change a predicted gain
HAZARD_MS = 0.001


def _bias_shaped(contraction: str, out: Optional[Sequence[int]], bias: Optional[Sequence[int]]) -> bool:
    """IsBiasSemanticAdd's shape test: the bias broadcasts along the contraction's last (channel) dim only."""
    if out is None or bias is None or len(out) < 2 or len(bias) < 1 or tuple(out) == tuple(bias):
        return False
    if out[-1] < 0 or bias[-1] != out[-1]:
        return False
    if contraction == "MatMul":
        return len(bias) == 1
    return len(bias) <= len(out) and all(d == 1 for d in bias[:-1])


def _offers(g, contractions) -> dict[int, dict[str, set[int]]]:
    """class -> contraction term -> its nodes, for the terms of `contractions`."""
    offers: dict[int, dict[str, set[int]]] = {}
    for i, n in enumerate(g.nodes):
        if n.op in CONTRACTIONS and n.op in contractions:
            offers.setdefault(n.eclass, {}).setdefault(n.op, set()).add(i)
    return offers


def _bias_semantic_sides(exp: Exported, n, offers: dict) -> list[tuple[int, set[str]]]:
    """For an AddV2 node: (operand class, the contraction terms of that class the other operand is a bias of), for
    each operand order (remapper's IsBiasSemanticAdd)."""
    return [(c, {k for k in offers.get(c, {}) if _bias_shaped(k, exp.shapes.get(c), exp.shapes.get(b))})
            for c, b in ((n.children[0], n.children[1]), (n.children[1], n.children[0]))]


def fused_nodes(exp: Exported, contractions=CONTRACTIONS, activations=FUSED_ACTIVATIONS,
                onednn: bool = True) -> dict[int, str]:
    """node index -> 'bias' | 'bn' | 'act' | 'swish' | 'gelu' | 'hardswish' | 'mklswish' for every e-node that runs
    as the epilogue of a fused contraction (or, 'mklswish', inside its swish's Mul), the contractions limited to
    `contractions` and `activations` (the ones whose fusion pays on the device: Device), with oneDNN's ops on or off
    (Device.onednn)."""
    return {i: site.kind for i, site in fusion_sites(exp, contractions, activations, onednn).items()}


@dataclasses.dataclass(frozen=True)
class Site:
    kind: str                   # 'bias' | 'bn' | 'act' | 'swish' | 'gelu' | 'hardswish' | 'mklswish'
    reads: int                  # the class it takes the fused kernel's output from
    producers: frozenset[int]   # the nodes of `reads` it fuses with (the contractions; the fused bias / bn nodes)
    partners: frozenset[int] = frozenset()      # other nodes of the same epilogue that read `reads` too
    consumers: frozenset[int] = frozenset()     # the pattern's next nodes, without which it does not fuse (Fused)
    # (class, tag): the fusion also needs this node's name to sort before that class's node's (gelu: Grappler's
    # arithmetic optimizer regroups a product by name first); the emitter names it so (egraph/runtime_names.py)
    precedes: Optional[tuple[int, str]] = None


def fusion_sites(exp: Exported, contractions=CONTRACTIONS, activations=FUSED_ACTIVATIONS,
                 onednn: bool = True) -> dict[int, Site]:
    """node index -> Site for every fused epilogue node (see fused_nodes). The remapper fuses it only when `reads` is
    computed by one of `producers` and the node is its only reader: which depends on the extracted program, not on
    the e-graph, so extraction prices it (egraph/data.py EGraphData.fused). An activation's producers are its fused
    bias nodes: extraction also runs it alone when that bias runs alone (extract/dag.py unfused)."""
    g = exp.egraph
    offers = _offers(g, contractions)
    fused: dict[int, Site] = {}
    epilogue: dict[int, dict[int, set[str]]] = {}    # class -> fused bias node -> the contractions it sits on
    bn_tuple: set[int] = set()                       # TTuple classes of a fused FusedBatchNormV3
    for i, n in enumerate(g.nodes):
        if n.op == "BiasAdd" and len(n.children) == 2:
            sides = [(n.children[0], set(offers.get(n.children[0], {})))]
        elif n.op == "AddV2" and len(n.children) == 2 and onednn:
            sides = _bias_semantic_sides(exp, n, offers)
        elif n.op == "FusedBatchNormV3" and n.children and "Conv2D" in offers.get(n.children[0], {}):
            fused[i] = Site("bn", n.children[0], frozenset(offers[n.children[0]]["Conv2D"]))
            bn_tuple.add(n.eclass)
            continue
        else:
            continue
        sides = [(c, kinds) for c, kinds in sides if kinds]
        if sides:
            reads, kinds = sides[0]
            fused[i] = Site("bias", reads, frozenset(j for k in kinds for j in offers[reads][k]))
            epilogue.setdefault(n.eclass, {})[i] = set().union(*(kinds for _, kinds in sides))
    bn_out: dict[int, set[int]] = {}                 # class -> its Out(fused bn, 0) nodes
    for i, n in enumerate(g.nodes):
        if n.op == "Out" and n.children and n.children[0] in bn_tuple and n.payload and n.payload[0] == 0:
            bn_out.setdefault(n.eclass, set()).add(i)
    table = ACTIVATIONS if onednn else EIGEN_ACTIVATIONS
    for i, n in enumerate(g.nodes):
        allowed = table.get(n.op)
        if allowed is None or len(n.children) != 1:
            continue
        c = n.children[0]
        producers = {j for j, kinds in epilogue.get(c, {}).items() if kinds & allowed}
        if n.op in BN_ACTIVATIONS:
            producers |= bn_out.get(c, set())
        if producers:
            fused[i] = Site("act", c, frozenset(producers))
    kinds = dict(activations)
    if kinds:
        view = _View(exp)
        _swish_sites(view, kinds.get("swish", ()), fused)
        _gelu_sites(view, kinds.get("gelu", ()), fused)
        _hardswish_sites(view, kinds.get("hardswish", ()), fused)
        if "mklswish" in kinds:
            _mklswish_sites(view, fused)
    return fused


class _View:
    """What the activation patterns look up: nodes by op and class, scalar classes, BiasAdds by contraction."""

    def __init__(self, exp: Exported):
        self.g = exp.egraph
        self.shapes = exp.shapes
        self.scalars = exp.scalars
        self.by_op: dict[str, dict[int, list[int]]] = {}     # op -> class -> its nodes
        self._readers: dict[tuple[str, int], list[int]] = {}  # (op, class) -> the nodes of op reading the class
        self.all_readers: dict[int, list[int]] = {}           # class -> every node reading it
        for i, n in enumerate(self.g.nodes):
            self.by_op.setdefault(n.op, {}).setdefault(n.eclass, []).append(i)
            for k in dict.fromkeys(n.children):
                self._readers.setdefault((n.op, k), []).append(i)
                self.all_readers.setdefault(k, []).append(i)

    def nodes(self, op: str, cls: Optional[int]) -> list[int]:
        return self.by_op.get(op, {}).get(cls, []) if cls is not None else []

    def scalar(self, c: int) -> bool:
        return self.shapes.get(c) == ()

    def scaled(self, i: int) -> Optional[int]:
        """The class that binary node i combines with a scalar, or None."""
        a, b = self.g.nodes[i].children
        return a if self.scalar(b) and not self.scalar(a) else b if self.scalar(a) and not self.scalar(b) else None

    def biases(self, contractions) -> dict[int, frozenset[int]]:
        """class y -> its BiasAdd nodes whose input class holds one of `contractions`."""
        under = {n.eclass for n in self.g.nodes if n.op in contractions}
        out: dict[int, set[int]] = {}
        for i, n in enumerate(self.g.nodes):
            if n.op == "BiasAdd" and len(n.children) == 2 and n.children[0] in under:
                out.setdefault(n.eclass, set()).add(i)
        return {c: frozenset(v) for c, v in out.items()}

    def binary(self, op: str) -> list[int]:
        return [i for i, n in enumerate(self.g.nodes) if n.op == op and len(n.children) == 2]

    def is_value(self, c: int, value: float) -> bool:
        """Class c is a scalar constant equal to `value` (to float32's precision)."""
        v = self.scalars.get(c)
        return v is not None and abs(v - value) <= 1e-6 * abs(value)

    def readers(self, op: str, child: int) -> list[int]:
        """The nodes of `op` that read class `child` (as any operand)."""
        return self._readers.get((op, child), [])

    def other(self, i: int, c: int) -> Optional[int]:
        """The operand class of binary node i that is not c (None when i does not read c, or reads it twice)."""
        a, b = self.g.nodes[i].children
        return b if a == c and b != c else a if b == c and a != c else None


def _gelu_sites(v: _View, contractions, fused: dict) -> None:
    """Add the five nodes of every exact GELU Mul(Mul(h, Erfc(Mul(Neg(y), c))), y) (any operand order) whose input
    a BiasAdd on one of `contractions` computes (module docstring)."""
    if not contractions:
        return
    g = v.g
    biases = v.biases(contractions)
    for out in v.binary("Mul"):
        a, b = g.nodes[out].children
        for he_cls, y in ((a, b), (b, a)) if a != b else ():
            producers = biases.get(y)
            if not producers:
                continue
            for he in v.nodes("Mul", he_cls):
                e_cls = v.scaled(he)
                for e in v.nodes("Erfc", e_cls):
                    for m1 in v.nodes("Mul", g.nodes[e].children[0]):
                        neg_cls = v.scaled(m1)
                        for n1 in v.nodes("Neg", neg_cls):
                            if g.nodes[n1].children[0] != y:
                                continue
                            # joined, not assigned: a class can hold several forms of one step (F22 puts the scalar
                            # of Mul(c, Neg(y)) right), and the next step fuses after any of them. Each step fuses
                            # only where the next one is its only reader (consumers): the remapper takes the pattern
                            # whole or not at all
                            _join(fused, n1, Site("gelu", y, producers, frozenset({out}), frozenset({m1})))
                            _join(fused, m1, Site("gelu", neg_cls, frozenset({n1}), consumers=frozenset({e})))
                            _join(fused, e, Site("gelu", g.nodes[e].children[0], frozenset({m1}),
                                                 consumers=frozenset({he})))
                            # Grappler leaves the grouping to the remapper only with the inner Mul named before y
                            _join(fused, he, Site("gelu", e_cls, frozenset({e}), consumers=frozenset({out}),
                                                  precedes=(y, "gelu")))
                            _join(fused, out, Site("gelu", he_cls, frozenset({he})))


def _swish_sites(v: _View, contractions, fused: dict) -> None:
    """Add the Sigmoid and Mul nodes of every swish Mul(y, Sigmoid(y)) whose y a BiasAdd on one of `contractions`
    computes (module docstring)."""
    if not contractions:
        return
    biases = v.biases(contractions)
    for m in v.binary("Mul"):
        for y, s_cls in (v.g.nodes[m].children, v.g.nodes[m].children[::-1]):
            sigmoids = [j for j in v.nodes("Sigmoid", s_cls) if v.g.nodes[j].children == (y,)]
            producers = biases.get(y)
            if not sigmoids or not producers:
                continue
            fused[m] = Site("swish", y, producers, frozenset(sigmoids))
            for j in sigmoids:
                _join(fused, j, Site("swish", y, producers, frozenset({m})))
            break


def _hardswish_sites(v: _View, contractions, fused: dict) -> None:
    """Add the four nodes of every hard swish Mul(Mul(Relu6(AddV2(3, y)), 1/6), y) (module docstring, "hardswish";
    the AddV2's operands in either order, the Muls' as written) whose input y a BiasAdd on one of `contractions`
    computes. Each node reads the one before it and fuses only if the next one reads it (consumers); the AddV2 and
    the last Mul both read y (partners)."""
    if not contractions:
        return
    three, sixth = HARD_SWISH_CONSTANTS
    g = v.g
    for y, producers in sorted(v.biases(contractions).items()):
        for a in v.readers("AddV2", y):
            if not v.is_value(v.other(a, y), three):
                continue
            a_cls = g.nodes[a].eclass
            for r in v.readers("ReluSix", a_cls):
                r_cls = g.nodes[r].eclass
                for m in v.readers("Mul", r_cls):
                    m_cls = g.nodes[m].eclass
                    if g.nodes[m].children[0] != r_cls or not v.is_value(g.nodes[m].children[1], sixth):
                        continue
                    for out in v.readers("Mul", m_cls):
                        if g.nodes[out].children != (m_cls, y):
                            continue
                        _join(fused, a, Site("hardswish", y, producers, frozenset({out}), frozenset({r})))
                        # the Relu6 may also be a bias's activation (C12 puts BiasAdd(conv, b + 3) in the AddV2's
                        # class): it fuses after either producer; that bias reads y's convolution, which y's BiasAdd
                        # reads too, so neither fuses there and the whole pattern runs alone (extract/dag.py unfused)
                        _join(fused, r, Site("hardswish", a_cls, frozenset({a}), frozenset(), frozenset({m})))
                        _join(fused, m, Site("hardswish", r_cls, frozenset({r}), frozenset(), frozenset({out})))
                        _join(fused, out, Site("hardswish", m_cls, frozenset({m})))


def _mklswish_sites(v: _View, fused: dict) -> None:
    """Add the Sigmoid of every swish Mul(y, Sigmoid(y)) (either operand order) that is not fused into a conv (module
    docstring, "mklswish"): it runs inside the Mul, one _MklSwish kernel, when the Mul is its only reader, whatever
    computes y and whoever else reads y (partners: every reader of y)."""
    g = v.g
    for m in v.binary("Mul"):
        if m in fused:
            continue
        for y, s_cls in (g.nodes[m].children, g.nodes[m].children[::-1]):
            for j in v.nodes("Sigmoid", s_cls):
                if g.nodes[j].children != (y,) or (j in fused and fused[j].kind != "mklswish"):
                    continue
                _join(fused, j, Site("mklswish", y, frozenset(g.classes[y]), frozenset(v.all_readers.get(y, ())),
                                     frozenset({m})))


def _join(fused: dict, i: int, site: Site) -> None:
    """fused[i] = site, with the producers, partners and consumers i already has (i in several patterns)."""
    old = fused.get(i)
    if old is not None and old.reads == site.reads:
        site = Site(site.kind, site.reads, old.producers | site.producers, old.partners | site.partners,
                    old.consumers | site.consumers, site.precedes or old.precedes)
    fused[i] = site


def matmul_bias_sites(exp: Exported, onednn: bool = True) -> dict[int, Site]:
    """The bias nodes (BiasAdd; with oneDNN, a bias-semantic AddV2 too) on a class that a MatMul computes, with their
    Site: the remapper runs each with its MatMul as one fused kernel (module docstring, "MatMul") where the extracted
    program computes that class with the MatMul."""
    return {i: site for i, site in fusion_sites(exp, frozenset({"MatMul"}), (), onednn).items() if site.kind == "bias"}


def remapper_hazards(exp: Exported, contractions=CONTRACTIONS) -> dict[int, tuple[tuple[int, frozenset[int]], ...]]:
    """The bias-semantic AddV2 nodes on a contraction (module docstring, "Hazard"): AddV2(C, b) in either operand
    order, C's class holding one of `contractions` and b bias-shaped for it (_bias_shaped); for each, its sides:
    (C, the contraction nodes of C it is a bias of)."""
    offers = _offers(exp.egraph, contractions)
    out = {}
    for i, n in enumerate(exp.egraph.nodes):
        if n.op == "AddV2" and len(n.children) == 2:
            sides = tuple((c, frozenset(j for k in sorted(kinds) for j in offers[c][k]))
                          for c, kinds in _bias_semantic_sides(exp, n, offers) if kinds)
            if sides:
                out[i] = sides
    return out
