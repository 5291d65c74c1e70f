"""Which e-nodes TF's CPU runtime runs inside a convolution kernel (Grappler's remapper), so they cost only their
epilogue arithmetic: no per-op overhead and no extra pass over memory.

What TF 2.21 fuses on CPU with oneDNN on (the default), when a SavedModel is served: checked by running each pattern
with Grappler on and listing the kernels that ran (tensat_tf/cost/fusion_bench.py), and in the remapper's source:
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
  gelu   TF's exact GELU, Mul(Erfc(Mul(Neg(y), c)), Mul(y, h)) with scalar c and h (tf.nn.gelu, either operand
         order of each Mul), where y is a MatMul's BiasAdd: one _MklNativeFusedMatMul (the device's fused_gelu
         contractions). Measured (one thread, fastest of 7 blocks of 30 runs; /tmp script): [784,96] x [96,384] +
         bias + GELU 641 us against 619 us for the matmul + bias alone, while unfused on ConvNeXt-Tiny ([3136,384])
         each GELU ran Erfc 65 us, Neg 19 us and three Muls. Keras' Dense on a rank-3/4 input puts a Reshape
         between the MatMul and its bias; rules F18/F19 (rules/tf_fold.rules) move the bias and the GELU before it.
         The five nodes are priced fused; Neg(y) and Mul(y, h) both read y (partners), the others read one node each.
What it is worth, measured by fusion_bench (fastest of 7 interleaved blocks, R=8 copies, 1 thread, other jobs on the
machine): a Conv2D's bias / bias + Relu epilogue costs 0 +- 1.5 us fused against 3.1-3.4 us as separate ops at
[1,14,14,32], 7-8 us at C=128, 11-13 us at C=256. A MatMul's is NOT cheaper fused (_FusedMatMul epilogue 3.3-3.8 us
vs 2.9-3.4 us separate at 196x32x32; 6.4 vs 6.6 at x128; with Tanh the fused kernel is slower: 5-7 vs 3-3.7 us, 95 vs
17 us at x256), and the depthwise one is free at C=32/128 but 43 us slower at C=256. So only Conv2D is discounted
(Device.fused_contractions; the mechanism takes any set). Conv2D + AddV2([C]) runs as the same fused kernel as
Conv2D + BiasAdd, so the two forms cost the same and rule F05 (AddV2 -> BiasAdd) is neither rewarded nor penalised:
that matches the measurement (conv+addv2 and conv+bias take the same time).

Whether a node runs fused depends on the program extracted, not on the node: the remapper fuses a bias only into
the contraction that computes its input (not the Split of a merged conv, nor a Mul kept in another e-node of the same
class), and only when the bias is that contraction's one reader (likewise an activation and its bias). Each fused
node therefore names the class it reads and the nodes there it fuses with (fusion_sites), and extraction adds back
what the fusion saved whenever the chosen program breaks either condition (EGraphData.fused, extract/dag.py,
extract/ilp.py). Before that, a per-node price could not tell them apart: MobileNetV3's hard-swish lost 18 fusions
(a scalar folded into a second bias of the same convolution looked free on both biases), and Inception-ResNet-v2's
conv merges were priced with their biases fused although they sit on a Split (measured 0.96x of no rules).

Approximations (costs only steer extraction; the emitted graph is verified, so none of this can make it wrong):
  - An activation is priced fused when its bias node is chosen, even if that bias itself is not fused.
  - Matching dtypes and the remapper's other checks are not modelled.
  - GPU devices fuse nothing here: the GPU remapper fuses a different set and nothing was measured there.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tensat_tf.egraph.export import Exported

CONTRACTIONS = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})
# activation term -> contractions whose fused bias it joins (remapper's FindContractionWithBiasAndActivation)
ACTIVATIONS = {"Relu": CONTRACTIONS, "ReluSix": CONTRACTIONS,
               "Tanh": frozenset({"MatMul"}), "Sigmoid": frozenset({"MatMul"})}
SWISH = frozenset({"Conv2D"})       # contractions whose BiasAdd a swish joins
GELU = frozenset({"MatMul"})        # contractions whose BiasAdd TF's exact GELU joins (Device.fused_gelu)
# activations that also join a Conv2D + FusedBatchNormV3: the two measured (the remapper excludes Sigmoid; Tanh there
# was not checked, so it is not discounted)
BN_ACTIVATIONS = frozenset({"Relu", "ReluSix"})


def _bias_shaped(contraction: str, out: Optional[Sequence[int]], bias: Optional[Sequence[int]]) -> bool:
    """IsBiasSemanticAdd's shape test: the bias broadcasts along the contraction's last (channel) dim only."""
    if out is None or bias is None or len(out) < 2 or len(bias) < 1 or tuple(out) == tuple(bias):
        return False
    if out[-1] < 0 or bias[-1] != out[-1]:
        return False
    if contraction == "MatMul":
        return len(bias) == 1
    return len(bias) <= len(out) and all(d == 1 for d in bias[:-1])


def fused_nodes(exp: Exported, contractions=CONTRACTIONS, gelu=GELU) -> dict[int, str]:
    """node index -> 'bias' | 'bn' | 'act' | 'swish' | 'gelu' for every e-node that runs as the epilogue of a fused contraction, the
    contractions limited to `contractions` (the ones whose fusion pays on the device: Device)."""
    return {i: site.kind for i, site in fusion_sites(exp, contractions, gelu).items()}


@dataclasses.dataclass(frozen=True)
class Site:
    kind: str                   # 'bias' | 'bn' | 'act' | 'swish' | 'gelu'
    reads: int                  # the class it takes the fused kernel's output from
    producers: frozenset[int]   # the nodes of `reads` it fuses with (the contractions; the fused bias / bn nodes)
    partners: frozenset[int] = frozenset()      # other nodes of the same epilogue that read `reads` too


def fusion_sites(exp: Exported, contractions=CONTRACTIONS, gelu=GELU) -> dict[int, Site]:
    """node index -> Site for every fused epilogue node (see fused_nodes). The remapper fuses it only when `reads` is
    computed by one of `producers` and the node is its only reader: which depends on the extracted program, not on
    the e-graph, so extraction prices it (egraph/data.py EGraphData.fused). An activation is not checked against
    its bias's own conditions (a second-order miss: the bias is priced unfused then, the activation still fused)."""
    g = exp.egraph
    offers: dict[int, dict[str, set[int]]] = {}     # class -> contraction term -> its nodes
    for i, n in enumerate(g.nodes):
        if n.op in CONTRACTIONS and n.op in contractions:
            offers.setdefault(n.eclass, {}).setdefault(n.op, set()).add(i)
    fused: dict[int, Site] = {}
    epilogue: dict[int, dict[int, set[str]]] = {}    # class -> fused bias node -> the contractions it sits on
    bn_tuple: set[int] = set()                       # TTuple classes of a fused FusedBatchNormV3
    for i, n in enumerate(g.nodes):
        if n.op == "BiasAdd" and len(n.children) == 2:
            sides = [(n.children[0], set(offers.get(n.children[0], {})))]
        elif n.op == "AddV2" and len(n.children) == 2:
            sides = [(c, {k for k in offers.get(c, {}) if _bias_shaped(k, exp.shapes.get(c), exp.shapes.get(b))})
                     for c, b in ((n.children[0], n.children[1]), (n.children[1], n.children[0]))]
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
    for i, n in enumerate(g.nodes):
        allowed = ACTIVATIONS.get(n.op)
        if allowed is None or len(n.children) != 1:
            continue
        c = n.children[0]
        producers = {j for j, kinds in epilogue.get(c, {}).items() if kinds & allowed}
        if n.op in BN_ACTIVATIONS:
            producers |= bn_out.get(c, set())
        if producers:
            fused[i] = Site("act", c, frozenset(producers))
    _swish_sites(g, epilogue, fused)
    _gelu_sites(exp, gelu, fused)
    return fused


