"""Rule (rules.syntax) -> egglog program text.

One ruleset per rule (`rs_<name>_`), so the saturation driver can run any subset and ban one rule that explodes.
A single rule becomes

    (rule ((= root LHS) (= s_x (shape x)) ... guards) ((union root RHS)) :ruleset rs_NAME_ :name "NAME")

and a multi rule has one `(= root_k LHS_k)` per source (distinct roots) and one union per target; a subterm shared
by the targets (the merged op under its SplitV) is one e-node by hash-consing.

Every tensor variable of a left side gets its shape bound, so a rule never fires on a tensor of unknown rank, and
guards and computed right-side literals read dimensions as `(vec-get s_x i)`.

Symbols (tensat_tf/ops.py: a dim <= -2 is the run-time size of one input dim): a dim may be compared for equality
(`(= (dim ?a 0) (dim ?b 0))`, `(= (shape ?a) (shape ?b))`, `(!= (dim ?a 0) -1)`) and then two equal symbols are
equal sizes, which is what lets batch-axis merges and concat rules fire on models with a dynamic batch. A dim used as
a NUMBER (in a right side's literal: split sizes, reshape targets, pad amounts; or in a guard's arithmetic or
ordering: `(> (dim ?x 1) 0)`, `(<= (dim ?a 0) (dim ?b 0))`, `(% (dim ?x 3) 2)`) is guarded `(>= dim 0)` here, for
every rule, so a symbol (or -1) never becomes a literal; a `(shape ?x)` used so needs `(Concrete x)`. The one
exception is a dim copied as an element of ReshapeS's shape `(ReshapeS (vec-of (dim ?x 0) ...) ?y)`: that literal
is the output's shape, not a target, and the emitter builds each symbol in it from Shape(graph input); such a dim is
guarded `(!= dim -1)` instead (a size or a symbol, never an unknown).
`(known ?x)` means no dim of ?x is -1: each is concrete or a symbol.
"""
from __future__ import annotations

from tensat_tf import ops, terms
from tensat_tf.rules.syntax import Rule, RuleSyntaxError, Sexp, is_var, to_text, variables

# Argument sorts of a constructor (typed or structural), None for any other head: the term language's declaration.
constructor_sorts = terms.arg_sorts

# Guard heads that are conditions (facts of the e-graph), never values: _Ctx.fact compiles each.
CONDITIONS = ("const", "positive", "float", "known", "distinct", "ordered", "few-readers")


def ruleset_name(rule_name: str) -> str:
    # egglog 13.2 mints fresh names as <name><counter>: a trailing '_' keeps ours from colliding
    return f"rs_{rule_name}_"


def var_sorts(rule: Rule) -> dict[str, str]:
    """Sort of every variable, from its positions in the left sides (and right sides for error checks)."""
    sorts: dict[str, str] = {}

    def walk(e: Sexp):
        if not isinstance(e, list) or not e:
            return
        head = e[0]
        arg_sorts = constructor_sorts(head) if isinstance(head, str) else None
        if arg_sorts is None:
            return
        if len(e) - 1 != len(arg_sorts):
            raise RuleSyntaxError(f"{rule.origin}: {head} takes {len(arg_sorts)} arguments, got {to_text(e)}")
        for arg, s in zip(e[1:], arg_sorts):
            if is_var(arg):
                if sorts.setdefault(arg, s) != s:
                    raise RuleSyntaxError(f"{rule.origin}: {arg} used as {sorts[arg]} and {s}")
            else:
                walk(arg)

    for src in rule.sources:
        if not isinstance(src, list) or constructor_sorts(src[0]) is None:
            raise RuleSyntaxError(f"{rule.origin}: a left side must be a term, got {to_text(src)}")
        walk(src)
    lhs_vars = set(sorts)
    for dst in rule.targets:
        walk(dst)
        missing = [v for v in variables(dst) if v not in lhs_vars]
        if missing:
            raise RuleSyntaxError(f"{rule.origin}: right side uses unbound {missing}")
    for g in rule.guards:
        missing = [v for v in variables(g) if v not in lhs_vars]
        if missing:
            raise RuleSyntaxError(f"{rule.origin}: guard uses unbound {missing}")
    return sorts


