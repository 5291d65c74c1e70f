"""The op table: ONE entry per TF op that the e-graph understands as a typed term (and TENSOR_FORMS, a second entry
for an op whose folded input may be computed at run time).

Each entry says
  - the TF op name and the egglog constructor (term) name,
  - which attributes are kept as literal term arguments (and how they are encoded),
  - which tensor inputs must be Const and are folded into literal arguments (axis, perm, shape, split sizes),
  - how many outputs (1, or a tuple read through `Out` projections),
  - the shape rule, as egglog rules of the `shape` analysis,
  - the emitter (the default one rebuilds the NodeDef from the literals; `T` comes from the first tensor input).

Every op not in this table is ingested as an opaque `Op` node that round-trips its NodeDef exactly.

Term argument order is: kept attributes (table order), folded Const inputs (table order), tensor inputs (in order).

Dimensions are i64: a concrete size >= 0; -1 unknown (nothing is known); <= -2 a *symbol* (Grappler's convention in
GraphProperties): a positive multiple of one unknown dim of a graph input (`symbol_code`: the input dim numbered at
ingest by tensat_tf/symbolic.py, times a coefficient, so that Keras' Dense rows of a [batch, 17, C] input are 17 x
batch, and its reshape back gives the batch again), copied unchanged by every shape rule that copies a dim, so two
dims are equal exactly when they are the same concrete size or the same symbol (both are the run-time size of one
input dim, times the same coefficient). A symbol is never used as a number: shape rules that compute a dimension use
`_dim`, which returns -1 whenever an input dimension is not concrete (unknown or symbolic), so neither ever turns into
a wrong concrete number; rules/compile.py guards every dim a rule computes with (>= 0). The one rule that reads a
symbol's coefficient is a Reshape's -1 (`_reshape_symbol_rules`), which scales it exactly or gives -1.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Optional

from tensat_tf import einsum

# ---------------------------------------------------------------------------------------------- literal kinds
# bool -> i64 (0/1), int -> i64, str -> String, ints -> IVec (egglog `(Vec i64)`)
# pairs: an [n, 2] integer Const (Pad's paddings) flattened row-major into one vector
LITERAL_SORT = {"bool": "i64", "int": "i64", "str": "String", "ints": "IVec", "pairs": "IVec", "float": "f64"}


@dataclasses.dataclass(frozen=True)
class Attr:
    name: str                 # TF attribute name
    kind: str                 # bool | int | str | ints | float
    default: object = None    # value used when the NodeDef omits the attribute (TF's registered default)


@dataclasses.dataclass(frozen=True)
class ConstInput:
    index: int                # position among the TF node's inputs
    name: str                 # name used in the term and in rules
    kind: str                 # int | ints


@dataclasses.dataclass(frozen=True)
class OpSpec:
    tf_op: str
    term: str
    attrs: tuple[Attr, ...] = ()
    const_inputs: tuple[ConstInput, ...] = ()
    n_tensor_inputs: int = 1
    outputs: str = "one"                       # "one", the name of the literal that gives the output count, or
    #                                            "tuple" (a fixed number of outputs; rules read them through Out)
    shape_rules: tuple[str, ...] = ()          # egglog rule bodies (see _rule)
    accepts: Optional[Callable[[dict], bool]] = None   # extra check on the literal values (e.g. NHWC only)
    variadic: bool = False                     # ConcatV2: N inputs ingested as a right-nested binary chain
    index_type_attrs: tuple[str, ...] = ()     # type attrs of the folded Const inputs (emitted as int32)
    same_type_attrs: tuple[str, ...] = ()      # type attrs equal to T (FusedBatchNormV3's U)
    fixed_attrs: tuple[tuple[str, int], ...] = ()   # int attrs with one accepted value, set when emitting (Einsum's N)
    normalize: Optional[Callable[[dict], Optional[dict]]] = None   # literal values -> their canonical spelling at
    #                                            ingest (Einsum's equation), or None to keep the node opaque
    shape_literal: bool = False                # the first literal, "out_shape", is the output's shape as ingest
    #                                            knows it (symbols allowed): the shape rule of an op whose output
    #                                            shape is a run-time value (ReshapeT); never emitted
    symbolic_target: bool = False              # a Reshape to out_shape, whose run-time target the emitter builds
    #                                            from the graph inputs' Shape where it holds symbols (ReshapeS)
    dtype_input: int = 0                       # the tensor input whose dtype is the op's T and its output's
    #                                            (Conv2DBackpropInput's first is its int32 input_sizes)

    @property
    def literals(self) -> tuple[tuple[str, str], ...]:
        """(name, kind) of every literal argument, in term order."""
        head = (("out_shape", "ints"),) if self.shape_literal else ()
        return head + tuple((a.name, a.kind) for a in self.attrs) + tuple((c.name, c.kind) for c in self.const_inputs)

    @property
    def arg_sorts(self) -> list[str]:
        return [LITERAL_SORT[k] for _, k in self.literals] + ["Tensor"] * self.n_tensor_inputs

    @property
    def output_sort(self) -> str:
        return "Tensor" if self.outputs == "one" else "TTuple"

    def const_slots(self, n_data_inputs: int) -> dict:
        """Position among a node's n_data_inputs data inputs -> the folded Const input there (a ConstInput index may
        count from the end: ConcatV2's axis is its last input whatever N is)."""
        return {c.index % n_data_inputs: c for c in self.const_inputs}

    def const_positions(self, n_data_inputs: int) -> list[int]:
        """The positions of const_slots, in increasing order."""
        return sorted(self.const_slots(n_data_inputs))


