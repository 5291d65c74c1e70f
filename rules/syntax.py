"""The rule file syntax: s-expressions close to TENSAT's, over the term language of the op table.

A file starts with `(family NAME)` and holds entries:

    (rule S001
      (MatMul 0 0 (MatMul 0 0 ?a ?b) ?c)
      => (MatMul 0 0 ?a (MatMul 0 0 ?b ?c))
      :when ((= (rank ?a) 2))
      :test ((?a 4 6) (?b 6 5) (?c 5 3))
      :reject ((?a 2 4 6) (?b 2 6 5) (?c 2 5 3))
      :doc "matmul associativity")

    (multi M05
      ((MatMul 0 0 ?x ?w1) => (Out (SplitV 2 (vec-of (dim ?w1 1) (dim ?w2 1)) 1 (MatMul 0 0 ?x (ConcatV2 1 ?w1 ?w2))) 0))
      ((MatMul 0 0 ?x ?w2) => (Out (SplitV 2 (vec-of (dim ?w1 1) (dim ?w2 1)) 1 (MatMul 0 0 ?x (ConcatV2 1 ?w1 ?w2))) 1))
      :test ...)

    (excluded S053 "reason it cannot be expressed soundly in TF")

Terms are the op table's constructors with their literal arguments first (see tensat_tf.ops), e.g.
`(Conv2D strides padding dilations x w)`. `?name` is a pattern variable: a tensor, or a literal when it sits in a
literal position. Integer vectors are written `(vec-of 1 1 1 1)`, strings "SAME".

Guards (`:when`, a list of conditions, all must hold) and computed literals on the right side may use:
    (rank ?x)  (dim ?x i)  (shape ?x)       the analysis shape of a tensor variable (i < 0 counts from the end)
    (const ?x)                              ?x depends only on weights (folded at emit)
    (positive ?x)                           ?x is a weight whose every element is a finite float > 0 (read from its
                                            data at ingest; in tests, a `:weight :positive` binding)
    (float ?x)                              ?x is a weight of a floating dtype (at ingest; every test weight is)
    (known ?x)                              no dimension of ?x is -1: each is a size or a symbol (an unknown dim
                                            named after a graph input's dim, tensat_tf/symbolic.py)
    (distinct ?a ?b)                        two different e-classes
    (ordered ?a ?b ...)                     weights (Weight leaves) with increasing ids: a symmetric multi rule
                                            matches each set of sources once, not once per permutation
    (few-readers ?x)                        ?x is a graph tensor that 2 to MERGE_READERS projections read
                                            (tensat_tf/egraph/ingest.py; in tests, every input): the N-way merges'
                                            explosion control
    = != < <= > >=, + - * / % min max, vec-of vec-get vec-length, and literal variables
Every tensor variable of a left side must have a known rank (a shape in the analysis) for the rule to match.
Dims compared with = or != may be symbols (equal symbols are equal dims); a dim used as a number (arithmetic,
ordering, a right-side literal) gets an automatic `(>= dim 0)` guard from the compiler (rules/compile.py).

Scheduling: `:schedule eager` (default `step`) runs a single rule to a fixpoint, with the shape analysis, after every
iteration of the others instead of once per iteration: for rules that only move an op past another and never grow
the graph by more than the terms they rewrite (rules/squeeze.rules), whose chains would otherwise take one iteration
per op moved before the rewrite they expose pays (tensat_tf/egraph/saturate.py stops on the first iteration that does
not pay).

Tests: `:test BINDING` (repeatable) gives shapes for which the rule must fire; `:reject BINDING` shapes (or weight
flags) for which it must not. A binding is a list of `(?x d0 d1 ...)` (an input tensor), `(?x :weight d0 ...)`
(a weight), `(?x :lit VALUE)` (a literal variable) or `(?x :value (vec-of 2 4 3))` (an int32 input vector with
exactly that value: the run-time target of a ReshapeT; `(?x :value (vec-of 0 2) 1 2)` gives it that shape, the values
in row-major order: SpaceToBatchND's paddings); `:positive` after the name draws values in (0.5, 1.5) (for a
weight it also asserts the `(positive ?x)` fact). A dimension -1 is unknown (as in the analysis): only in
`:reject` bindings, to show that a guard does not take two unknown dims for equal ones. Every rule with guards needs
at least one `:reject`.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Union

Sexp = Union[str, int, list]          # symbols and strings are str (strings keep their quotes), ints are int


class RuleSyntaxError(ValueError):
    pass


SCHEDULES = ("step", "eager")


_TOKEN = re.compile(r'\s*(?:(;[^\n]*)|(\()|(\))|("(?:[^"\\]|\\.)*")|([^\s()";]+))')


def parse_sexps(text: str, origin: str = "<rules>") -> list[Sexp]:
    stack: list[list] = [[]]
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise RuleSyntaxError(f"{origin}: cannot read at offset {pos}: {text[pos:pos + 30]!r}")
        pos = m.end()
        comment, lp, rp, string, atom = m.groups()
        if comment:
            continue
        if lp:
            stack.append([])
        elif rp:
            if len(stack) == 1:
                raise RuleSyntaxError(f"{origin}: unbalanced ')' at offset {pos}")
            done = stack.pop()
            stack[-1].append(done)
        elif string:
            stack[-1].append(string)
        else:
            if re.fullmatch(r"-?\d+", atom):
                stack[-1].append(int(atom))
            elif re.fullmatch(r"-?\d+\.\d*(e-?\d+)?|-?\d+e-?\d+", atom):
                stack[-1].append(float(atom))
            else:
                stack[-1].append(atom)
    if len(stack) != 1:
        raise RuleSyntaxError(f"{origin}: unbalanced '('")
    return stack[0]


def to_text(e: Sexp) -> str:
    if isinstance(e, list):
        return "(" + " ".join(to_text(x) for x in e) + ")"
    return str(e)


def is_var(e: Sexp) -> bool:
    return isinstance(e, str) and e.startswith("?")


def variables(e: Sexp) -> list[str]:
    """Pattern variables in order of first appearance."""
    out: list[str] = []

    def walk(x):
        if is_var(x):
            if x not in out:
                out.append(x)
        elif isinstance(x, list):
            for y in x:
                walk(y)
    walk(e)
    return out


@dataclasses.dataclass(frozen=True)
class Binding:
    """Test values for a rule's variables: tensor shapes, weight flags, literal values."""
    shapes: dict            # var -> tuple of dims
    weights: frozenset      # vars that are weights
    literals: dict          # var -> literal value (int, str, tuple)
    positive: frozenset = frozenset()   # vars whose random values must be > 0 (a variance under a square root)
    values: dict = dataclasses.field(default_factory=dict)   # var -> the int32 vector an input holds (`:value`)

    @classmethod
    def parse(cls, items: list, origin: str) -> "Binding":
        shapes, weights, lits, positive, values = {}, set(), {}, set(), {}
        for it in items:
            if not isinstance(it, list) or not it or not is_var(it[0]):
                raise RuleSyntaxError(f"{origin}: bad test binding {to_text(it)}")
            var, rest = it[0], it[1:]
            if rest and rest[0] == ":lit":
                v = rest[1]
                if isinstance(v, list):      # (vec-of 1 2)
                    v = tuple(v[1:])
                elif isinstance(v, str) and v.startswith('"'):
                    v = v[1:-1]
                lits[var] = v
                continue
            if rest and rest[0] == ":value":
                v, dims = (rest[1], tuple(rest[2:])) if len(rest) >= 2 else (None, ())
                if not (isinstance(v, list) and v[:1] == ["vec-of"] and all(isinstance(x, int) for x in v[1:])
                        and all(isinstance(d, int) and d > 0 for d in dims)
                        and (not dims or math.prod(dims) == len(v) - 1)):
                    raise RuleSyntaxError(f"{origin}: bad :value for {var}: {to_text(it)}")
                values[var] = tuple(v[1:])
                shapes[var] = dims or (len(v) - 1,)
                continue
            while rest and rest[0] in (":weight", ":positive"):
                (weights if rest[0] == ":weight" else positive).add(var)
                rest = rest[1:]
            if not all(isinstance(d, int) and (d > 0 or d == -1) for d in rest):
                raise RuleSyntaxError(f"{origin}: bad shape for {var}: {to_text(it)}")
            shapes[var] = tuple(rest)
        return cls(shapes, frozenset(weights), lits, frozenset(positive), values)


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    family: str
    sources: tuple          # left sides (one for a single rule)
    targets: tuple          # right sides, one per source
    guards: tuple = ()
    tests: tuple = ()       # Binding
    rejects: tuple = ()     # Binding
    doc: str = ""
    origin: str = ""        # file:entry for messages
    eager: bool = False     # `:schedule eager`: run to a fixpoint after every iteration (egraph/saturate.py)

    @property
    def multi(self) -> bool:
        return len(self.sources) > 1

    @property
    def kind(self) -> str:
        return "multi" if self.multi else "single"


