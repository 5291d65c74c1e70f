"""Einsum equations: the subset the term language types, their canonical spelling, and what shapes and costs need.

Keras 3 writes its projections (EinsumDense, MultiHeadAttention) as two-operand Einsum ops with explicit outputs,
e.g. `abc,cde->abde`; MultiHeadAttention spells its attention products with other letters (`BTNH,BSNH->BNTS`).
An equation is typed when it has exactly two operands, an explicit `->` output, no ellipsis, no label twice in one
operand or in the output, and every output label in some operand (everything else stays an opaque op). Typed
equations are kept in canonical spelling: labels renamed to a, b, c, ... in order of first appearance, spaces
removed, so rules match one spelling (`BTNH,BSNH->BNTS` is `abcd,aecd->acbe`); renaming labels does not change
what the op computes.

The shape analysis reads an equation through `(einsum-spec EQ)`, a vector
    [rank of operand 0, rank of operand 1, output rank r, i_0, ..., i_{r-1}, p_0, q_0, p_1, q_1, ...]
where output dim k is dim i_k of the two operands' shapes appended (operand 0 first), and each pair (p, q) is two
positions in that appended shape that carry one label: the output's shape is derived only where each pair's dims
are equal (`Equation.same`). The facts are set for the equations in KNOWN (those the rule files and their tests
write) in every e-graph, and for each equation of an ingested graph at ingest.
"""
from __future__ import annotations

import dataclasses
import math
import string
from typing import Optional, Sequence

_LABELS = string.ascii_lowercase


@dataclasses.dataclass(frozen=True)
class Equation:
    operands: tuple[str, str]
    output: str

    @property
    def text(self) -> str:
        return f"{self.operands[0]},{self.operands[1]}->{self.output}"

    @property
    def spec(self) -> tuple[int, ...]:
        a, b = self.operands
        where = {}
        for i, label in enumerate(a + b):
            where.setdefault(label, i)      # the first operand that carries a label gives its dim
        return (len(a), len(b), len(self.output)) + tuple(where[label] for label in self.output) + self.same

    @property
    def same(self) -> tuple[int, ...]:
        """Pairs of positions in the two operands' shapes appended that carry one label (each label is in each
        operand at most once). TF requires their dims equal at run time, but the graph may spell them differently:
        in a cross attention the query's batch is one graph input's symbol and the key's another's, and TF's own
        inference leaves the product's batch unknown. Reading the label from operand 0 alone then gave a dim that
        disagreed with ingest's fact (egglog's shape has one value per class: a panic, and the pass kept its input).
        So the shape rules derive an output only where every pair is equal (they are the tail of `spec`: one fact per
        equation, as before, so that e-graphs without such a pair number their values exactly as they did)."""
        a, b = self.operands
        return tuple(k for j, label in enumerate(b) if label in a for k in (a.index(label), len(a) + j))

    def label_dims(self, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
        """label -> dim, from concrete operand shapes (first operand that carries it)."""
        dims: dict[str, int] = {}
        for labels, shape in zip(self.operands, shapes):
            if len(labels) != len(shape):
                raise ValueError(f"einsum operand {labels} does not fit shape {tuple(shape)}")
            for label, d in zip(labels, shape):
                dims.setdefault(label, int(d))
        return dims

    def output_shape(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        dims = self.label_dims(shapes)
        return tuple(dims[label] for label in self.output)

    @property
    def output_transposed(self) -> bool:
        """Whether TF's Einsum kernel copies its result into the output's order. It contracts the operands as a
        batch matmul whose result holds the batch labels, then operand 0's free labels, then operand 1's, each group
        in the order the labels first appear (canonical spelling's alphabetical order), and transposes that result
        when the output lists them otherwise: MultiHeadAttention's scores with the key first (`aecd,abcd->acbe`)
        copy the [t, s] scores of every head, with the query first (`abcd,aecd->acbe`) they do not
        (tools/bench_forms.py attention_scores; BENCHMARKS.md)."""
        a, b = self.operands
        groups = ([x for x in self.output if x in a and x in b], [x for x in self.output if x not in b],
                  [x for x in self.output if x not in a])
        return list(self.output) != [x for g in groups for x in sorted(g)]

    def flops(self, shapes: Sequence[Sequence[int]]) -> float:
        """One multiply and one add per point of the iteration space (every label once)."""
        return 2.0 * math.prod(self.label_dims(shapes).values())


def parse(equation: str) -> Optional[Equation]:
    """The canonical Equation, or None when the equation is outside the typed subset."""
    eq = equation.replace(" ", "")
    if eq.count("->") != 1 or "." in eq:
        return None
    lhs, out = eq.split("->")
    operands = lhs.split(",")
    if len(operands) != 2 or not all(s.isascii() and s.isalpha() for s in operands) or not (
            out == "" or (out.isascii() and out.isalpha())):
        return None
    if any(len(set(s)) != len(s) for s in operands + [out]) or not set(out) <= set(operands[0] + operands[1]):
        return None
    rename: dict[str, str] = {}
    for ch in operands[0] + operands[1] + out:
        if ch not in rename:
            if len(rename) == len(_LABELS):
                return None
            rename[ch] = _LABELS[len(rename)]
    a, b = ("".join(rename[c] for c in s) for s in operands)
    return Equation((a, b), "".join(rename[c] for c in out))


def canonical(equation: str) -> Optional[str]:
    e = parse(equation)
    return None if e is None else e.text


# Equations whose shape facts every e-graph holds: the ones rules/einsum.rules writes (right sides, and the patterns and
# test bindings that name them) and the ones Keras layers emit. An equation of an ingested graph gets its fact at
# ingest either way, so one that only a pattern names (E18's key-first scores) is left out: each fact here adds classes
# to every e-graph, renumbering the rest, and equal-cost choices then fall otherwise (BENCHMARKS.md, "Rule E18").
KNOWN = tuple(sorted({canonical(e) for e in (
    "ab,bc->ac", "ab,cb->ac", "abc,cd->abd", "abc,cde->abde", "abcd,cde->abe", "abcd,de->abce",
    "abc,acd->abd", "abc,adc->abd", "abcd,abde->abce", "abcd,abed->abce",
    "abcd,aecd->acbe", "abcd,adbe->acbe", "BTNH,BSNH->BNTS", "BNTS,BSNH->BTNH",
)}))


def spec_fact(equation: str) -> str:
    """egglog action text setting the shape fact of a canonical equation."""
    e = parse(equation)
    assert e is not None and e.text == equation, equation
    return f'(set (einsum-spec "{equation}") (vec-of {" ".join(map(str, e.spec))}))'