def _gelu_sites(exp: Exported, gelu, fused: dict) -> None:
    """Add the five nodes of every exact GELU whose input a BiasAdd on a `gelu` contraction computes (module
    docstring)."""
    g = exp.egraph
    if not gelu:
        return
    under = {n.eclass for n in g.nodes if n.op in gelu}
    biases: dict[int, set[int]] = {}                 # class y -> its BiasAdd nodes on a gelu contraction
    for i, n in enumerate(g.nodes):
        if n.op == "BiasAdd" and len(n.children) == 2 and n.children[0] in under:
            biases.setdefault(n.eclass, set()).add(i)

    def scalar(c: int) -> bool:
        return exp.shapes.get(c) == ()

    by_op: dict[str, dict[int, list[int]]] = {}      # op -> class -> its nodes
    for i, n in enumerate(g.nodes):
        by_op.setdefault(n.op, {}).setdefault(n.eclass, []).append(i)

    def scaled(i: int) -> Optional[int]:
        """The class Mul node i scales by a scalar, or None."""
        a, b = g.nodes[i].children
        return a if scalar(b) and not scalar(a) else b if scalar(a) and not scalar(b) else None

    for m3 in [i for i, n in enumerate(g.nodes) if n.op == "Mul" and len(n.children) == 2]:
        for e_cls, h_cls in (g.nodes[m3].children, g.nodes[m3].children[::-1]):
            for e in by_op.get("Erfc", {}).get(e_cls, []):
                for m1 in by_op.get("Mul", {}).get(g.nodes[e].children[0], []):
                    neg_cls = scaled(m1)
                    for n1 in by_op.get("Neg", {}).get(neg_cls, []) if neg_cls is not None else []:
                        y = g.nodes[n1].children[0]
                        producers = frozenset(biases.get(y, ()))
                        m2s = [j for j in by_op.get("Mul", {}).get(h_cls, []) if scaled(j) == y]
                        if not producers or not m2s:
                            continue
                        for j in m2s:
                            fused[j] = Site("gelu", y, producers, frozenset({n1}))
                        fused[n1] = Site("gelu", y, producers, frozenset(m2s))
                        fused[m1] = Site("gelu", neg_cls, frozenset({n1}))
                        fused[e] = Site("gelu", g.nodes[e].children[0], frozenset({m1}))
                        fused[m3] = Site("gelu", e_cls, frozenset({e}))


