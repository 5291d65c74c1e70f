"""ILP extraction (TENSAT §4.3) with PuLP: minimum DAG cost, acyclic, under a hard wall-clock limit.

Model, on the reduced e-graph (reduce.py):
  x_i in {0,1} per e-node; minimise sum c_i x_i (each chosen node paid once: DAG cost, not tree cost).
  roots:     sum_{j in root class} x_j >= 1
  children:  sum_{j in class k} x_j >= sum_{i in c, k in kids(i)} x_i    for every class edge c->k
  one node:  sum_{j in class c} x_j <= 1                    an optimal choice never needs two (costs are >= 0),
                                                            and it makes the per-class-edge order rows below valid
Acyclicity, two ways (chosen by measurement, see BENCHMARKS.md):
  "order": a real t_c per class, only for classes on a cycle of the e-graph (a strongly connected component, SCC):
           t_c - t_k >= 1 - M (1 - sum_{i in c, k in kids(i)} x_i)  for each class edge c->k inside one SCC,
           0 <= t <= M-1, M = SCC size. Edges between SCCs can never close a cycle, so they get no row; one row per
           class edge (not per node) because at most one node of c is chosen. t need not be integer: with x integer,
           strict decrease of t along every chosen edge already rules out cycles.
  "lazy":  no order rows; solve, look for cycles in the chosen graph, forbid each found cycle c0->...->c_{n-1}
           with sum over its edges of sum_{i in c_l, c_{l+1} in kids(i)} x_i <= n-1, and re-solve.
  Optionally (short_cycles), that same cycle row for every 2- and 3-cycle of the class graph up front: redundant
  with the order rows for integer x, but it tightens the LP, whose big-M order rows are nearly void.

Search (with "order", when the e-graph has two or more SCCs): first a neighbourhood search that re-solves one SCC at
a time with the others fixed (_improve_by_scc; up to 75 % of the time), then the whole model from its result, which
may still improve it and gives the global lower bound. On TENSAT's bert.json the whole model alone ends anywhere
between 0.71 and 0.77 in 20 s from run to run; the SCC search reaches 0.7047, the proven optimum, in about 14 s
(BENCHMARKS.md).

The greedy DAG choice is the warm start and the fallback: the best acyclic choice known is kept throughout, so the
result is never worse than greedy, and it is checked acyclic before it is returned.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from typing import Optional

import networkx as nx
import pulp

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag, solvers
from tensat_tf.extract.reduce import Reduced, reduce

# optimal:    proven optimal (within the solver's relative gap tolerance, 1e-4 for HiGHS);
# time_limit: the clock ended the search; the answer is the best acyclic choice found (possibly the start);
# feasible:   the solver stopped unproven well before its time limit (its own limits);
# fallback:   no solve returned a valid acyclic choice (or there was no time to build the model): the start choice.
STATUSES = ("optimal", "feasible", "time_limit", "fallback")
log = logging.getLogger(__name__)


@dataclasses.dataclass
class IlpResult:
    choice: dict[int, int]
    status: str                  # one of STATUSES
    gap: Optional[float]         # (cost - best proven bound) / cost, when the solver gave a bound
    bound: Optional[float]
    iterations: int              # solver calls (more than one only with lazy cycle cuts)


class _Model:
    """The PuLP problem over a Reduced e-graph, and how to read a choice back from it."""

    def __init__(self, egraph: EGraphData, red: Reduced, acyclicity: str):
        self.egraph, self.red = egraph, red
        self.prob = pulp.LpProblem("tensat_extract", pulp.LpMinimize)
        # Zero-padded names keep PuLP's (name-sorted) variable order, and so the MPS file, deterministic.
        width = len(str(max(red.nodes, default=0)))
        self.x = {i: pulp.LpVariable(f"x{i:0{width}d}", cat=pulp.LpBinary) for i in red.nodes}
        nodes = egraph.nodes
        self.prob += pulp.lpSum(nodes[i].cost * self.x[i] for i in red.nodes)

        # edge_nodes[(c, k)]: the nodes of class c having child class k (the nodes that realise edge c->k).
        self.edge_nodes: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i in red.nodes:
            for k in red.kids[i]:
                self.edge_nodes[(nodes[i].eclass, k)].append(i)

        in_class = {c: pulp.lpSum(self.x[j] for j in members) for c, members in red.classes.items()}
        for r in red.roots:
            self.prob += in_class[r] >= 1
        for c, members in red.classes.items():
            if len(members) > 1:
                self.prob += in_class[c] <= 1
        # One child row per class edge, not per node: with at most one node per class the sum of the nodes needing
        # k is itself 0/1, and the aggregated row is both fewer rows and a tighter LP than one row per node.
        for (c, k), members in sorted(self.edge_nodes.items()):
            self.prob += in_class[k] - pulp.lpSum(self.x[i] for i in members) >= 0

        graph = nx.DiGraph(list(self.edge_nodes))
        graph.add_nodes_from(red.classes)
        self.scc_of: dict[int, int] = {}
        self.scc_size: dict[int, int] = {}
        for n, comp in enumerate(sorted((sorted(s) for s in nx.strongly_connected_components(graph) if len(s) > 1))):
            for c in comp:
                self.scc_of[c], self.scc_size[c] = n, len(comp)
        self.cyclic = bool(self.scc_of)

        self.t: dict[int, pulp.LpVariable] = {}
        if acyclicity == "order" and self.cyclic:
            width = len(str(max(self.scc_of)))
            self.t = {c: pulp.LpVariable(f"t{c:0{width}d}", 0, self.scc_size[c] - 1) for c in sorted(self.scc_of)}
            for (c, k), members in sorted(self.edge_nodes.items()):
                if self.scc_of.get(c, -1) == self.scc_of.get(k, -2):
                    big_m = self.scc_size[c]
                    self.prob += self.t[c] - self.t[k] + big_m * (1 - pulp.lpSum(self.x[i] for i in members)) >= 1

    def add_short_cycle_cuts(self) -> int:
        """Cycle rows for every 2- and 3-cycle of the class graph (inside SCCs), each listed once, from its
        smallest class. A dedicated loop: 100x faster than networkx's simple_cycles with a length bound."""
        succ: dict[int, set[int]] = defaultdict(set)
        for c, k in self.edge_nodes:
            if self.scc_of.get(c, -1) == self.scc_of.get(k, -2):
                succ[c].add(k)
        n = 0
        for a in sorted(succ):
            for b in sorted(succ[a]):
                if b > a and a in succ[b]:
                    self.prob += self.cycle_cut([a, b])
                    n += 1
                for c in sorted(succ[b]) if b > a else ():
                    if c > a and a in succ[c]:
                        self.prob += self.cycle_cut([a, b, c])
                        n += 1
        return n

    def set_start(self, choice: dict[int, int]) -> None:
        """Warm start from an acyclic choice: its x, and t = the rank of each chosen class in a children-first
        order within its SCC (any t is feasible for classes not chosen, as their edges are switched off)."""
        for i, v in self.x.items():
            v.setInitialValue(1 if choice.get(self.egraph.nodes[i].eclass) == i else 0)
        if not self.t:
            return
        order = reversed(list(nx.topological_sort(dag.class_graph(self.egraph, choice))))
        rank: dict[int, int] = defaultdict(int)
        for v in self.t.values():
            v.setInitialValue(0)
        for c in order:
            if c in self.t:
                self.t[c].setInitialValue(rank[self.scc_of[c]])
                rank[self.scc_of[c]] += 1

    def read_choice(self) -> Optional[dict[int, int]]:
        """The solution as {class: node} for the classes the roots need, or None if incomplete."""
        picked: dict[int, int] = {}
        for i, v in self.x.items():               # ascending node ids: the lowest chosen node wins a tie
            if v.varValue is not None and v.varValue > 0.5:
                picked.setdefault(self.egraph.nodes[i].eclass, i)
        try:
            return dag.prune(self.egraph, picked)
        except KeyError:
            return None

    def free_only_scc(self, scc: Optional[int], choice: dict[int, int]) -> None:
        """Fix the nodes of every SCC but `scc` to `choice`; classes on no cycle stay free (scc=None frees all)."""
        for i, v in self.x.items():
            c = self.egraph.nodes[i].eclass
            if scc is not None and self.scc_of.get(c, scc) != scc:
                v.lowBound = v.upBound = 1 if choice.get(c) == i else 0
            else:
                v.lowBound, v.upBound = 0, 1

    def cycle_cut(self, cycle: list[int]) -> pulp.LpConstraint:
        n = len(cycle)
        edges = [(cycle[l], cycle[(l + 1) % n]) for l in range(n)]
        return pulp.lpSum(self.x[i] for e in edges for i in self.edge_nodes[e]) <= n - 1


