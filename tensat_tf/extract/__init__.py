"""Extraction: choose one e-node per needed e-class so the program is acyclic and its DAG cost is small.

    from tensat_tf.extract import extract, serialized
    result = extract(serialized.load("bert.json"), method="ilp", ilp_seconds=20)
    result.choice, result.dag_cost, result.status, result.gap, result.bound

method="greedy" is the greedy DAG extractor (greedy.py); method="ilp" starts from it and improves it with an ILP
(ilp.py) under a work limit (the same answer on every machine) and a hard wall-clock limit (the backstop), so its
cost is never above greedy's; it stops once the choice is proven within 1 % of a lower bound (the solver's, the
LP bound of reduced-cost fixing in prune.py, or the critical-path bound of bound.py). An e-graph the whole ILP does
not prove within WHOLE_FIRST_WORK units, or leaves far from a proof after its root (WHOLE_GIVE_UP), is solved in
independent parts where it has them (decompose.py), each distinct part once; one whose parts repeat (a network of
equal blocks) goes to its parts straight away. Every result is checked acyclic.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag, decompose, greedy, ilp, solvers
from tensat_tf.extract.greedy import NoExtraction

METHODS = ("ilp", "greedy")
# An e-graph that splits into parts (decompose.py) gets this much work as a whole first: the whole ILP has one model
# and one search where the parts have one each, and proves the suite's probe e-graphs in 2-30 units (0.03-1.1 s),
# faster than their parts do (DenseNet-121: 0.28 s against 0.7 s for 60 parts; MobileNetV3-Small: 1.0 s at 30 units
# against 1.6 s). Where it does not, the parts go on with the full limit: ResNet50 at 224 pixels, whose whole ILP
# stops unproven on its limit of 60 units after 2-3.5 s and whose 19 parts take 1-1.4 s (BENCHMARKS.md). 0: the parts
# alone.
WHOLE_FIRST_WORK = 32
# ... and gives it up at its 4th check (after its root) while its gap is still over 60 %: on a large e-graph each check
# costs 0.1-0.15 s. After 4 checks the suite's probe e-graphs are within 45 % (ConvNeXt-Tiny; most within 30 %) and all
# are proven within 32; ResNet v1 at 224 pixels' that the whole does not prove within 60 are at 78-84 %, and their
# parts are cheaper and mostly proven (BENCHMARKS.md).
WHOLE_GIVE_UP = solvers.GiveUp(check=4, gap=0.6)
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
    parts: int = 0                            # the parts solved one by one (decompose.py); 0: the whole e-graph only
    part_results: tuple = ()                  # each part's ilp.IlpResult, for a later extraction of the same e-graph


def resolve_solver(solver: str) -> str:
    """"auto" is HiGHS when highspy is importable (it beat CBC on every TENSAT e-graph, see BENCHMARKS.md)."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, not {solver!r}")
    if solver == "auto":
        return "highs" if solvers.highs_available() else "cbc"
    return solver