def _swish_sites(g, epilogue: dict, fused: dict) -> None:
    """Add the Sigmoid and Mul nodes of every swish Mul(y, Sigmoid(y)) whose y a fused BiasAdd on a SWISH contraction
    computes (module docstring)."""
    sigmoids: dict[int, dict[int, set[int]]] = {}    # class -> input class y -> its Sigmoid(y) nodes
    for i, n in enumerate(g.nodes):
        if n.op == "Sigmoid" and len(n.children) == 1:
            sigmoids.setdefault(n.eclass, {}).setdefault(n.children[0], set()).add(i)
    muls: dict[int, set[int]] = {}                   # Sigmoid node -> the swish Mul nodes that read it
    for i, n in enumerate(g.nodes):
        if n.op != "Mul" or len(n.children) != 2:
            continue
        for y, s in (n.children, n.children[::-1]):
            sig = sigmoids.get(s, {}).get(y)
            producers = frozenset(j for j, kinds in epilogue.get(y, {}).items()
                                  if g.nodes[j].op == "BiasAdd" and kinds & SWISH)
            if sig and producers:
                fused[i] = Site("swish", y, producers, frozenset(sig))
                for j in sig:
                    muls.setdefault(j, set()).add(i)
                break
    for j, partners in muls.items():
        fused[j] = Site("swish", g.nodes[j].children[0], fused[min(partners)].producers, frozenset(partners))
