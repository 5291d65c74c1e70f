"""Extraction: choose one e-node per needed e-class so the program is acyclic and its DAG cost is small.

    from tensat_tf.extract import extract, serialized
    result = extract(serialized.load("bert.json"), method="ilp", ilp_seconds=20)
    result.choice, result.dag_cost, result.status, result.gap, result.bound

method="greedy" is the greedy DAG extractor (greedy.py); method="ilp" starts from it and improves it with an ILP
(ilp.py) under a work limit (the same answer on every machine) and a hard wall-clock limit (the backstop), so its
cost is never above greedy's; it stops once the choice is proven within 1 % of a lower bound (the solver's, the LP bound of reduced-cost fixing in prune.py, or the critical-path bound of
bound.py). Every result is checked acyclic.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag, greedy, ilp, solvers
from tensat_tf.extract.greedy import NoExtraction

METHODS = ("ilp", "greedy")
SOLVERS = ("auto", "cbc", "highs")

__all__ = ["Extraction", "NoExtraction", "extract", "METHODS", "SOLVERS"]


@dataclasses.dataclass
class Extraction:
    choice: dict[int, int]       # class -> chosen node, for exactly the classes the roots need
    dag_cost: float              # each chosen node counted once
    method: str                  # "ilp" | "greedy"
    status: str                  # "optimal" | "feasible" | "work_limit" | "time_limit" | "fallback" (see ilp.py)
    seconds: float               # wall-clock time of the whole call
    acyclic: bool
    gap: Optional[float]         # (dag_cost - bound) / dag_cost; None without a bound (always for greedy)
    solver: Optional[str]        # "cbc" | "highs" for the ILP, None for greedy
    greedy_dag_cost: Optional[float] = None   # the greedy choice's DAG cost (the ILP's warm start)
    bound: Optional[float] = None             # proven lower bound on every acyclic choice's DAG cost (ILP only)
    work: int = 0                             # solver work spent (solvers.py), the same on every machine
    clocked: bool = False                     # the wall clock cut the search short: may differ on another machine


def resolve_solver(solver: str) -> str:
    """"auto" is HiGHS when highspy is importable (it beat CBC on every TENSAT e-graph, see BENCHMARKS.md)."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, not {solver!r}")
    if solver == "auto":
        return "highs" if solvers.highs_available() else "cbc"
    return solver


def extract(egraph: EGraphData, method: str = "ilp", ilp_seconds: float = 10.0, solver: str = "auto",
            rel_gap: float = ilp.REL_GAP, work: int = ilp.WORK) -> Extraction:
    """Extract from `egraph`. For "ilp", `work` bounds the solvers' work (solvers.py) and `ilp_seconds` the whole
    call's wall clock (greedy, model building and solving), and the search stops once the choice is proven within
    `rel_gap` (relative) of a lower bound.
    Raises NoExtraction when no acyclic choice avoids the blacklist, ValueError on a bad argument."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    t0 = time.monotonic()
    start = greedy.greedy_choice(egraph)
    start_cost = dag.dag_cost(egraph, start)
    if method == "greedy":
        return _finish(egraph, start, "greedy", "feasible", t0, None, None, start_cost)

    name = resolve_solver(solver)
    res = ilp.solve_ilp(egraph, start, ilp_seconds - (time.monotonic() - t0), name, rel_gap=rel_gap, work=work)
    choice, status = res.choice, res.status
    valid = dag.is_valid(egraph, choice)
    if not valid:                               # never returned by solve_ilp; a last line of defence
        choice, status = start, "fallback"
    return _finish(egraph, choice, "ilp", status, t0, res.gap, name, start_cost, res.bound, res.work, res.clocked,
                   acyclic=True if valid else None)


def _finish(egraph, choice, method, status, t0, gap, solver, start_cost, bound=None, work=0,
            clocked=False, acyclic: Optional[bool] = None) -> Extraction:
    """acyclic: already known (a valid choice is acyclic), or None to check: each check builds the chosen graph
    (0.05 s on NASNet-Mobile's probes)."""
    return Extraction(choice=choice, dag_cost=dag.dag_cost(egraph, choice), method=method, status=status,
                      seconds=time.monotonic() - t0,
                      acyclic=dag.is_acyclic(egraph, choice) if acyclic is None else acyclic, gap=gap,
                      solver=solver, greedy_dag_cost=start_cost, bound=bound, work=work, clocked=clocked)