# ---------------------------------------------------------------------------------------------- symbols
# A symbol's code: -2 - base - SYMBOL_STRIDE * (coef - 1) for coef times the input dim numbered `base` (0, 1, ...);
# a base and a coefficient past these bounds are not encoded (the dim is -1), which keeps every code and the Reshape
# rule's products (a coefficient times a tensor's element count per batch) within an i64.
SYMBOL_STRIDE = 1 << 20
MAX_SYMBOL_COEF = 1 << 31


def symbol_code(base: int, coef: int) -> int:
    """The i64 of `coef` times input dim `base`, or -1 where it has none."""
    if not (0 <= base < SYMBOL_STRIDE and 1 <= coef <= MAX_SYMBOL_COEF):
        return -1
    return -2 - base - SYMBOL_STRIDE * (coef - 1)


def symbol_parts(code: int) -> tuple[int, int]:
    """(base, coef) of a symbol's code (<= -2)."""
    n = -2 - code
    return n % SYMBOL_STRIDE, n // SYMBOL_STRIDE + 1


# ---------------------------------------------------------------------------------------------- shape helpers
def _known(d: str) -> str:
    """1 if dimension d is concrete (>= 0), 0 if it is -1 or a symbol (<= -2)."""
    return f"(max (min (+ {d} 1) 1) 0)"


def _dim(value: str, *deps: str) -> str:
    """`value` if every dimension in deps is concrete, else -1 (no branching in egglog expressions)."""
    k = _known(deps[0]) if len(deps) == 1 else "(min " + " ".join(_known(d) for d in deps[:2]) + ")"
    for d in deps[2:]:
        k = f"(min {k} {_known(d)})"
    return f"(+ (* {k} {value}) (- {k} 1))"


def _rule(pattern: str, *guards: str, shape: str, target: str = "t") -> str:
    body = " ".join((pattern,) + guards)
    return f"(rule ({body}) ((set (shape {target}) {shape})) :ruleset shapes)"


def _spatial(h: str, k: str, s: str, d: str, padding: str) -> str:
    """Output size of one spatial dimension of a conv or pool (TF's formulas)."""
    if padding == "SAME":
        return _dim(f"(/ (+ {h} (- {s} 1)) {s})", h)
    # VALID: floor((H - d*(k-1) - 1) / s) + 1
    return _dim(f"(+ (/ (- (- {h} (* {d} (- {k} 1))) 1) {s}) 1)", h)


def _same_shape(term: str, arity: int) -> tuple[str, ...]:
    args = " ".join("abcdefgh"[:arity])
    return (_rule(f"(= t ({term} {args})) (= sa (shape a))", shape="sa"),)


def _conv_rules(term: str, channels_out: str) -> tuple[str, ...]:
    rules = []
    for pad in ("SAME", "VALID"):
        h = _spatial("(vec-get sx 1)", "(vec-get sw 0)", "(vec-get st 1)", "(vec-get dl 1)", pad)
        w = _spatial("(vec-get sx 2)", "(vec-get sw 1)", "(vec-get st 2)", "(vec-get dl 2)", pad)
        rules.append(_rule(
            f'(= t ({term} st "{pad}" dl x w)) (= sx (shape x)) (= sw (shape w))',
            "(= (vec-length sx) 4) (= (vec-length sw) 4)",
            shape=f"(vec-of (vec-get sx 0) {h} {w} {channels_out})"))
    return tuple(rules)


def _pool_rules(term: str) -> tuple[str, ...]:
    rules = []
    for pad in ("SAME", "VALID"):
        h = _spatial("(vec-get sx 1)", "(vec-get ks 1)", "(vec-get st 1)", "1", pad)
        w = _spatial("(vec-get sx 2)", "(vec-get ks 2)", "(vec-get st 2)", "1", pad)
        rules.append(_rule(f'(= t ({term} ks st "{pad}" x)) (= sx (shape x)) (= (vec-length sx) 4)',
                           shape=f"(vec-of (vec-get sx 0) {h} {w} (vec-get sx 3))"))
    return tuple(rules)


def _elementwise_rules(term: str) -> tuple[str, ...]:
    """Broadcasting is only derived for the forms rules create: equal shapes, scalar, and a bias on the last dim."""
    p = f"(= t ({term} a b)) (= sa (shape a)) (= sb (shape b))"
    return (
        _rule(p, "(= sa sb)", shape="sa"),
        _rule(p, "(= (vec-length sb) 0)", shape="sa"),
        _rule(p, "(= (vec-length sa) 0)", shape="sb"),
        _rule(p, "(= (vec-length sb) 1) (> (vec-length sa) 1)",
              "(= (vec-get sb 0) (vec-get sa (- (vec-length sa) 1)))", "(>= (vec-get sb 0) 0)", shape="sa"),
        _rule(p, "(= (vec-length sa) 1) (> (vec-length sb) 1)",
              "(= (vec-get sa 0) (vec-get sb (- (vec-length sb) 1)))", "(>= (vec-get sa 0) 0)", shape="sb"),
    ) + _suffix_broadcast_rules(p) + _same_rank_broadcast_rules(p)