class _Ctx:
    def __init__(self, rule: Rule, sorts: dict[str, str]):
        self.rule, self.sorts = rule, sorts

    def v(self, var: str) -> str:
        return "v_" + var[1:]

    def s(self, var: str) -> str:
        if self.sorts.get(var) != terms.TENSOR:
            raise RuleSyntaxError(f"{self.rule.origin}: {var} is not a tensor variable of the left side")
        return "s_" + var[1:]

    def expr(self, e: Sexp) -> str:
        """A term, a literal expression or a shape macro, as egglog text."""
        if is_var(e):
            return self.v(e)
        if not isinstance(e, list):
            return str(e)
        head = e[0]
        if head == "rank":
            return f"(vec-length {self.s(e[1])})"
        if head == "shape":
            return self.s(e[1])
        if head == "dim":
            s, i = self.s(e[1]), e[2]
            if isinstance(i, int) and i < 0:
                return f"(vec-get {s} (+ (vec-length {s}) {i}))"
            return f"(vec-get {s} {self.expr(i)})"
        if head in CONDITIONS:
            raise RuleSyntaxError(f"{self.rule.origin}: ({head} ...) is a condition, not a value")
        return "(" + " ".join([str(head)] + [self.expr(x) for x in e[1:]]) + ")"

    def fact(self, g: Sexp) -> str:
        if isinstance(g, list) and g:
            if g[0] == "const":
                return f"(IsConst {self.v(g[1])})"
            if g[0] == "positive":     # a weight whose every element is > 0, decided at ingest from its data
                return f"(Positive {self.v(g[1])})"
            if g[0] == "float":        # a weight of a floating dtype, decided at ingest
                return f"(Floating {self.v(g[1])})"
            if g[0] == "few-readers":  # a graph tensor read by a few projections, decided at ingest
                return f"(FewReaders {self.v(g[1])})"
            if g[0] == "known":
                return f"(vec-not-contains {self.s(g[1])} -1)"
            if g[0] == "distinct":
                return f"(!= {self.v(g[1])} {self.v(g[2])})"
            if g[0] == "ordered":
                # the variables are weights whose ids increase: one match per set instead of one per permutation
                # (TENSAT's i < j for symmetric multi-pattern rules)
                ids = [f"o_{v[1:]}" for v in g[1:]]
                facts = [f"(= {self.v(v)} (Weight {i}))" for v, i in zip(g[1:], ids)]
                facts += [f"(< {a} {b})" for a, b in zip(ids, ids[1:])]
                return " ".join(facts)
        return self.expr(g)


def _numeric_uses(e: Sexp, direct: bool, out: list, copies: list) -> None:
    """Collect the (dim ...) and (shape ...) of `e` used as numbers (not as a direct operand of = or !=), and into
    `copies` the dims copied as an element of the shape of a ReshapeS, whose emitter builds symbols at run time
    (tensat_tf/ops.py): those may be symbols, never -1."""
    if not isinstance(e, list) or not e:
        return
    head = e[0]
    if head in ("dim", "shape"):
        if not direct:
            out.append(e)
        if head == "dim":
            _numeric_uses(e[2], False, out, copies)
        return
    if head in CONDITIONS or head == "rank":
        return
    spec = ops.BY_TERM.get(head) if isinstance(head, str) else None
    if spec is not None and spec.symbolic_target and isinstance(e[1], list) and e[1] and e[1][0] == "vec-of":
        for d in e[1][1:]:
            if isinstance(d, list) and d[:1] == ["dim"]:
                copies.append(d)
                _numeric_uses(d[2], False, out, copies)
            else:
                _numeric_uses(d, False, out, copies)
        for x in e[2:]:
            _numeric_uses(x, False, out, copies)
        return
    for x in e[1:]:
        _numeric_uses(x, head in ("=", "!="), out, copies)


def _concreteness_guards(rule: Rule, ctx: "_Ctx") -> list[str]:
    uses: list = []
    copies: list = []
    for dst in rule.targets:
        _numeric_uses(dst, False, uses, copies)
    for g in rule.guards:
        _numeric_uses(g, True, uses, copies)
    facts = []
    for u in uses:
        f = f"(Concrete {ctx.v(u[1])})" if u[0] == "shape" else f"(>= {ctx.expr(u)} 0)"
        if f not in facts:
            facts.append(f)
    for c in copies:                      # a size or a symbol: an unknown -1 has no run-time value to build
        f = f"(!= {ctx.expr(c)} -1)"
        if f not in facts:
            facts.append(f)
    return facts


def counting_name(rule_name: str) -> str:
    """The name of a rule's counting twin (compile_rule's count_only), and of its ruleset through ruleset_name."""
    return f"{rule_name}?count"


def compile_rule(rule: Rule, count_only: bool = False) -> str:
    """count_only: the rule's query with no action, under counting_name (its own ruleset): a run of it reports how
    many matches the rule has and changes nothing (egraph/saturate.py bans a multi rule on that count before it
    applies anything)."""
    sorts = var_sorts(rule)
    ctx = _Ctx(rule, sorts)
    roots = [f"r{k}__" for k in range(len(rule.sources))]
    facts = [f"(= {r} {ctx.expr(src)})" for r, src in zip(roots, rule.sources)]
    for a in range(len(roots)):
        for b in range(a + 1, len(roots)):
            facts.append(f"(!= {roots[a]} {roots[b]})")
    facts += [f"(= {ctx.s(v)} (shape {ctx.v(v)}))" for v, s in sorts.items() if s == terms.TENSOR]
    facts += [ctx.fact(g) for g in rule.guards]
    facts += _concreteness_guards(rule, ctx)
    actions = [f"(union {r} {ctx.expr(dst)})" for r, dst in zip(roots, rule.targets)]
    actions += [f'(Made {r} "{rule.name}")' for r in roots]
    name = counting_name(rule.name) if count_only else rule.name
    if count_only:
        actions = []
    rs = ruleset_name(name)
    return (f"(ruleset {rs})\n(rule ({' '.join(facts)})\n      ({' '.join(actions)})\n"
            f"      :ruleset {rs} :name \"{name}\")")
