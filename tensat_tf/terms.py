"""The term language of the e-graph, declared once: its sorts and every constructor with its argument and result sorts.

Typed constructors are the op table's (tensat_tf/ops.py: one per TF op the e-graph understands, with its literal
arguments first); the structural ones, declared below, are not TF ops. Everything else reads the language from here:
the egglog declarations (tensat_tf/egraph/language.py), the rule compiler's argument sorts (rules/compile.py), the
cost model's free constructors (tensat_tf/cost/analytic.py), which arguments are children and which are literals
(rules/soundness.py, passes/tensat.py, tensat_tf/egraph/export.py) and the e-node count of saturation
(tensat_tf/egraph/saturate.py). tests/test_terms.py checks that the derived pieces agree with this declaration.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

from tensat_tf import ops

TENSOR, TTUPLE, TLIST = "Tensor", "TTuple", "TList"
# Sorts whose values are e-classes: an argument of one of these sorts is a child, any other argument (i64, f64,
# String, IVec) a literal kept in the e-node's payload.
TERM_SORTS = (TENSOR, TTUPLE, TLIST)


@dataclasses.dataclass(frozen=True)
class Constructor:
    name: str
    arg_sorts: tuple[str, ...]
    sort: str                  # result sort
    structural: bool           # True: not a TF op of the op table
    runs: bool = True          # an e-node of it runs at serving time (typed ops, opaque Op); False: free (cost 0)


STRUCTURAL = (
    Constructor("Input", ("String",), TENSOR, True, runs=False),        # a graph input (Placeholder), by name
    Constructor("Weight", ("i64",), TENSOR, True, runs=False),          # a Const, by content id
    Constructor("FConst", ("f64",), TENSOR, True, runs=False),          # a float scalar rules create (an epsilon)
    Constructor("Op", ("String", TLIST), TTUPLE, True),                 # an opaque node, by name, with its inputs
    Constructor("Out", (TTUPLE, "i64"), TENSOR, True, runs=False),      # output i of a tuple
    Constructor("Ctl", (TTUPLE,), TENSOR, True, runs=False),            # a control edge from that node
    Constructor("TNil", (), TLIST, True, runs=False),                   # argument list of an opaque node
    Constructor("TCons", (TENSOR, TLIST), TLIST, True, runs=False),
)
TYPED = tuple(Constructor(s.term, tuple(s.arg_sorts), s.output_sort, False) for s in ops.BY_TERM.values())

CONSTRUCTORS: dict[str, Constructor] = {c.name: c for c in STRUCTURAL + TYPED}
NAMES = frozenset(CONSTRUCTORS)
STRUCTURAL_NAMES = frozenset(c.name for c in STRUCTURAL)
FREE = frozenset(c.name for c in CONSTRUCTORS.values() if not c.runs)


def arg_sorts(name: str) -> Optional[tuple[str, ...]]:
    """Argument sorts of constructor `name`, or None when it is not a constructor of the language."""
    c = CONSTRUCTORS.get(name)
    return None if c is None else c.arg_sorts


def is_term_sort(sort: str) -> bool:
    return sort in TERM_SORTS


def _check() -> None:
    """Names are unique, and (egglog 13.2 fresh-name bug) none is another's name followed by digits."""
    names = [c.name for c in STRUCTURAL + TYPED]
    if len(set(names)) != len(names):
        raise AssertionError(f"a constructor is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    for a in names:
        for b in names:
            if a != b and re.fullmatch(re.escape(a) + r"\d+", b):
                raise AssertionError(f"term names {a!r} and {b!r} collide in egglog 13.2")


_check()