def _suffix_broadcast_rules(p: str) -> tuple[str, ...]:
    """A lower-rank operand of rank 2-4 whose known dims equal the other's last ones (EinsumDense's [heads, dim]
    bias on [batch, seq, heads, dim]): the result has the other's shape."""
    rules = []
    for r in (2, 3, 4):
        for small, big in (("sb", "sa"), ("sa", "sb")):
            same = " ".join(f"(= (vec-get {small} {i}) (vec-get {big} (+ (- (vec-length {big}) {r}) {i}))) "
                            f"(>= (vec-get {small} {i}) 0)" for i in range(r))
            rules.append(_rule(p, f"(= (vec-length {small}) {r}) (> (vec-length {big}) {r})", same, shape=big))
    return tuple(rules)


def _same_rank_broadcast_rules(p: str) -> tuple[str, ...]:
    """Two same-rank broadcasts that Keras' LayerNormalization writes (rules/tf_fold.rules F25): a row statistic
    [d0.., 1] against [d0.., C] (equal leading dims; an unknown -1 in both stays unknown in the result, as with
    equal shapes above), and a per-channel vector [1.., 1, C] against [d0.., C]. Either way the result has the
    other operand's shape."""
    rules = []
    for r in (2, 3, 4):
        for small, big in (("sb", "sa"), ("sa", "sb")):
            same = f"(= (vec-length {small}) {r}) (= (vec-length {big}) {r})"
            rows = " ".join(f"(= (vec-get {small} {i}) (vec-get {big} {i}))" for i in range(r - 1))
            rules.append(_rule(p, same, rows, f"(= (vec-get {small} {r - 1}) 1)", f"(!= {small} {big})",
                               shape=big))
            ones = " ".join(f"(= (vec-get {small} {i}) 1)" for i in range(r - 1))
            rules.append(_rule(p, same, ones, f"(= (vec-get {small} {r - 1}) (vec-get {big} {r - 1}))",
                               f"(>= (vec-get {small} {r - 1}) 0)", f"(!= {small} {big})", shape=big))
    return tuple(rules)


def _outer_rules(term: str) -> tuple[str, ...]:
    """[d0, 1, p, c] against [o, p, c]: [d0, o, p, c], the taps product of rules/tf_fold.rules F32 (each output pixel
    o of a tiny depthwise conv against every input pixel p); p and c sizes."""
    return (_rule(f"(= t ({term} a b)) (= sa (shape a)) (= sb (shape b))",
                  "(= (vec-length sa) 4) (= (vec-length sb) 3) (= (vec-get sa 1) 1)",
                  "(= (vec-get sa 2) (vec-get sb 1)) (= (vec-get sa 3) (vec-get sb 2))",
                  "(>= (vec-get sb 0) 0) (>= (vec-get sb 1) 0) (>= (vec-get sb 2) 0)",
                  shape="(vec-of (vec-get sa 0) (vec-get sb 0) (vec-get sa 2) (vec-get sa 3))"),)


def _slice_rules() -> tuple[str, ...]:
    """Slice with every size given (no -1: rules write them so): the output's shape is the sizes."""
    return (_rule("(= t (Slice b z x)) (= sx (shape x)) (= (vec-length sx) (vec-length z)) (vec-not-contains z -1)",
                  shape="z"),)


def _sum_rules() -> tuple[str, ...]:
    """Sum over one axis (given in [0, rank)): that dim removed, or set to 1 with keep_dims."""
    rules = []
    for r in range(1, 7):
        for a in range(r):
            head = f"(= t (Sum k (vec-of {a}) x)) (= sx (shape x)) (= (vec-length sx) {r})"
            rules.append(_rule(head, "(= k 0)", shape=f"(vec-remove sx {a})"))
            rules.append(_rule(head, "(= k 1)", shape=f"(vec-set sx {a} 1)"))
    return tuple(rules)


def _tile_rules() -> tuple[str, ...]:
    """Tile of a vector of known length by one multiple: the length times the multiple."""
    return (_rule("(= t (Tile m x)) (= sx (shape x)) (= (vec-length sx) 1) (= (vec-length m) 1)",
                  "(>= (vec-get sx 0) 0) (>= (vec-get m 0) 0)", shape="(vec-of (* (vec-get sx 0) (vec-get m 0)))"),)


def _transpose_rules() -> tuple[str, ...]:
    rules = []
    for rank in range(2, 6):
        dims = " ".join(f"(vec-get sx (vec-get p {i}))" for i in range(rank))
        rules.append(_rule("(= t (Transpose p x)) (= sx (shape x))", f"(= (vec-length p) {rank})",
                           f"(= (vec-length sx) {rank})", shape=f"(vec-of {dims})"))
    return tuple(rules)


