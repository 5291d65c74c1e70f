"""Reduced-cost fixing: a lower bound from the LP relaxation's duals, and the nodes no choice cheaper than a known
one can use.

For   min c.x  s.t.  row_lo <= A x <= row_hi,  lo <= x <= hi   and ANY row multipliers y, weak duality gives

    L(y) = sum_r (y_r row_lo_r if y_r > 0 else y_r row_hi_r) + sum_j min(d_j lo_j, d_j hi_j),   d = c - A^T y

as a lower bound on c.x for every x in the box meeting the rows, and every such x with x_j = 1 (a 0/1 column at 0..1)
costs at least L(y) + max(d_j, 0). So a node j with L(y) + d_j above the cost of a known acyclic choice is in no
cheaper choice, and may be dropped. The bound is recomputed here from the solver's duals rather than taken from its
report: a wrong-signed multiplier on a one-sided row is set to 0, which keeps the formula a bound whatever the solver's
tolerances, so a node is dropped on arithmetic done here.

Why (ilp.py): on TENSAT's bert.json the LP bound with the required-class rows is 0.586 against an optimum of 0.7047,
and HiGHS's branch and bound needs 80 s to close that. Dropping the nodes the duals exclude, given a choice costing
0.7132, and reducing again (reduce.py: whole associativity chains become ungroundable or dominated) leaves 2,009 of
20,244 nodes, whose LP bound is 0.7041: within 1 % of the choice, proven in about 3 s (BENCHMARKS.md).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tensat_tf.extract.milp import Milp


def lagrangian_bound(milp: Milp, row_duals: np.ndarray) -> tuple[float, np.ndarray]:
    """(L(y), d) for y = row_duals (see the module doc). Every column must have finite bounds."""
    milp._freeze()
    if not (np.all(np.isfinite(milp.lo)) and np.all(np.isfinite(milp.hi))):
        raise ValueError("the Lagrangian bound needs finite column bounds")
    y = np.asarray(row_duals, dtype=np.float64)
    if len(y) != len(milp.rows):
        raise ValueError(f"{len(y)} duals for {len(milp.rows)} rows")
    lo, hi, starts, idx, val = milp.row_arrays()
    # a zero, or a multiplier on the row's infinite side, counts as 0
    y = np.where((y > 0) & np.isfinite(lo) | (y < 0) & np.isfinite(hi), y, 0.0)
    total = float(np.sum(np.where(y > 0, y * np.where(np.isfinite(lo), lo, 0.0), 0.0))
                  + np.sum(np.where(y < 0, y * np.where(np.isfinite(hi), hi, 0.0), 0.0)))
    sizes = np.diff(np.append(starts, len(idx)))
    a_ty = np.bincount(idx, weights=val * np.repeat(y, sizes), minlength=milp.num_cols)
    d = milp.cost - a_ty
    total += float(np.sum(np.minimum(d * milp.lo, d * milp.hi)))
    return total, d


def excluded(cols: Sequence[int], milp: Milp, bound: float, reduced: np.ndarray, ceiling: float) -> list[int]:
    """The positions in `cols` (0/1 columns, currently free) that no solution costing at most `ceiling` sets to 1:
    bound + reduced cost above the ceiling, with a margin for the rounding of the sums."""
    margin = 1e-9 * max(1.0, abs(ceiling)) + 1e-12 * len(milp.rows)
    out = []
    for pos, j in enumerate(cols):
        if milp.lo[j] == 0.0 and milp.hi[j] == 1.0 and bound + max(reduced[j], 0.0) > ceiling + margin:
            out.append(pos)
    return out