def extract(egraph: EGraphData, method: str = "ilp", ilp_seconds: float = 10.0, solver: str = "auto",
            rel_gap: float = ilp.REL_GAP, work: int = ilp.WORK, whole_first: Optional[int] = None,
            previous: Optional["Extraction"] = None) -> Extraction:
    """Extract from `egraph`. For "ilp", `work` bounds the solvers' work (solvers.py) and `ilp_seconds` the whole
    call's wall clock (greedy, model building and solving), and the search stops once the choice is proven within
    `rel_gap` (relative) of a lower bound. An e-graph that splits into parts (decompose.py) is first tried whole with
    `whole_first` units of work (default WHOLE_FIRST_WORK; 0: the parts straight away, as when the parts repeat:
    decompose.Split.repeats). `previous`: an extraction of this same e-graph with the same rel_gap under other
    limits (a saturation probe's): the parts it proved are taken as they are, as searching them again would prove
    the same choice.
    Raises NoExtraction when no acyclic choice avoids the blacklist, ValueError on a bad argument."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    t0 = time.monotonic()
    start = greedy.greedy_choice(egraph)
    start_cost = dag.dag_cost(egraph, start)
    if method == "greedy":
        return _finish(egraph, start, "greedy", "feasible", t0, None, None, start_cost)

    name = resolve_solver(solver)
    where = decompose.find(egraph)
    whole_first = WHOLE_FIRST_WORK if whole_first is None else whole_first
    parts: list[decompose.Part] = []
    results: list[ilp.IlpResult] = []
    if where is not None and (not whole_first or where.repeats()) and (parts := where.parts()):
        res, results = _solve_parts(egraph, parts, start, start_cost, t0 + ilp_seconds, name, rel_gap, work,
                                    previous)
    else:
        res = ilp.solve_ilp(egraph, start, ilp_seconds - (time.monotonic() - t0), name, rel_gap=rel_gap,
                            work=min(work, whole_first or work) if where is not None else work,
                            give_up=WHOLE_GIVE_UP if where is not None else None)
        if where is not None and res.status != "optimal" and (parts := where.parts()):
            split, results = _solve_parts(egraph, parts, start, start_cost, t0 + ilp_seconds, name, rel_gap, work,
                                          previous)
            res = _better(res, split, egraph, rel_gap)
    choice, status = res.choice, res.status
    valid = dag.is_valid(egraph, choice)
    if not valid:                               # never returned by solve_ilp; a last line of defence
        choice, status = start, "fallback"
    out = _finish(egraph, choice, "ilp", status, t0, res.gap, name, start_cost, res.bound, res.work, res.clocked,
                  acyclic=True if valid else None)
    out.parts, out.part_results = len(parts), tuple(results)
    return out


def _solve_parts(egraph: EGraphData, parts: list[decompose.Part], start: dict[int, int], start_cost: float,
                 deadline: float, solver: str, rel_gap: float, work: int, previous: Optional[Extraction] = None
                 ) -> tuple[ilp.IlpResult, list[ilp.IlpResult]]:
    """The ILP on each part of a decomposed e-graph (decompose.py), one after another, merged: its cost is the sum of
    the parts', and so is its bound. Each part is one ILP and gets `work`, as a whole e-graph would (a probe's 60 units
    shared by ResNet50's 19 parts ran out before the last ones, which together needed 190-300 units and 1.0-1.4 s);
    the clock, what is left of it. Never worse than `start`, the whole e-graph's greedy choice (each part starts from
    its own greedy choice, which may add up to more; start_cost: its DAG cost). `previous`: an extraction of the same
    e-graph, whose proven parts are taken as they are, and whose unproven ones are searched again from their choice,
    to within what the whole's rel_gap leaves of the known parts' distances to their bounds (ResNet152 at 224
    pixels: the final extraction's one unproven part took 827 units instead of 1,743); a part equal to one solved
    before it (decompose.Part.key: a repeated block) takes that one's result, which solving it again would give.
    Also returns each part's result."""
    known = previous.part_results if previous is not None and len(previous.part_results) == len(parts) else ()
    # What each known part's choice costs and how far it is from its bound: the whole is within rel_gap once the
    # sum of those distances is within rel_gap of the sum of the costs, so a part searched again need only take its
    # own distance under what the others leave of that.
    known_cost = [dag.dag_cost(p.egraph, r.choice) for p, r in zip(parts, known)]
    known_gap = [c - r.bound if r.bound is not None else c for c, r in zip(known_cost, known)]
    choices, bound, used, clocked, statuses, results = [], 0.0, 0, False, set(), []
    solved: dict[tuple, ilp.IlpResult] = {}     # Part.key -> its result: a repeated block is solved once
    for k, part in enumerate(parts):
        g = part.egraph
        key = part.key()
        if k < len(known) and known[k].status == "optimal":
            res = dataclasses.replace(known[k], work=0, clocked=False)
        elif key in solved:
            res = dataclasses.replace(solved[key], work=0)
        elif k < len(known):
            slack = rel_gap * sum(known_cost) - (sum(known_gap) - known_gap[k])
            res = ilp.solve_ilp(g, known[k].choice, deadline - time.monotonic(), solver, work=work,
                                rel_gap=max(rel_gap, slack / known_cost[k]) if known_cost[k] > 0 else rel_gap)
            if known[k].bound is not None and (res.bound is None or res.bound < known[k].bound):
                res = dataclasses.replace(res, bound=min(known[k].bound, dag.dag_cost(g, res.choice)))
        else:
            res = ilp.solve_ilp(g, greedy.greedy_choice(g), deadline - time.monotonic(), solver, rel_gap=rel_gap,
                                work=work)
        solved.setdefault(key, res)
        results.append(res)
        choices.append(res.choice)
        used += res.work
        clocked |= res.clocked
        statuses.add(res.status)
        bound = None if bound is None or res.bound is None else bound + res.bound
    choice = dag.prune(egraph, decompose.merge(egraph, parts, choices))
    cost = dag.dag_cost(egraph, choice)
    if not cost <= start_cost or not dag.is_valid(egraph, choice):
        choice, cost = start, start_cost
    if bound is not None:
        bound = min(bound, cost)
    gap = None if bound is None else ilp._gap(cost, bound)
    if gap is not None and gap <= rel_gap:
        status = "optimal"
    else:
        status = next(s for s in ("time_limit", "work_limit", "feasible", "fallback", "optimal") if s in statuses)
    return ilp.IlpResult(choice, status, gap, bound, len(parts), used, clocked), results


def _better(whole: ilp.IlpResult, split: ilp.IlpResult, egraph: EGraphData, rel_gap: float) -> ilp.IlpResult:
    """The cheaper choice of a whole e-graph's ILP and its split one, with the higher of their bounds."""
    whole_cost, split_cost = dag.dag_cost(egraph, whole.choice), dag.dag_cost(egraph, split.choice)
    pick, cost = (split, split_cost) if split_cost < whole_cost else (whole, whole_cost)
    bounds = [b for b in (whole.bound, split.bound) if b is not None]
    bound = min(max(bounds), cost) if bounds else None
    gap = None if bound is None else ilp._gap(cost, bound)
    status = "optimal" if gap is not None and gap <= rel_gap else pick.status
    return ilp.IlpResult(pick.choice, status, gap, bound, whole.iterations + split.iterations,
                         whole.work + split.work, whole.clocked or split.clocked)


def _finish(egraph, choice, method, status, t0, gap, solver, start_cost, bound=None, work=0,
            clocked=False, acyclic: Optional[bool] = None) -> Extraction:
    """acyclic: already known (a valid choice is acyclic), or None to check: each check builds the chosen graph
    (0.05 s on NASNet-Mobile's probes)."""
    return Extraction(choice=choice, dag_cost=dag.dag_cost(egraph, choice), method=method, status=status,
                      seconds=time.monotonic() - t0,
                      acyclic=dag.is_acyclic(egraph, choice) if acyclic is None else acyclic, gap=gap,
                      solver=solver, greedy_dag_cost=start_cost, bound=bound, work=work, clocked=clocked)