def _pad_rules() -> tuple[str, ...]:
    """A dim padded by 0 + 0 is copied (a symbol stays itself: the batch axis of every ZeroPadding2D), any other is
    computed (concrete, else -1). z is 1 for no padding (paddings are >= 0), 0 otherwise."""
    rules = []
    for rank in range(1, 6):
        dims = []
        for i in range(rank):
            d, pad = f"(vec-get sx {i})", f"(+ (vec-get p {2 * i}) (vec-get p {2 * i + 1}))"
            z = f"(- 1 (min 1 {pad}))"
            dims.append(f"(+ (* {z} {d}) (* (- 1 {z}) {_dim(f'(+ {d} {pad})', d)}))")
        dims = " ".join(dims)
        rules.append(_rule("(= t (Pad p x)) (= sx (shape x))", f"(= (vec-length p) {2 * rank})",
                           f"(= (vec-length sx) {rank})", shape=f"(vec-of {dims})"))
    return tuple(rules)


def _squeeze_rules() -> tuple[str, ...]:
    """Squeeze of one axis (TF's range [-rank, rank)): the input's shape without that dim (the Keras Conv1D's
    Squeeze of its Conv2D's height 1, as tensat_tf/symbolic.py derives it at ingest)."""
    rules = []
    for r in range(1, 7):
        for a in range(-r, r):
            rules.append(_rule("(= t (Squeeze d x)) (= sx (shape x))", f"(= d (vec-of {a}))",
                               f"(= (vec-length sx) {r})", shape=f"(vec-remove sx {a % r})"))
    return tuple(rules)


def _expand_dims_rules() -> tuple[str, ...]:
    """ExpandDims at one axis (TF's range [-rank - 1, rank]): a 1 inserted there."""
    rules = []
    for r in range(0, 6):
        for a in range(-r - 1, r + 1):
            i = a + r + 1 if a < 0 else a
            dims = " ".join([f"(vec-get sx {k})" for k in range(i)] + ["1"]
                            + [f"(vec-get sx {k})" for k in range(i, r)])
            rules.append(_rule(f"(= t (ExpandDims {a} x)) (= sx (shape x))", f"(= (vec-length sx) {r})",
                               shape=f"(vec-of {dims})"))
    return tuple(rules)


def _prod(v: str, lo: int, hi: int) -> str:
    if lo >= hi:
        return "1"
    return f"(vec-get {v} {lo})" if hi - lo == 1 else f"(* {_prod(v, lo, hi - 1)} (vec-get {v} {hi - 1}))"


def _reshape_concrete_rules() -> tuple[str, ...]:
    """Reshape(x, [-1, k1..]) of a fully known x: the -1 is x's element count over k1*.. (what TF infers). Ingested
    Reshapes have it from TF's facts; rules/einsum.rules E10-E12 flatten [batch, seq, C] to [-1, C] rows whatever the
    batch and sequence are, which for a static input is this case."""
    rules = []
    for r in range(1, 7):
        for q in range(2, 7):
            head = ("(= t (Reshape s x)) (= sx (shape x)) " + f"(= (vec-length sx) {r}) (= (vec-length s) {q}) "
                    "(= (vec-get s 0) -1)" + "".join(f" (>= (vec-get sx {i}) 0)" for i in range(r))
                    + "".join(f" (> (vec-get s {j}) 0)" for j in range(1, q)))
            rules.append(_rule(head, shape=f"(vec-set s 0 (/ {_prod('sx', 0, r)} {_prod('s', 1, q)}))"))
    return tuple(rules)


def _scaled_symbol(code: str, scaled: str, den: str) -> str:
    """egglog: the code of symbol `code` times num / den, given scaled = coef * num (den > 0), where that is a whole
    positive multiple of its input dim, else -1 (the arithmetic of symbol_code / symbol_parts; no branching in egglog
    expressions)."""
    n = f"(- -2 {code})"
    quotient = f"(/ {scaled} {den})"
    # ok = 1 when den divides coef * num and the quotient is a coefficient (1 .. MAX_SYMBOL_COEF), else 0
    ok = (f"(min (min (- 1 (min (% {scaled} {den}) 1)) (max (min {quotient} 1) 0)) "
          f"(max (min (+ (- {MAX_SYMBOL_COEF} {quotient}) 1) 1) 0))")
    # (clamped so that the product stays an i64 where ok is 0)
    new = f"(- (- -2 (% {n} {SYMBOL_STRIDE})) (* {SYMBOL_STRIDE} (- (min {quotient} {MAX_SYMBOL_COEF}) 1)))"
    return f"(+ (* {ok} {new}) (- {ok} 1))"