def solve_ilp(egraph: EGraphData, start: dict[int, int], seconds: float, solver: str,
              acyclicity: str = "order", short_cycles: bool = True, scc_search: bool = True,
              threads: int = 1) -> IlpResult:
    """Best acyclic choice found within `seconds` (model building included), never worse than `start`, which must
    be a valid acyclic choice (the greedy one). acyclicity: "order" | "lazy" (see the module doc); scc_search:
    with "order", first improve the start one SCC at a time (see _improve_by_scc)."""
    if acyclicity not in ("order", "lazy"):
        raise ValueError(f"acyclicity must be 'order' or 'lazy', not {acyclicity!r}")
    if any(n.cost < 0 for n in egraph.nodes):
        raise ValueError("ILP extraction needs non-negative node costs")
    t0 = time.monotonic()
    deadline = t0 + seconds - _TAIL
    best = dict(start)
    if seconds < _MIN_SECONDS:                   # not even time to build the model (about 1.5 s on bert.json)
        return IlpResult(best, "fallback", None, None, 0)
    model = _Model(egraph, reduce(egraph), acyclicity)
    if short_cycles:
        model.add_short_cycle_cuts()
    session = solvers.Session(model.prob, solver, threads)
    answered = False                             # did any solve return a valid acyclic choice?
    if scc_search and acyclicity == "order" and len(set(model.scc_of.values())) > 1:
        best, answered = _improve_by_scc(model, session, best, t0 + _SCC_SHARE * seconds)
        model.free_only_scc(None, best)
    best_cost = dag.dag_cost(egraph, best)
    model.set_start(best)

    iterations, bound, proved, stopped_early = 0, None, False, False
    while deadline - time.monotonic() > 0.2:
        iterations += 1
        given = deadline - time.monotonic()
        res = session.solve(given)
        # A solver that gave up unproven with a second or more to spare (its own margins are smaller) did so for its
        # own reasons, not the clock.
        stopped_early = res.status == "feasible" and given - res.seconds > 1.0
        log.debug("whole model: %s in %.2f s, objective %s, bound %s", res.status, res.seconds, res.objective, res.bound)
        if res.bound is not None:                # every solve is a relaxation of the acyclic problem: keep the best
            bound = res.bound if bound is None else max(bound, res.bound)
        choice = model.read_choice() if res.objective is not None else None
        if choice is None:
            break
        if dag.is_valid(egraph, choice):
            cost = dag.dag_cost(egraph, choice)
            answered = True
            if cost < best_cost:
                best, best_cost = choice, cost
            proved = res.status == "optimal"
            break
        if acyclicity != "lazy":
            break                                # cannot happen with order rows, but never trust a solution blindly
        for c in _cycles(egraph, choice):
            model.prob += model.cycle_cut(c)
        model.set_start(best)

    if bound is not None:
        bound = min(bound, best_cost)
    gap = None if bound is None else (0.0 if best_cost <= 0 else (best_cost - bound) / best_cost)
    if proved:
        status = "optimal"
    elif not answered:
        status = "fallback"                      # the ILP gave no acyclic solution: this is the start (greedy) choice
    else:
        status = "feasible" if stopped_early else "time_limit"
    return IlpResult(best, status, gap, bound, iterations)


