"""Numeric verification of a rule: instantiate both sides on random tensors and compare them in TF.

For each test binding (`:test` in the rule file):
  1. build an e-graph holding the left sides on leaves of the binding's shapes (inputs, or weights), run the rule's
     own compiled ruleset once, and check that every left side is now equal to its instantiated right side
     (the rule fired, with its guards as compiled);
  2. build the right sides alone in a fresh e-graph and check that the shape analysis derives the left side's shape
     for each (so later rules and the cost model can see the new nodes);
  3. run both sides in one TF graph on seeded random values and compare: max|lhs - rhs| / max|lhs| <= rtol.
For each `:reject` binding, for every `(const ?x)` guard with ?x turned into an input, for every `(positive ?x)`
guard with ?x's positivity dropped (a weight of any sign), and for every `(float ?x)` guard with ?x's floating dtype
dropped, the rule must not fire.

Right-side literals computed from shapes (split sizes, ...) are evaluated here in Python with egglog's integer
semantics, so the verifier checks the same values the compiled rule computes.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np
import tensorflow as tf

from tensat_tf import ops, terms
from tensat_tf.egraph import language as L
from tensat_tf.egraph import nodedef
from tensat_tf.egraph.session import Session
from tensat_tf.rules.compile import compile_rule, constructor_sorts, ruleset_name, var_sorts
from tensat_tf.rules.syntax import Binding, Rule, is_var, to_text

RTOL = {np.float32: 1e-5}


class UnsoundRule(AssertionError):
    pass


# ------------------------------------------------------------------ instantiated terms
@dataclasses.dataclass(frozen=True)
class Leaf:
    var: str


@dataclasses.dataclass(frozen=True)
class Term:
    head: str
    lits: tuple
    kids: tuple


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def eval_expr(e, shapes: dict, lits: dict):
    """A literal expression of the rule language, with egglog's i64 semantics."""
    if is_var(e):
        if e in lits:
            return lits[e]
        raise UnsoundRule(f"{e} has no literal value in the binding")
    if isinstance(e, (int, float)):
        return e
    if isinstance(e, str):
        return e[1:-1] if e.startswith('"') else e
    head, args = e[0], e[1:]
    if head == "rank":
        return len(shapes[args[0]])
    if head == "shape":
        return tuple(shapes[args[0]])
    if head == "dim":
        s = shapes[args[0]]
        return s[eval_expr(args[1], shapes, lits)]
    vals = [eval_expr(a, shapes, lits) for a in args]
    ops_ = {
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _trunc_div,
        "%": lambda a, b: a - b * _trunc_div(a, b), "min": min, "max": max,
        "vec-get": lambda v, i: v[i], "vec-length": len, "=": lambda a, b: a == b,
    }
    if head == "vec-of":
        return tuple(vals)
    if head in ops_:
        return ops_[head](*vals)
    raise UnsoundRule(f"cannot evaluate {to_text(e)}")


def instantiate(e, sorts: dict, shapes: dict, lits: dict):
    """Pattern -> Leaf/Term tree with every literal argument evaluated."""
    if is_var(e):
        return Leaf(e)
    head = e[0]
    arg_sorts = constructor_sorts(head)
    out_lits, kids = [], []
    for arg, s in zip(e[1:], arg_sorts):
        if terms.is_term_sort(s):
            kids.append(instantiate(arg, sorts, shapes, lits))
        else:
            out_lits.append(eval_expr(arg, shapes, lits))
    return Term(head, tuple(out_lits), tuple(kids))


def _lit_text(v) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return f'"{v}"'
    return "(vec-of " + " ".join(str(int(x)) for x in v) + ")"


def egglog_text(t) -> str:
    if isinstance(t, Leaf):
        return f"$V_{t.var[1:]}_"
    sorts = constructor_sorts(t.head)
    lit_it, kid_it = iter(t.lits), iter(t.kids)
    args = [egglog_text(next(kid_it)) if terms.is_term_sort(s) else _lit_text(next(lit_it))
            for s in sorts]
    return f"({t.head}{''.join(' ' + a for a in args)})"