def _reshape_symbol_rules() -> tuple[str, ...]:
    """Reshape(x, target with -1) where x has symbols and no -1: when x's only symbol leads and so does the -1 (x =
    [s, d1..], target [-1, k1..], every d and k a size, k's > 0: a Flatten, or Keras' Dense rows and its reshape
    back), the -1 is s * (d1*..) / (k1*..) where that is a whole multiple of s's input dim, else -1. Mirrored by
    tensat_tf/symbolic.py (egraph mode) so the facts of ingested Reshapes and the shapes of rewritten ones agree; the
    cases are disjoint."""
    rules = []
    base = "(= t (Reshape s x)) (vec-contains s -1) (= sx (shape x)) (vec-not-contains sx -1)"
    for r in range(1, 7):
        for q in range(1, 7):
            head = (f"{base} (= (vec-length sx) {r}) (= (vec-length s) {q}) (= (vec-get s 0) -1) "
                    f"(<= (vec-get sx 0) -2)" + "".join(f" (>= (vec-get sx {i}) 0)" for i in range(1, r)))
            # the product coef * d1*.. bound in the query: where it would overflow an i64 the rule does not match
            # (a failed primitive in a query is no match; in an action it is a panic), and every number the action
            # computes is at most that product
            scaled = f"(* (+ (/ (- -2 (vec-get sx 0)) {SYMBOL_STRIDE}) 1) {_prod('sx', 1, r)})"
            rules.append(_rule(head, *(f"(> (vec-get s {j}) 0)" for j in range(1, q)), f"(= scaled_ {scaled})",
                               shape=f"(vec-set s 0 {_scaled_symbol('(vec-get sx 0)', 'scaled_', _prod('s', 1, q))})"))
            for j in range(1, q):      # a zero (or a second -1, which TF refuses) in the target: -1 stays
                rules.append(_rule(head, f"(<= (vec-get s {j}) 0)", shape="s"))
    for k in range(1, 7):      # a symbol past the first dim
        rules.append(_rule(f"{base} (> (vec-length sx) {k}) (<= (vec-get sx {k}) -2)", shape="s"))
    for k in range(7):         # the -1 is not the first target dim
        rules.append(_rule(f"{base} (!= (vec-get s 0) -1) (> (vec-length sx) {k}) (<= (vec-get sx {k}) -2)",
                           shape="s"))
    return tuple(rules)


def _batch_matmul_rules() -> tuple[str, ...]:
    """Equal ranks 3 and 4; each batch dim either equal, or broadcast from a 1 on one side (one rule per case)."""
    rules = []
    for r in (3, 4):
        for cases in itertools.product(("eq", "b1", "a1"), repeat=r - 2):
            guards, dims = [], []
            for i, case in enumerate(cases):
                if case == "eq":
                    guards.append(f"(= (vec-get sa {i}) (vec-get sb {i}))")
                    dims.append(f"(vec-get sa {i})")
                elif case == "b1":
                    guards.append(f"(= (vec-get sb {i}) 1)")
                    dims.append(f"(vec-get sa {i})")
                else:
                    guards.append(f"(= (vec-get sa {i}) 1)")
                    dims.append(f"(vec-get sb {i})")
            rules.append(_rule(
                "(= t (BatchMatMulV2 ax ay a b)) (= sa (shape a)) (= sb (shape b))",
                f"(= (vec-length sa) {r}) (= (vec-length sb) {r})", *guards,
                f"(= (vec-get sa (- {r - 1} ax)) (vec-get sb (+ {r - 2} ay)))",
                shape=f"(vec-of {' '.join(dims)} (vec-get sa (+ {r - 2} ax)) (vec-get sb (- {r - 1} ay)))"))
    for r in (3, 4):        # a matrix on the right broadcasts over the batch dims (Grappler's lowering of abc,cd->abd)
        batch = " ".join(f"(vec-get sa {i})" for i in range(r - 2))
        rules.append(_rule(
            "(= t (BatchMatMulV2 ax ay a b)) (= sa (shape a)) (= sb (shape b))",
            f"(= (vec-length sa) {r}) (= (vec-length sb) 2)", f"(= (vec-get sa (- {r - 1} ax)) (vec-get sb ay))",
            shape=f"(vec-of {batch} (vec-get sa (+ {r - 2} ax)) (vec-get sb (- 1 ay)))"))
    return tuple(rules)


def _einsum_rules() -> tuple[str, ...]:
    """Output dim k is dim i_k of the operands' shapes appended, read from the equation's `einsum-spec` fact
    (tensat_tf/einsum.py), where the dims of every label both operands carry are equal (the fact's pairs; the
    BatchMatMulV2 and elementwise rules ask the same of theirs); one rule per output rank and number of shared
    labels. The declaration and the facts of the KNOWN equations come first; ingest sets the facts of the equations
    it meets."""
    head = ["(function einsum-spec (String) IVec :no-merge)"] + [einsum.spec_fact(e) for e in einsum.KNOWN]
    rules = []
    for r in range(0, 7):
        dims = " ".join(f"(vec-get sab (vec-get m {3 + k}))" for k in range(r))
        for shared in range(0, 7):
            p = [f"(vec-get sab (vec-get m {3 + r + k}))" for k in range(2 * shared)]
            same = " ".join(f"(= {p[2 * i]} {p[2 * i + 1]})" for i in range(shared))
            rules.append(_rule("(= t (Einsum eq a b)) (= m (einsum-spec eq)) (= sa (shape a)) (= sb (shape b))",
                               f"(= (vec-get m 2) {r}) (= (vec-length m) {3 + r + 2 * shared})",
                               "(= (vec-get m 0) (vec-length sa)) (= (vec-get m 1) (vec-length sb))",
                               "(= sab (vec-append sa sb))", same, shape=f"(vec-of {dims})"))
    return tuple(head + rules)