@dataclasses.dataclass(frozen=True)
class Excluded:
    name: str
    family: str
    reason: str


def _options(items: list, origin: str) -> dict:
    opts: dict = {"tests": [], "rejects": [], "guards": [], "doc": "", "eager": False}
    i = 0
    while i < len(items):
        key = items[i]
        if key not in (":when", ":test", ":reject", ":doc", ":schedule") or i + 1 >= len(items):
            raise RuleSyntaxError(f"{origin}: unexpected {to_text(key)}")
        val = items[i + 1]
        if key == ":schedule":
            if val not in SCHEDULES:
                raise RuleSyntaxError(f"{origin}: :schedule takes one of {', '.join(SCHEDULES)}")
            opts["eager"] = val == "eager"
        elif key == ":when":
            if not isinstance(val, list):
                raise RuleSyntaxError(f"{origin}: :when takes a list of conditions")
            opts["guards"].extend(val)
        elif key == ":test":
            opts["tests"].append(Binding.parse(val, origin))
        elif key == ":reject":
            opts["rejects"].append(Binding.parse(val, origin))
        else:
            opts["doc"] = val.strip('"')
        i += 2
    return opts


def parse_file(text: str, origin: str) -> tuple[str, list, list]:
    """-> (family, rules, excluded)."""
    entries = parse_sexps(text, origin)
    if not entries or not (isinstance(entries[0], list) and entries[0][:1] == ["family"] and len(entries[0]) == 2):
        raise RuleSyntaxError(f"{origin}: the first entry must be (family NAME)")
    family = entries[0][1]
    rules, excluded = [], []
    for e in entries[1:]:
        if not isinstance(e, list) or len(e) < 2 or e[0] not in ("rule", "multi", "excluded"):
            raise RuleSyntaxError(f"{origin}: expected (rule ...), (multi ...) or (excluded ...), got {to_text(e)[:60]}")
        where = f"{origin}:{e[1]}"
        if e[0] == "excluded":
            if len(e) != 3 or not str(e[2]).startswith('"'):
                raise RuleSyntaxError(f"{where}: (excluded NAME \"reason\")")
            excluded.append(Excluded(e[1], family, e[2].strip('"')))
        elif e[0] == "rule":
            if len(e) < 5 or e[3] != "=>":
                raise RuleSyntaxError(f"{where}: (rule NAME LHS => RHS options...)")
            o = _options(e[5:], where)
            rules.append(Rule(e[1], family, (e[2],), (e[4],), tuple(o["guards"]), tuple(o["tests"]),
                              tuple(o["rejects"]), o["doc"], where, o["eager"]))
        else:
            pairs, k = [], 2
            while k < len(e) and isinstance(e[k], list):
                p = e[k]
                if len(p) != 3 or p[1] != "=>":
                    raise RuleSyntaxError(f"{where}: each pair is (LHS => RHS)")
                pairs.append((p[0], p[2]))
                k += 1
            if len(pairs) < 2:
                raise RuleSyntaxError(f"{where}: a multi rule needs at least two (LHS => RHS) pairs")
            o = _options(e[k:], where)
            if o["eager"]:
                raise RuleSyntaxError(f"{where}: a multi rule cannot be eager (its matches grow as a product)")
            rules.append(Rule(e[1], family, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs),
                              tuple(o["guards"]), tuple(o["tests"]), tuple(o["rejects"]), o["doc"], where))
    return family, rules, excluded