# ------------------------------------------------------------------ egglog side
@functools.cache
def _language() -> Session:
    """One e-graph with the language declared, shared by every check in the process: each check runs in a pushed
    copy that is popped after it (Session.push), so no check sees another's rule, terms or facts. Declaring the
    language took 0.19 s an e-graph, ten e-graphs a rule: 1.9 of the 2.3 s a rule's check took (S091, cProfile)."""
    return Session(L.new_egraph())


def _leaves_program(binding: Binding, weights: frozenset, positive: Optional[frozenset] = None,
                    floating: Optional[frozenset] = None) -> str:
    positive = binding.positive if positive is None else positive
    floating = weights if floating is None else floating
    lines = []
    for k, (var, shape) in enumerate(sorted(binding.shapes.items())):
        leaf = f"(Weight {k + 1000})" if var in weights else f'(Input "{var[1:]}")'
        lines.append(f"(let $V_{var[1:]}_ {leaf})")
        if var in weights and var in positive:     # what ingest asserts for a weight whose elements are all > 0
            lines.append(f"(Positive $V_{var[1:]}_)")
        if var in weights and var in floating:     # and for a float weight (every test weight is float32)
            lines.append(f"(Floating $V_{var[1:]}_)")
        if var not in weights:                     # a test's input is read by its rule's projections alone
            lines.append(f"(FewReaders $V_{var[1:]}_)")
        lines.append(f"(set (shape $V_{var[1:]}_) (vec-of {' '.join(map(str, shape))}))")
    return "\n".join(lines)


def fires(rule: Rule, binding: Binding, weights: Optional[frozenset] = None,
          positive: Optional[frozenset] = None, floating: Optional[frozenset] = None) -> tuple[bool, list, list]:
    """Run the compiled rule on its instantiated left sides. -> (fired, lhs trees, rhs trees)."""
    weights = binding.weights if weights is None else weights
    sorts = var_sorts(rule)
    lhs = [instantiate(s, sorts, binding.shapes, binding.literals) for s in rule.sources]
    prog = [compile_rule(rule), _leaves_program(binding, weights, positive, floating)]
    prog += [f"(let $L{k}_ {egglog_text(t)})" for k, t in enumerate(lhs)]
    prog.append("(run-schedule (saturate (run shapes)))")
    prog.append(f"(run-schedule (run {ruleset_name(rule.name)}))")
    prog.append("(run-schedule (saturate (run shapes)))")
    session = _language()
    with session.push():
        session.run_program("\n".join(prog))
        try:
            rhs = [instantiate(t, sorts, binding.shapes, binding.literals) for t in rule.targets]
        except IndexError:  # a right-side literal reads a dim past the rank: egglog's vec-get fails the match too
            return False, lhs, []
        session.run_program("\n".join(f"(let $R{k}_ {egglog_text(t)})" for k, t in enumerate(rhs)))
        fired = all(session.check(f"(= $L{k}_ $R{k}_)") for k in range(len(lhs)))
    return fired, lhs, rhs


def rhs_shapes_derived(rhs: list, binding: Binding, expected: list[tuple]) -> bool:
    prog = [_leaves_program(binding, binding.weights)]
    prog += [f"(let $R{k}_ {egglog_text(t)})" for k, t in enumerate(rhs)]
    prog.append("(run-schedule (saturate (run shapes)))")
    session = _language()
    with session.push():
        session.run_program("\n".join(prog))
        return all(session.check(f"(= (shape $R{k}_) (vec-of {' '.join(map(str, s))}))")
                   for k, s in enumerate(expected))


# ------------------------------------------------------------------ TF side
def evaluate(trees: list, values: dict) -> list[np.ndarray]:
    """Evaluate term trees in one TF graph. values: var -> array for every leaf."""
    gd = tf.compat.v1.GraphDef()
    names: dict = {}
    dtype = tf.float32
    for var in sorted(values):
        ph = gd.node.add(name=f"leaf_{var[1:]}", op="Placeholder")
        ph.attr["dtype"].type = tf.as_dtype(values[var].dtype).as_datatype_enum
        names[Leaf(var)] = ph.name
    counter = [0]

    def emit(t) -> str:
        if t in names:
            return names[t]
        if t.head == "Out":
            tup = emit(t.kids[0])
            names[t] = f"{tup}:{t.lits[0]}" if t.lits[0] else tup
            return names[t]
        if t.head == "FConst":
            counter[0] += 1
            gd.node.append(nodedef.scalar_const(f"n{counter[0]}", t.lits[0], dtype))
            names[t] = f"n{counter[0]}"
            return names[t]
        spec = ops.BY_TERM[t.head]
        ins = [emit(k) for k in t.kids]
        counter[0] += 1
        node, consts = nodedef.build(spec, t.lits, f"n{counter[0]}", ins, dtype)
        gd.node.extend(consts + [node])
        names[t] = node.name
        return node.name

    outs = [emit(t) for t in trees]
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    feeds = {g.get_tensor_by_name(f"leaf_{v[1:]}:0"): x for v, x in values.items()}
    fetches = [g.get_tensor_by_name(o if ":" in o else o + ":0") for o in outs]
    with tf.compat.v1.Session(graph=g) as sess:
        return sess.run(fetches, feeds)