def _einsum_normalize(lit: dict) -> Optional[dict]:
    eq = einsum.canonical(lit["equation"])
    return None if eq is None else {**lit, "equation": eq}


_NHWC = lambda lit: lit.get("data_format", "NHWC") == "NHWC"   # noqa: E731  (NCHW convs do not run on TF CPU)
_CONV_ATTRS = (Attr("strides", "ints"), Attr("padding", "str"), Attr("dilations", "ints", (1, 1, 1, 1)))
_SAME_OR_VALID = lambda lit: _NHWC(lit) and lit["padding"] in ("SAME", "VALID")   # noqa: E731

# ---------------------------------------------------------------------------------------------- the table
_SPECS = [
    OpSpec("MatMul", "MatMul", (Attr("transpose_a", "bool", False), Attr("transpose_b", "bool", False)),
           n_tensor_inputs=2, shape_rules=(_rule(
               "(= t (MatMul ta tb a b)) (= sa (shape a)) (= sb (shape b))",
               "(= (vec-length sa) 2) (= (vec-length sb) 2)",
               "(= (vec-get sa (- 1 ta)) (vec-get sb tb))",
               shape="(vec-of (vec-get sa ta) (vec-get sb (- 1 tb)))"),)),
    OpSpec("BatchMatMulV2", "BatchMatMulV2", (Attr("adj_x", "bool", False), Attr("adj_y", "bool", False)),
           n_tensor_inputs=2, shape_rules=_batch_matmul_rules()),
    OpSpec("Conv2D", "Conv2D", _CONV_ATTRS, n_tensor_inputs=2, accepts=_SAME_OR_VALID,
           shape_rules=_conv_rules("Conv2D", "(vec-get sw 3)")),
    OpSpec("DepthwiseConv2dNative", "DepthwiseConv2dNative", _CONV_ATTRS, n_tensor_inputs=2, accepts=_SAME_OR_VALID,
           shape_rules=_conv_rules("DepthwiseConv2dNative",
                                    _dim("(* (vec-get sw 2) (vec-get sw 3))", "(vec-get sw 2)", "(vec-get sw 3)"))),
    OpSpec("BiasAdd", "BiasAdd", n_tensor_inputs=2, accepts=_NHWC, shape_rules=(_rule(
        "(= t (BiasAdd a b)) (= sa (shape a)) (= sb (shape b))",
        "(= (vec-length sb) 1) (= (vec-get sb 0) (vec-get sa (- (vec-length sa) 1)))", shape="sa"),)),
    OpSpec("AddV2", "AddV2", n_tensor_inputs=2, shape_rules=_elementwise_rules("AddV2")),
    OpSpec("Mul", "Mul", n_tensor_inputs=2, shape_rules=_elementwise_rules("Mul") + _outer_rules("Mul")),
    OpSpec("Sub", "Sub", n_tensor_inputs=2, shape_rules=_elementwise_rules("Sub")),
    OpSpec("Relu", "Relu", shape_rules=_same_shape("Relu", 1)),
    # "Relu6" would be "Relu" plus digits: egglog 13.2 mints fresh names as <name><counter> and they can collide.
    OpSpec("Relu6", "ReluSix", shape_rules=_same_shape("ReluSix", 1)),
    OpSpec("Sigmoid", "Sigmoid", shape_rules=_same_shape("Sigmoid", 1)),
    OpSpec("Rsqrt", "Rsqrt", shape_rules=_same_shape("Rsqrt", 1)),
    OpSpec("Tanh", "Tanh", shape_rules=_same_shape("Tanh", 1)),
    # TF's exact GELU (tf.nn.gelu, Keras 3's default): 0.5 * x * erfc(-x * 0.7071...), rules/tf_fold.rules F19
    OpSpec("Neg", "Neg", shape_rules=_same_shape("Neg", 1)),
    OpSpec("Erfc", "Erfc", shape_rules=_same_shape("Erfc", 1)),
    OpSpec("ConcatV2", "ConcatV2", const_inputs=(ConstInput(-1, "axis", "int"),), n_tensor_inputs=2, variadic=True,
           index_type_attrs=("Tidx",),
           # the other dims equal, as TF requires at run time (where two graph inputs' symbols meet, TF's inference
           # may give either or neither: derived only where they agree, as for Einsum)
           shape_rules=(_rule(
               "(= t (ConcatV2 ax a b)) (= sa (shape a)) (= sb (shape b)) (= (vec-length sa) (vec-length sb))",
               "(= (vec-set sa ax 0) (vec-set sb ax 0))",
               shape="(vec-set sa ax "
                     + _dim("(+ (vec-get sa ax) (vec-get sb ax))", "(vec-get sa ax)", "(vec-get sb ax)") + ")"),)),
    OpSpec("Split", "Split", (Attr("num_split", "int"),), const_inputs=(ConstInput(0, "axis", "int"),),
           outputs="num_split", shape_rules=(_rule(
               "(= t (Out tt i)) (= tt (Split n ax x)) (= sx (shape x))",
               shape="(vec-set sx ax " + _dim("(/ (vec-get sx ax) n)", "(vec-get sx ax)") + ")"),)),
    OpSpec("SplitV", "SplitV", (Attr("num_split", "int"),),
           const_inputs=(ConstInput(1, "size_splits", "ints"), ConstInput(2, "axis", "int")),
           index_type_attrs=("Tlen",),
           outputs="num_split", shape_rules=(_rule(
               "(= t (Out tt i)) (= tt (SplitV n sz ax x)) (= sx (shape x))",
               shape="(vec-set sx ax (vec-get sz i))"),)),
    OpSpec("Transpose", "Transpose", const_inputs=(ConstInput(1, "perm", "ints"),), index_type_attrs=("Tperm",),
           shape_rules=_transpose_rules()),
    # A -1 in the target is left as -1 when the input has an unknown dim (exactly what TF infers). Resolving it for a
    # fully known input needs a product over the dims; TF's facts cover ingested graphs, and rules write targets
    # without -1, so that case is not derived. With symbols, see _reshape_symbol_rules.
    OpSpec("Reshape", "Reshape", const_inputs=(ConstInput(1, "shape", "ints"),), index_type_attrs=("Tshape",),
           shape_rules=(
        _rule("(= t (Reshape s x)) (vec-not-contains s -1)", shape="s"),
        _rule("(= t (Reshape s x)) (vec-contains s -1) (= sx (shape x)) (vec-contains sx -1)", shape="s"))
        + _reshape_concrete_rules() + _reshape_symbol_rules()),
    # Pad: zero padding (TENSAT's `enlarge` of a conv kernel is a Pad of the smaller kernel)
    OpSpec("Pad", "Pad", const_inputs=(ConstInput(1, "paddings", "pairs"),), index_type_attrs=("Tpaddings",),
           shape_rules=_pad_rules()),
    # inference-mode batch norm (is_training=False, NHWC): output 0 is y, the other five are statistics
    OpSpec("FusedBatchNormV3", "FusedBatchNormV3",
           (Attr("epsilon", "float", 0.0001), Attr("data_format", "str", "NHWC"), Attr("is_training", "bool", True)),
           n_tensor_inputs=5, outputs="tuple", same_type_attrs=("U",),
           accepts=lambda lit: lit["data_format"] == "NHWC" and not lit["is_training"],
           shape_rules=(_rule("(= t (Out tt 0)) (= tt (FusedBatchNormV3 e f i x g b m v)) (= sx (shape x))",
                              shape="sx"),)),
    # two-operand Einsum (Keras EinsumDense / MultiHeadAttention), equation in canonical spelling (tensat_tf/einsum.py)
    OpSpec("Einsum", "Einsum", (Attr("equation", "str"),), n_tensor_inputs=2, fixed_attrs=(("N", 2),),
           normalize=_einsum_normalize, shape_rules=_einsum_rules()),
    OpSpec("MaxPool", "MaxPool", (Attr("ksize", "ints"), Attr("strides", "ints"), Attr("padding", "str")),
           accepts=_SAME_OR_VALID, shape_rules=_pool_rules("MaxPool")),
    OpSpec("AvgPool", "AvgPool", (Attr("ksize", "ints"), Attr("strides", "ints"), Attr("padding", "str")),
           accepts=_SAME_OR_VALID, shape_rules=_pool_rules("AvgPool")),
    # Keras' Conv1D (and its 1-D pools) run a Conv2D between ExpandDims and Squeeze of the height axis
    # (rules/squeeze.rules moves the layer's bias, batch norm and activation inside, where TF fuses them); one axis
    # each, the only form those write
    OpSpec("Squeeze", "Squeeze", (Attr("squeeze_dims", "ints", ()),), accepts=lambda lit: len(lit["squeeze_dims"]) == 1,
           shape_rules=_squeeze_rules()),
    OpSpec("ExpandDims", "ExpandDims", const_inputs=(ConstInput(1, "dim", "int"),), index_type_attrs=("Tdim",),
           shape_rules=_expand_dims_rules()),
    # TF's convolution() runs a dilated conv as SpaceToBatchND -> conv -> BatchToSpaceND (rules/dilation.rules turns
    # them back into one dilated Conv2D), with constant paddings and crops where the spatial dims are static (and
    # TENSOR_FORMS where they are computed at run time). No shape rule: rules only read them, ingest gives them their
    # shapes (tensat_tf/symbolic.py scales the batch)
    # Keras' Conv2DTranspose (Conv1DTranspose too, inside ExpandDims / Squeeze): a transposed conv, filter [kh, kw,
    # out, in], whose output size is the run-time tensor input_sizes (built from the dynamic batch). Term:
    # (Conv2DBackpropInput out_shape strides padding dilations input_sizes filter x); the output's shape literal from
    # ingest's facts, as for ReshapeT. rules/tf_fold.rules F40 folds a batch norm's scale into the filter.
    OpSpec("Conv2DBackpropInput", "Conv2DBackpropInput", _CONV_ATTRS, n_tensor_inputs=3, accepts=_SAME_OR_VALID,
           shape_literal=True, dtype_input=1,
           shape_rules=(_rule("(= t (Conv2DBackpropInput s st p dl sz w x))", shape="s"),)),
    OpSpec("SpaceToBatchND", "SpaceToBatchND", const_inputs=(ConstInput(1, "block_shape", "ints"),
                                                             ConstInput(2, "paddings", "pairs")),
           index_type_attrs=("Tblock_shape", "Tpaddings")),
    OpSpec("BatchToSpaceND", "BatchToSpaceND", const_inputs=(ConstInput(1, "block_shape", "ints"),
                                                             ConstInput(2, "crops", "pairs")),
           index_type_attrs=("Tblock_shape", "Tcrops")),
]

