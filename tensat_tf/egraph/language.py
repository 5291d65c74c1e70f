"""The egglog term language, generated from its declaration (tensat_tf/terms.py) and the op table (tensat_tf/ops.py).

We talk to egglog through its low-level bindings (programs and command objects) rather than the typed Python API:
the language and the rules are data (the op table, rule files), and the bindings let one table entry become one
constructor without per-op Python functions. Loading goes through `let` commands, one per TF node, which is linear
in graph size (one nested expression is super-linear: measured 55 s for 20k nodes against 10 s with `let`).

Sorts
  Tensor   one tensor value. Leaves: (Input name), (Weight id), (FConst x) a float scalar that rules create (a
           batch norm's epsilon). Typed ops from the table.
  TTuple   a node with several (or unknown) outputs: (Op key args) for opaque nodes, Split/SplitV.
  TList    argument list of an opaque node: (TCons t rest) / (TNil).
  (Out tt i) is output i of a tuple; (Ctl tt) stands for a control edge from that node.
Analysis (ruleset `shapes`)
  (IsConst t): t depends only on weights.
  (Positive t): t is a weight whose every element is a finite float > 0 (normal, not subnormal), decided at ingest
  from its data (tensat_tf/egraph/ingest.py); rules guard value-dependent identities with it (`(positive ?s)`).
  Not propagated through ops: a product of positives may underflow to 0.
  (Floating t): t is a weight of a floating dtype, decided at ingest, or a weight-only term of FLOAT_KEEPING's ops
  on one (a filter a rule folded, e.g. F04's scaled depthwise filter that F32 then writes as taps); rules that write
  an op only floats have (DepthwiseConv2dNative for a Mul) guard it on the weight operand (`(float ?g)`), which a
  binary op shares with its other operand.
  (FewReaders t): t is a graph tensor that 2 to ingest.MERGE_READERS projections of one kind (Einsums or
  BatchMatMulV2s by a weight) read, decided at ingest; the N-way merges of rules/einsum.rules guard their shared
  input with it (`(few-readers ?x)`).
  (Made t "RULE"): rule RULE unioned a right side into t's class (provenance for the report's rules_applied).
  (shape t) -> (Vec i64): filled for graph tensors at ingest (TF shape inference, symbols from
  tensat_tf/symbolic.py) and by the table's shape rules for terms that rewrites create; dims are sizes >= 0, -1
  unknown, <= -2 symbols (tensat_tf/ops.py). It has no merge: two different shapes for one e-class are a soundness
  bug, and egglog reports them as an error instead of silently keeping one.
  (Concrete t): every dim of t's shape is a size (rules/compile.py requires it where a rule uses a shape as numbers).
"""
from __future__ import annotations

import logging

from egglog import bindings

from tensat_tf import ops, terms
from tensat_tf.egraph import session

