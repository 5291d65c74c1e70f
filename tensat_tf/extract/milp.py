"""A minimisation MILP as plain arrays, the one model format both solver back-ends read (solvers.py).

Building the extraction model as PuLP expressions cost ~2.6 s on TENSAT's bert.json and handing it to HiGHS through
PuLP another ~1.2 s, a third of a 10 s budget; as index arrays it is a few hundred milliseconds, and HiGHS then takes
it in bulk (and later only the rows added since). CBC still goes through PuLP (its MPS writer and solution reader),
built from these arrays on each solve.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


class Milp:
    """min cost.x  s.t.  row_lo <= A x <= row_hi,  lo <= x <= hi,  x integer where `integer`.

    Add every column first, then rows (rows may also be added between solves). `lo`/`hi` (numpy arrays once the first
    row is added) may be changed between solves to fix columns; `start`, when set, is the warm start (a full vector).
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self._cost: list[float] = []
        self._lo: list[float] = []
        self._hi: list[float] = []
        self._integer: list[bool] = []
        self.cost = self.lo = self.hi = self.integer = None     # numpy arrays after the columns are frozen
        self.rows: list[tuple[float, float, np.ndarray, np.ndarray]] = []   # (lo, hi, column indices, values)
        self.start: Optional[np.ndarray] = None

    @property
    def num_cols(self) -> int:
        return len(self.names)

    def add_col(self, name: str, cost: float, lo: float, hi: float, integer: bool) -> int:
        if self.cost is not None:
            raise RuntimeError("columns are frozen once rows have been added")
        self.names.append(name)
        self._cost.append(float(cost))
        self._lo.append(float(lo))
        self._hi.append(float(hi))
        self._integer.append(bool(integer))
        return len(self.names) - 1

    def _freeze(self) -> None:
        if self.cost is None:
            self.cost = np.array(self._cost, dtype=np.float64)
            self.lo = np.array(self._lo, dtype=np.float64)
            self.hi = np.array(self._hi, dtype=np.float64)
            self.integer = np.array(self._integer, dtype=bool)

    def add_row(self, cols: Sequence[int], vals: Sequence[float], lo: float = -math.inf,
                hi: float = math.inf) -> None:
        """lo <= sum vals[j] * x[cols[j]] <= hi. Repeated columns are summed; zero coefficients dropped."""
        self._freeze()
        cols, vals = list(cols), list(vals)
        if len(set(cols)) == len(cols) and all(v != 0.0 for v in vals):      # the usual case: nothing to merge
            self.rows.append((float(lo), float(hi), np.array(cols, dtype=np.int32), np.array(vals, dtype=np.float64)))
            return
        acc: dict[int, float] = {}
        for c, v in zip(cols, vals):
            acc[c] = acc.get(c, 0.0) + float(v)
        keys = sorted(k for k, v in acc.items() if v != 0.0)
        self.rows.append((float(lo), float(hi), np.array(keys, dtype=np.int32),
                          np.array([acc[k] for k in keys], dtype=np.float64)))

    def row_arrays(self, first: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows `first`.. in bulk, compressed by row: (lo, hi, starts, column indices, values), lo / hi with their
        infinities, starts[k] the position in the indices where row first + k begins. What HiGHS takes (solvers.py)
        and what the Lagrangian bound sums over (prune.py)."""
        rows = self.rows[first:]
        lo = np.array([r[0] for r in rows], dtype=np.float64)
        hi = np.array([r[1] for r in rows], dtype=np.float64)
        if not rows:
            return lo, hi, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
        starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
        idx = np.concatenate([r[2] for r in rows]).astype(np.int32)
        val = np.concatenate([r[3] for r in rows]).astype(np.float64)
        return lo, hi, starts, idx, val

    def objective(self, x: np.ndarray) -> float:
        self._freeze()
        return float(self.cost @ x)