# The same TF op with the input that TABLE folds into a literal read as a tensor instead, for a node where that input
# is computed at run time. Reshape: Keras' Dense on [batch, seq, C] with a dynamic sequence reshapes its MatMul
# back to a target built from Shape (passes/shapes.py keeps it so), and rules/tf_fold.rules F23/F24 move the bias and
# the GELU through it, to the MatMul the remapper fuses them with. Term: (ReshapeT out_shape x target); the shape
# literal is the output's shape from ingest's facts (its last dim is what the rules read); the target is int32.
_TENSOR_FORMS = [
    OpSpec("Reshape", "ReshapeT", n_tensor_inputs=2, index_type_attrs=("Tshape",), shape_literal=True,
           shape_rules=(_rule("(= t (ReshapeT s x g))", shape="s"),)),
    # a dilated conv over a dynamic length: the paddings and crops computed at run time (one tensor for both where
    # the conv is VALID or causal)
    OpSpec("SpaceToBatchND", "SpaceToBatchNDT", const_inputs=(ConstInput(1, "block_shape", "ints"),), n_tensor_inputs=2,
           index_type_attrs=("Tblock_shape", "Tpaddings")),
    OpSpec("BatchToSpaceND", "BatchToSpaceNDT", const_inputs=(ConstInput(1, "block_shape", "ints"),), n_tensor_inputs=2,
           index_type_attrs=("Tblock_shape", "Tcrops")),
]

