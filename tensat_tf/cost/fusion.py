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
What it is worth, measured by fusion_bench (fastest of 7 interleaved blocks, R=8 copies, 1 thread, other jobs on the
machine): a Conv2D's bias / bias + Relu epilogue costs 0 +- 1.5 us fused against 3.1-3.4 us as separate ops at
[1,14,14,32], 7-8 us at C=128, 11-13 us at C=256. A MatMul's is NOT cheaper fused (_FusedMatMul epilogue 3.3-3.8 us
vs 2.9-3.4 us separate at 196x32x32; 6.4 vs 6.6 at x128; with Tanh the fused kernel is slower: 5-7 vs 3-3.7 us, 95 vs
17 us at x256), and the depthwise one is free at C=32/128 but 43 us slower at C=256. So only Conv2D is discounted
(Device.fused_contractions; the mechanism takes any set). Conv2D + AddV2([C]) runs as the same fused kernel as
Conv2D + BiasAdd, so the two forms cost the same and rule F05 (AddV2 -> BiasAdd) is neither rewarded nor penalised:
that matches the measurement (conv+addv2 and conv+bias take the same time).

Approximations (costs only steer extraction; the emitted graph is verified, so none of this can make it wrong):
  - The test is on e-classes: a node is priced fused when its input class OFFERS a contraction (or a fused bias /
    bn node), although extraction may pick another e-node of that class. After a fold (rule F02), the class of
    `Mul(Conv2D(x, w), g)` also holds `Conv2D(x, w*g)`, so the original AddV2 on it is discounted too: the original
    program's predicted cost is then slightly low, which only makes the pass more conservative.
  - The same holds after a conv merge (MERGE-CONV-*): a bias on a class that holds both a Conv2D and an `Out` of the
    Split of a merged conv stays discounted, though on the merged form it would sit on a Split and run unfused.
    Per-node costs cannot tell the two apart; on zoo:real_resnet50v2 the merged form is chosen with and without
    fusion-aware costs alike.
  - The remapper also requires the contraction's output to have no other reader. That is a property of the
    extracted program, not of a node: each fused node names the class it must be the only reader of
    (fusion_sites), and extraction adds back its discount when the program gives that class another reader
    (EGraphData.sole_reader, extract/dag.py, extract/ilp.py). Without it, MobileNetV3's hard-swish lost 18 fusions:
    a scalar folded into a second bias of the same convolution looked free on both biases.
  - GPU devices fuse nothing here: the GPU remapper fuses a different set and nothing was measured there.
"""
from __future__ import annotations

from typing import Optional, Sequence

from tensat_tf.egraph.export import Exported

CONTRACTIONS = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})
# activation term -> contractions whose fused bias it joins (remapper's FindContractionWithBiasAndActivation)
ACTIVATIONS = {"Relu": CONTRACTIONS, "ReluSix": CONTRACTIONS,
               "Tanh": frozenset({"MatMul"}), "Sigmoid": frozenset({"MatMul"})}
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


def fused_nodes(exp: Exported, contractions=CONTRACTIONS) -> dict[int, str]:
    """node index -> 'bias' | 'bn' | 'act' for every e-node that runs as the epilogue of a fused contraction, the
    contractions limited to `contractions` (the ones whose fusion pays on the device: Device)."""
    return {i: kind for i, (kind, _) in fusion_sites(exp, contractions).items()}


def fusion_sites(exp: Exported, contractions=CONTRACTIONS) -> dict[int, tuple[str, int]]:
    """node index -> (kind, the class it reads the fused kernel's output from) for every fused epilogue node (see
    fused_nodes). The remapper fuses only when that output has no other reader: the bias node must be the
    contraction's only reader, the activation the bias's (or batch norm's) only reader. Whether it is depends on the
    extracted program, not on the e-graph: extraction prices it (egraph/data.py EGraphData.sole_reader)."""
    g = exp.egraph
    offers: dict[int, set[str]] = {}            # class -> contraction terms among its e-nodes
    for n in g.nodes:
        if n.op in CONTRACTIONS and n.op in contractions:
            offers.setdefault(n.eclass, set()).add(n.op)
    fused: dict[int, tuple[str, int]] = {}
    epilogue: dict[int, set[str]] = {}          # class -> contractions a fused bias node of it sits on
    bn_tuple: set[int] = set()                  # TTuple classes of a fused FusedBatchNormV3
    for i, n in enumerate(g.nodes):
        reads = None
        if n.op == "BiasAdd" and len(n.children) == 2:
            kinds = offers.get(n.children[0], set())
            reads = n.children[0]
        elif n.op == "AddV2" and len(n.children) == 2:
            kinds = set()
            for c, b in ((n.children[0], n.children[1]), (n.children[1], n.children[0])):
                here = {k for k in offers.get(c, ()) if _bias_shaped(k, exp.shapes.get(c), exp.shapes.get(b))}
                if here and reads is None:
                    reads = c
                kinds |= here
        elif n.op == "FusedBatchNormV3" and n.children and "Conv2D" in offers.get(n.children[0], ()):
            fused[i] = ("bn", n.children[0])
            bn_tuple.add(n.eclass)
            continue
        else:
            continue
        if kinds:
            fused[i] = ("bias", reads)
            epilogue.setdefault(n.eclass, set()).update(kinds)
    bn_out = {n.eclass for n in g.nodes if n.op == "Out" and n.children and n.children[0] in bn_tuple
              and n.payload and n.payload[0] == 0}
    for i, n in enumerate(g.nodes):
        allowed = ACTIVATIONS.get(n.op)
        if allowed is None or len(n.children) != 1:
            continue
        c = n.children[0]
        if epilogue.get(c, set()) & allowed or (c in bn_out and n.op in BN_ACTIVATIONS):
            fused[i] = ("act", c)
    return fused