_MIN_SECONDS = 0.5
# Kept back from the solvers for reading and checking their answer here and in extract() (~0.3 s on bert.json).
_TAIL = 0.4

# At most this share of the time goes to the SCC-by-SCC search; the rest to the whole model, which also gives the
# global bound (the search's bounds hold only for its restricted models).
_SCC_SHARE = 0.75


def _improve_by_scc(model: _Model, session: solvers.Session, best: dict[int, int],
                    until: float) -> tuple[dict[int, int], bool]:
    """Large-neighbourhood search: re-optimise one SCC at a time, all nodes of the other SCCs fixed to the incumbent
    and the acyclic rest of the e-graph free. Cycles never cross SCCs, so each sub-problem keeps only its own order
    rows, and HiGHS solves most of them to optimality in well under a second where the whole model stalls: on
    bert.json, whose 7 SCCs are its 7 merge-rich layers, this is what finds the matmul merges the greedy misses.

    Rounds repeat until every SCC has been solved to optimality since the last improvement (an improvement changes
    the fixed context of all the others). A sub-problem that runs out of its time share is retried in a later round
    with twice the time. Returns (best choice, whether any sub-problem returned a valid choice)."""
    egraph = model.egraph
    size: dict[int, int] = defaultdict(int)
    for s in model.scc_of.values():
        size[s] += 1
    best_cost = dag.dag_cost(egraph, best)
    done: set[int] = set()          # solved to optimality since the last improvement
    solved: dict[int, float] = {}   # SCCs solved to optimality at least once -> seconds that took
    allotted: dict[int, float] = {}
    any_valid = False
    while len(done) < len(size) and until - time.monotonic() >= session.min_seconds:
        # Unsolved SCCs first, sharing the time left between them: re-checking a solved one in a slightly changed
        # context rarely pays and needs about the time it took before, while an unsolved one (bert.json's largest
        # needs ~5 s) is where the next improvement usually is.
        for s in sorted(size, key=lambda k: (k in solved, k)):
            left = until - time.monotonic()
            if left < session.min_seconds:
                break
            if s in done:
                continue
            if s in solved:
                want = 2 * solved[s]
            else:
                want = max(left / sum(1 for k in size if k not in solved), 2 * allotted.get(s, 0.0))
            allotted[s] = min(left, max(session.min_seconds, want))
            model.free_only_scc(s, best)
            model.set_start(best)
            res = session.solve(allotted[s])
            choice = model.read_choice() if res.objective is not None else None
            if choice is not None and dag.is_valid(egraph, choice):
                any_valid = True
                cost = dag.dag_cost(egraph, choice)
                if cost < best_cost - 1e-12 * max(1.0, abs(best_cost)):
                    best, best_cost = choice, cost
                    done.clear()             # every other SCC now sees a different fixed context
            if res.status == "optimal":
                done.add(s)
                solved[s] = res.seconds
            log.debug("scc %d (%d classes): %s in %.2f s, best %.6f", s, size[s], res.status, res.seconds, best_cost)
    return best, any_valid


def _cycles(egraph: EGraphData, choice: dict[int, int]) -> list[list[int]]:
    """One cycle per strongly connected component of the chosen class graph (so one solve can cut several)."""
    g = dag.class_graph(egraph, choice)
    out = []
    for comp in sorted(sorted(s) for s in nx.strongly_connected_components(g) if len(s) > 1):
        out.append([u for u, _ in nx.find_cycle(g.subgraph(comp), source=comp[0])])
    return out