# A Reshape that rules write and ingest never reads: to `out_shape`, which may hold symbols (the module docstring:
# the run-time size of one input dim). A rule that flattens a [batch, seq, C] tensor to rows for a
# MatMul (rules/einsum.rules E10-E12) reshapes the rows back to [batch, seq, N] with both leading dims unknown: no
# constant target can say that (one -1 at most), so the emitter builds it at run time from Shape(graph input),
# sliced and concatenated with constants and shared by every such reshape (tensat_tf/shape_values.py, as the
# shape-plumbing pass does for Keras' own Dense layers). A symbol in any other literal stays forbidden (rules/compile.py
# guards every dim a rule uses as a number), so only this term can carry one to the emitter.
_SYMBOLIC_FORMS = [
    OpSpec("Reshape", "ReshapeS", index_type_attrs=("Tshape",), shape_literal=True, symbolic_target=True,
           shape_rules=(_rule("(= t (ReshapeS s x))", shape="s"),)),
]

# TF ops ingested as one of the table's terms when they have exactly two data inputs: AddN of two tensors (which
# AddN requires to have one shape) is their AddV2. Grappler's arithmetic optimizer writes Keras' LayerNormalization
# sums as AddN on some graphs (ViT: AddN(mean term, x term) + beta), where rule F26 must see an AddV2. The node
# itself is emitted unchanged when extraction keeps it (tensat_tf/egraph/emit.py copies an original NodeDef). Add is
# AddV2 for every dtype but string (which it concatenates; ingest checks): Grappler's arithmetic optimizer writes
# Keras' Normalization layer (x - mean) as Add(x, -mean), which rule F36 must see.
BINARY_ALIASES: dict[str, str] = {"AddN": "AddV2", "Add": "AddV2"}

TABLE: dict[str, OpSpec] = {s.tf_op: s for s in _SPECS}
TENSOR_FORMS: dict[str, OpSpec] = {s.tf_op: s for s in _TENSOR_FORMS}
# Ops that only rules write (ingest keeps these TF ops opaque, so no existing graph changes form): the tiny depthwise
# conv's taps (rules/tf_fold.rules F32, F33) slice the padded filter, which the emitter folds, and sum the products;
# a per-channel vector on a narrow last dim is tiled along the widened rows (F35-F37), folded by the emitter too.
_RULE_FORMS = [
    OpSpec("Tile", "Tile", const_inputs=(ConstInput(1, "multiples", "ints"),), index_type_attrs=("Tmultiples",),
           shape_rules=_tile_rules()),
    OpSpec("Slice", "Slice", const_inputs=(ConstInput(1, "begin", "ints"), ConstInput(2, "size", "ints")),
           index_type_attrs=("Index",), shape_rules=_slice_rules()),
    OpSpec("Sum", "Sum", (Attr("keep_dims", "bool", False),), const_inputs=(ConstInput(1, "axis", "ints"),),
           index_type_attrs=("Tidx",), shape_rules=_sum_rules()),
]

BY_TERM: dict[str, OpSpec] = {s.term: s for s in _SPECS + _TENSOR_FORMS + _SYMBOLIC_FORMS + _RULE_FORMS}
# The constructors that are not TF ops (leaves, opaque nodes, projections, lists) and the check that no two
# constructor names collide in egglog are in tensat_tf/terms.py, the declaration of the whole term language.