@dataclasses.dataclass
class CheckResult:
    rule: str
    positives: int
    negatives: int
    max_rel_err: float


def check(rule: Rule, seed: int = 0) -> CheckResult:
    """Verify one rule on all its bindings; raises UnsoundRule with the reason on the first failure."""
    if not rule.tests:
        raise UnsoundRule(f"{rule.name}: no :test binding")
    if rule.guards and not rule.rejects:
        raise UnsoundRule(f"{rule.name}: has guards but no :reject binding")
    for b in rule.tests:
        if any(-1 in s for s in b.shapes.values()):
            raise UnsoundRule(f"{rule.name}: unknown dims (-1) only in :reject bindings, got :test {_show(b)}")
    compile_rule(rule)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for b in rule.tests:
        fired, lhs, rhs = fires(rule, b)
        if not fired:
            raise UnsoundRule(f"{rule.name}: did not fire on test {_show(b)}")
        values = {v: (np.asarray(b.values[v], np.int32).reshape(s) if v in b.values else
                      (rng.uniform(0.5, 1.5, s) if v in b.positive else rng.uniform(-1, 1, s)).astype(np.float32))
                  for v, s in sorted(b.shapes.items())}
        results = evaluate(lhs + rhs, values)
        n = len(lhs)
        for k in range(n):
            a, r = results[k], results[n + k]
            if a.shape != r.shape:
                raise UnsoundRule(f"{rule.name}: shapes differ {a.shape} vs {r.shape} on {_show(b)}")
            scale = max(float(np.max(np.abs(a))), 1e-30)
            err = float(np.max(np.abs(a - r))) / scale if a.size else 0.0
            worst = max(worst, err)
            if err > RTOL[np.float32]:
                raise UnsoundRule(f"{rule.name}: rel error {err:.3g} on {_show(b)}")
        if not rhs_shapes_derived(rhs, b, [results[k].shape for k in range(n)]):
            raise UnsoundRule(f"{rule.name}: the shape analysis does not derive the right side's shape on {_show(b)}")
    negatives = 0
    for b in rule.rejects:
        if fires(rule, b)[0]:
            raise UnsoundRule(f"{rule.name}: fired on :reject {_show(b)}")
        negatives += 1
    for g in rule.guards:
        if isinstance(g, list) and g[:1] == ["const"]:
            b = rule.tests[0]
            if fires(rule, b, b.weights - {g[1]})[0]:
                raise UnsoundRule(f"{rule.name}: fired with {g[1]} not constant")
            negatives += 1
        if isinstance(g, list) and g[:1] == ["positive"]:
            b = rule.tests[0]
            if fires(rule, b, positive=b.positive - {g[1]})[0]:
                raise UnsoundRule(f"{rule.name}: fired with {g[1]} not positive")
            negatives += 1
        if isinstance(g, list) and g[:1] == ["float"]:
            b = rule.tests[0]
            if fires(rule, b, floating=b.weights - {g[1]})[0]:
                raise UnsoundRule(f"{rule.name}: fired with {g[1]} not a float")
            negatives += 1
    return CheckResult(rule.name, len(rule.tests), negatives, worst)


def _show(b: Binding) -> str:
    parts = [f"{v}{'(w)' if v in b.weights else ''}={s}" for v, s in sorted(b.shapes.items())]
    parts += [f"{v}={x}" for v, x in sorted(b.literals.items())]
    return " ".join(parts)