# egglog's Rust core logs every command it runs (whole programs) at INFO through Python logging; keep it to warnings.
for _name in ("egglog", "egglog_bridge", "egglog_ast", "egglog_core_relations", "egglog_numeric_id"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def _constructor(c: terms.Constructor) -> str:
    return f"(constructor {c.name} ({' '.join(c.arg_sorts)}) {c.sort})"


# The sorts and structural constructors come from tensat_tf/terms.py, the typed ones are added by program().
_PRELUDE = "\n(sort IVec (Vec i64))\n" + "\n".join(
    [f"(datatype {s})" for s in terms.TERM_SORTS] + [_constructor(c) for c in terms.STRUCTURAL]) + """
(function shape (Tensor) IVec :no-merge)
(relation IsConst (Tensor))
(relation Positive (Tensor))
(relation Floating (Tensor))
(relation FewReaders (Tensor))
(relation Made (Tensor String))
(ruleset shapes)
(rule ((= t (Weight i))) ((IsConst t)) :ruleset shapes)
(rule ((= t (FConst f))) ((IsConst t) (set (shape t) (vec-of))) :ruleset shapes)
(relation Concrete (Tensor))
""" + "\n".join(   # every dim is a size (>= 0): no unknown (-1) and no symbol (<= -2), see tensat_tf/ops.py
    "(rule ((= s (shape t)) (= (vec-length s) {}){}) ((Concrete t)) :ruleset shapes)".format(
        r, "".join(f" (>= (vec-get s {i}) 0)" for i in range(r))) for r in range(9))

SPAN = bindings.RustSpan("tensat_tf", 0, 0)


def program() -> str:
    """The whole language declaration (constructors of every table op plus their shape rules)."""
    lines = [_PRELUDE] + [_constructor(c) for c in terms.TYPED]
    for spec in ops.BY_TERM.values():
        lines.extend(spec.shape_rules)
        lines.append(_const_rule(spec))
        if spec.term in FLOAT_KEEPING:
            lines.extend(_floating_rules(spec))
    return "\n".join(lines)


# Ops whose output has the dtype of every tensor input (TF's binary ops take one dtype for both operands): a
# weight-only term of one of them on a floating operand is floating. Only weight-only terms (IsConst) get it, the
# ones `(float ?w)` guards are written for.
FLOAT_KEEPING = ("Reshape", "Mul", "AddV2", "Sub", "Neg", "Pad", "Slice", "Transpose", "ConcatV2", "ExpandDims",
                 "Sum")


def _pattern(spec: ops.OpSpec) -> tuple[str, list[str]]:
    """The op's term with a variable per literal and per tensor input, and the tensor inputs' variables."""
    lits = [f"l{i}" for i in range(len(spec.literals))]
    xs = [f"x{i}" for i in range(spec.n_tensor_inputs)]
    return f"({spec.term} {' '.join(lits + xs)})", xs


def _floating_rules(spec: ops.OpSpec) -> list[str]:
    term, xs = _pattern(spec)
    return [f"(rule ((= t {term}) (IsConst t) (Floating {x})) ((Floating t)) :ruleset shapes)" for x in xs]


def _const_rule(spec: ops.OpSpec) -> str:
    """IsConst: a typed term whose tensor inputs are all weight-only is weight-only (folded at emit, costs 0)."""
    term, xs = _pattern(spec)
    consts = " ".join(f"(IsConst {x})" for x in xs)
    if spec.output_sort == "Tensor":
        return f"(rule ((= t {term}) {consts}) ((IsConst t)) :ruleset shapes)"
    return f"(rule ((= tt {term}) (= t (Out tt k)) {consts}) ((IsConst t)) :ruleset shapes)"


def new_egraph() -> bindings.EGraph:
    eg = bindings.EGraph()
    eg.run_program(*session.parse(eg, program()))
    return eg


# ------------------------------------------------------------------ command builders (cheap, no parsing)
def lit(value) -> bindings.Lit | bindings.Call:
    """A literal argument: int/bool -> i64, str -> String, tuple/list of ints -> IVec."""
    if isinstance(value, bool):
        return bindings.Lit(SPAN, bindings.Int(int(value)))
    if isinstance(value, int):
        return bindings.Lit(SPAN, bindings.Int(value))
    if isinstance(value, str):
        return bindings.Lit(SPAN, bindings.String(value))
    if isinstance(value, float):
        return bindings.Lit(SPAN, bindings.Float(value))
    return bindings.Call(SPAN, "vec-of", [bindings.Lit(SPAN, bindings.Int(int(v))) for v in value])


def var(name: str) -> bindings.Var:
    return bindings.Var(SPAN, name)


def call(fn: str, args: list) -> bindings.Call:
    return bindings.Call(SPAN, fn, args)


def let(name: str, expr) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Let(SPAN, name, expr))


def fact(relation: str, args: list) -> bindings.ActionCommand:
    """(relation args...): a relation fact (Positive)."""
    return bindings.ActionCommand(bindings.Expr_(SPAN, call(relation, args)))


def union(a, b) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Union(SPAN, a, b))


def set_fn(fn: str, args: list, dims) -> bindings.ActionCommand:
    """(set (fn args...) (vec-of dims...)): an IVec-valued fact (einsum-spec)."""
    return bindings.ActionCommand(bindings.Set(SPAN, fn, args, lit(tuple(dims))))


def set_shape(tensor_expr, dims) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Set(SPAN, "shape", [tensor_expr], lit(tuple(dims))))


def tlist(items: list) -> bindings.Call:
    expr = call("TNil", [])
    for item in reversed(items):
        expr = call("TCons", [item, expr])
    return expr


def run_shapes(eg: bindings.EGraph) -> None:
    eg.run_program(*session.parse(eg, "(run-schedule (saturate (run shapes)))"))
