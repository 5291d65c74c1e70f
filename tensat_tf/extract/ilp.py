"""ILP extraction (the TENSAT paper, MLSys 2021, §4.3), HiGHS or CBC (milp.py, solvers.py): minimum DAG cost,
acyclic, stopping once proven within rel_gap (1 % by default) of a lower bound, under a work limit and a hard
wall-clock limit.

Limits: every decision of where to stop an unproven search is taken on work (solvers.py: HiGHS's limit checks,
CBC's nodes) and on nothing that depends on the machine's speed, so the same e-graph gives the same choice on a fast
machine and on a slow or busy one. The wall clock is a backstop; when it cuts anything short (a solve, an LP, a
search it left no time to start) the result says so (IlpResult.clocked), because its choice may then differ
elsewhere.

Model, on the reduced e-graph (reduce.py):
  x_i in {0,1} per e-node; minimise sum c_i x_i (each chosen node paid once: DAG cost, not tree cost).
  required:  sum_{j in class c} x_j >= 1    for the roots and every class every acyclic choice computes (required.py)
  children:  sum_{j in class k} x_j >= sum_{i in c, k in kids(i)} x_i    for every class edge c->k
  one node:  sum_{j in class c} x_j <= 1                    an optimal choice never needs two (costs are >= 0),
                                                            and it makes the per-class-edge order rows below valid
  fused (EGraphData.fused: node i costs e_i more unless class k = reads(i) is computed by one of producers(i)
             and i is its only reader, partners(i) aside): a column 0 <= p_i <= 1 of cost e_i, p_i >= x_i + x_m - 1
             for every other node m with child k, not a partner (p_i >= x_i when k is a root), and
             p_i >= x_i - sum_{j in producers(i)} x_j, and p_i >= x_i + p_j - 1 for each producer j that is
             itself fused and may run alone; with consumers(i): p_i >= x_i + x_m - 1 for every other node m
             reading i's class (p_i >= x_i when it is a root), p_i >= x_i - sum_{k in consumers(i)} x_k, and
             p_i >= x_i + p_k - 1 for each consumer k that may run alone: p_i is 1 exactly when the program pays
             the extra, as dag.unfused counts
  surcharge (Fused.surcharge s_i: node i costs s_i more when class reads(i) is computed by one of producers(i)):
             a column 0 <= q_i <= 1 of cost s_i, q_i >= x_i + sum_{j in producers(i)} x_j - 1 (dag.surcharged). It
             does not depend on other readers, so choosing a node nothing needs never lowers the objective: every
             solution prices its pruned program at most at its objective
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

Pruning (with HiGHS; _pruned_model): before searching, the LP relaxation's duals bound every choice that uses a node
(prune.py); the nodes only choices costlier than the start can use are blacklisted and the e-graph reduced again,
which drops more, in rounds. Its LP bound is a bound of the acyclic problem (as min(start cost, bound)), and it is
often enough on its own: on TENSAT's bert.json the bound goes from 0.586 to 0.704 of an optimum of 0.7047 once a
choice within about 1 % is known, and 20,244 nodes become 2,009 (BENCHMARKS.md).

Search (with "order", when the e-graph has two or more SCCs): first a neighbourhood search that re-solves one SCC at
a time with the others fixed (_improve_by_scc; up to 75 % of the work), then, pruned again when the search found a
cheaper choice, the whole model from its result, which may still improve it and gives the global lower bound. On
TENSAT's bert.json the whole model alone ends anywhere between 0.71 and 0.77 in 20 s from run to run; the SCC search
gets to about 0.71, and the pruned whole model then proves 0.7047 optimal in under a second (BENCHMARKS.md).

Bound: the solvers' dual bounds (each solve is a relaxation of the acyclic problem: restricted SCC solves excepted,
which are not used for it), the pruning LP's, and the critical-path bound of bound.py, whichever is highest. When the
path bound already proves the greedy choice within rel_gap, no model is built (TENSAT's vgg.json, whose ILP
relaxation is fooled by identity cycles: 1.43 against 4.85, BENCHMARKS.md).

The greedy DAG choice is the warm start and the fallback: the best acyclic choice known is kept throughout, so the
result is never worse than greedy, and it is checked acyclic before it is returned.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import defaultdict
from typing import Optional

import networkx as nx
import numpy as np

from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract import dag, solvers
from tensat_tf.extract.bound import path_lower_bound
from tensat_tf.extract.milp import Milp
from tensat_tf.extract.prune import excluded, lagrangian_bound
from tensat_tf.extract.reduce import Reduced, reduce
from tensat_tf.extract.required import required_classes
from tensat_tf.options import WORK

# optimal:    proven optimal within the relative gap tolerance (rel_gap, 1 % by default), by the solver or by the
#             critical-path bound (bound.py);
# work_limit: the work limit ended the search (the same answer on every machine); the best acyclic choice found;
# time_limit: the wall clock ended the search first; the answer is the best acyclic choice found (possibly the
#             start), and may differ on a faster or slower machine;
# feasible:   the solver stopped unproven for its own reasons (neither limit);
# fallback:   no solve returned a valid acyclic choice (or there was no time to build the model): the start choice.
STATUSES = ("optimal", "feasible", "work_limit", "time_limit", "fallback")
log = logging.getLogger(__name__)
# The default relative optimality gap: the solvers stop, and the result counts as optimal, within 1 % of a proven
# lower bound (issue 11's target); 1e-4 (HiGHS's default) costs many times the time on TENSAT's e-graphs.
REL_GAP = 0.01


@dataclasses.dataclass
class IlpResult:
    choice: dict[int, int]
    status: str                  # one of STATUSES
    gap: Optional[float]         # (cost - bound) / cost, when there is a bound
    bound: Optional[float]       # the best lower bound proven for the acyclic problem (solver's or path bound)
    iterations: int              # solver calls (more than one only with lazy cycle cuts)
    work: int = 0                # solver work spent (solvers.py), the same on every machine
    clocked: bool = False        # the wall clock cut a solve or an LP short: another machine may choose otherwise


class _Model:
    """The extraction MILP (milp.py) over a Reduced e-graph, and how to read a choice back from a solution."""

    def __init__(self, egraph: EGraphData, red: Reduced, acyclicity: str):
        self.egraph, self.red = egraph, red
        nodes = egraph.nodes
        self.milp = m = Milp()
        # Zero-padded names keep the PuLP/MPS variable order (sorted by name) equal to the column order for CBC.
        width = len(str(max(red.nodes, default=0)))
        self.col = {i: m.add_col(f"x{i:0{width}d}", nodes[i].cost, 0, 1, True) for i in red.nodes}

        # edge_nodes[(c, k)]: the nodes of class c having child class k (the nodes that realise edge c->k).
        self.edge_nodes: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i in red.nodes:
            for k in red.kids[i]:
                self.edge_nodes[(nodes[i].eclass, k)].append(i)

        graph = nx.DiGraph(list(self.edge_nodes))
        graph.add_nodes_from(red.classes)
        self.scc_of: dict[int, int] = {}
        self.scc_size: dict[int, int] = {}
        for n, comp in enumerate(sorted((sorted(s) for s in nx.strongly_connected_components(graph) if len(s) > 1))):
            for c in comp:
                self.scc_of[c], self.scc_size[c] = n, len(comp)
        self.cyclic = bool(self.scc_of)
        self.t: dict[int, int] = {}
        if acyclicity == "order" and self.cyclic:
            width = len(str(max(self.scc_of)))
            self.t = {c: m.add_col(f"t{c:0{width}d}", 0.0, 0, self.scc_size[c] - 1, False) for c in sorted(self.scc_of)}

        cols = self.col
        # p_i per fused node (columns after every x and t, so the layout above is unchanged)
        self.penalty: dict[int, tuple[int, list[int], list[int]]] = {}   # node -> (column, other readers, producers)
        self.surcharge: dict[int, int] = {}                              # node -> its q column
        if egraph.fused:
            readers: dict[int, list[int]] = defaultdict(list)
            for i in red.nodes:
                for k in red.kids[i]:
                    readers[k].append(i)
            roots = set(red.roots)
            node_width = len(str(max(red.nodes, default=0)))
            sides: dict[int, tuple[list[int], list[int]]] = {}     # fused node -> (other readers, producers)
            for i in red.nodes:
                f = egraph.fused.get(i)
                if f is not None and f.reads in red.classes:
                    sides[i] = ([o for o in readers.get(f.reads, ()) if o != i and o not in f.partners],
                                [j for j in red.classes[f.reads] if j in f.producers])
            # fused node with consumers -> (the other readers of its class, its consumers)
            downs = {i: ([o for o in readers.get(egraph.nodes[i].eclass, ()) if o not in egraph.fused[i].consumers],
                         [k for k in readers.get(egraph.nodes[i].eclass, ()) if k in egraph.fused[i].consumers])
                     for i in sides if egraph.fused[i].consumers}
            may_pay = {i for i, (others, producers) in sides.items() if others or egraph.fused[i].reads in roots
                       or len(producers) < len(red.classes[egraph.fused[i].reads]) or i in downs}
            # a fused node whose producer or consumer may itself run alone may run alone too (dag.unfused): to a
            # fixpoint
            grown = True
            while grown:
                grown = False
                for i, (_, producers) in sides.items():
                    if i not in may_pay and any(j in may_pay for j in producers):
                        may_pay.add(i)
                        grown = True
            for i in sorted(may_pay):
                self.penalty[i] = (m.add_col(f"p{i:0{node_width}d}", float(egraph.fused[i].extra), 0, 1, False),
                                   *sides[i])
            # q_i per node with a surcharge whose producers are kept, after every p
            charged = {i: producers for i, (_, producers) in sides.items() if producers and egraph.fused[i].surcharge}
            for i, producers in sorted(charged.items()):
                self.surcharge[i] = m.add_col(f"q{i:0{node_width}d}", float(egraph.fused[i].surcharge), 0, 1, False)
            for i, (others, consumers) in downs.items():
                p = self.penalty[i][0]
                if egraph.nodes[i].eclass in roots:
                    m.add_row([p, cols[i]], [1.0, -1.0], lo=0)
                for o in others:
                    m.add_row([p, cols[i], cols[o]], [1.0, -1.0, -1.0], lo=-1)
                m.add_row([p, cols[i]] + [cols[k] for k in consumers], [1.0, -1.0] + [1.0] * len(consumers), lo=0)
                for k in consumers:                                     # p_i >= x_i + p_k - 1
                    if k in self.penalty:
                        m.add_row([p, cols[i], self.penalty[k][0]], [1.0, -1.0, -1.0], lo=-1)
            for i, (p, others, producers) in self.penalty.items():     # rows only once every column is in
                if egraph.fused[i].reads in roots:
                    m.add_row([p, cols[i]], [1.0, -1.0], lo=0)
                for o in others:
                    m.add_row([p, cols[i], cols[o]], [1.0, -1.0, -1.0], lo=-1)
                if len(producers) < len(red.classes[egraph.fused[i].reads]):
                    m.add_row([p, cols[i]] + [cols[j] for j in producers], [1.0, -1.0] + [1.0] * len(producers),
                              lo=0)
                for j in producers:                                     # p_i >= x_i + p_j - 1
                    if j in self.penalty:
                        m.add_row([p, cols[i], self.penalty[j][0]], [1.0, -1.0, -1.0], lo=-1)
            for i, q in self.surcharge.items():                         # q_i >= x_i + sum x_producers - 1
                producers = charged[i]
                m.add_row([q, cols[i]] + [cols[j] for j in producers], [1.0, -1.0] + [-1.0] * len(producers), lo=-1)
        in_class = {c: [cols[j] for j in members] for c, members in red.classes.items()}
        # Every class every acyclic choice computes (the roots among them) is computed once (required.py).
        self.required = set(required_classes(red.classes, red.kids, red.roots))
        for c, members in red.classes.items():
            lo, hi = (1 if c in self.required else -math.inf), (1 if len(members) > 1 else math.inf)
            if lo == 1 or hi == 1:
                m.add_row(in_class[c], [1.0] * len(members), lo=lo, hi=hi)
        # One child row per class edge, not per node: with at most one node per class the sum of the nodes needing
        # k is itself 0/1, and the aggregated row is both fewer rows and a tighter LP than one row per node.
        for (c, k), members in sorted(self.edge_nodes.items()):
            m.add_row(in_class[k] + [cols[i] for i in members], [1.0] * len(in_class[k]) + [-1.0] * len(members), lo=0)
        if self.t:
            # t_c - t_k + M (1 - sum x) >= 1, i.e. t_c - t_k - M sum x >= 1 - M.
            for (c, k), members in sorted(self.edge_nodes.items()):
                if self.scc_of.get(c, -1) == self.scc_of.get(k, -2):
                    big_m = self.scc_size[c]
                    m.add_row([self.t[c], self.t[k]] + [cols[i] for i in members],
                              [1.0, -1.0] + [-float(big_m)] * len(members), lo=1 - big_m)

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
                    self.add_cycle_cut([a, b])
                    n += 1
                for c in sorted(succ[b]) if b > a else ():
                    if c > a and a in succ[c]:
                        self.add_cycle_cut([a, b, c])
                        n += 1
        return n

    def set_start(self, choice: dict[int, int]) -> None:
        """Warm start from an acyclic choice: its x, and t = the rank of each chosen class in a children-first
        order within its SCC (any t is feasible for classes not chosen, as their edges are switched off)."""
        start = np.zeros(self.milp.num_cols, dtype=np.float64)
        for c, i in choice.items():
            if i in self.col:
                start[self.col[i]] = 1.0
        for i in dag.unfused(self.egraph, choice):
            if i in self.penalty:
                start[self.penalty[i][0]] = 1.0
        for i in dag.surcharged(self.egraph, choice):
            if i in self.surcharge:
                start[self.surcharge[i]] = 1.0
        if self.t:
            order = reversed(list(nx.topological_sort(dag.class_graph(self.egraph, choice))))
            rank: dict[int, int] = defaultdict(int)
            for c in order:
                if c in self.t:
                    start[self.t[c]] = rank[self.scc_of[c]]
                    rank[self.scc_of[c]] += 1
        self.milp.start = start

    def read_choice(self, values: Optional[np.ndarray]) -> Optional[dict[int, int]]:
        """The solution as {class: node} for the classes the roots need, or None if incomplete."""
        if values is None:
            return None
        picked: dict[int, int] = {}
        for i in self.red.nodes:                  # ascending node ids: the lowest chosen node wins a tie
            if values[self.col[i]] > 0.5:
                picked.setdefault(self.egraph.nodes[i].eclass, i)
        try:
            return dag.prune(self.egraph, picked)
        except KeyError:
            return None

    def free_only_scc(self, scc: Optional[int], choice: dict[int, int]) -> None:
        """Fix the nodes of every SCC but `scc` to `choice`; classes on no cycle stay free (scc=None frees all)."""
        m = self.milp
        m._freeze()
        for i, k in self.col.items():
            c = self.egraph.nodes[i].eclass
            if scc is not None and self.scc_of.get(c, scc) != scc:
                m.lo[k] = m.hi[k] = 1.0 if choice.get(c) == i else 0.0
            else:
                m.lo[k], m.hi[k] = 0.0, 1.0

    def add_cycle_cut(self, cycle: list[int]) -> None:
        """Not every edge of `cycle` (classes c0 -> c1 -> ... -> c0) may be realised by a chosen node."""
        n = len(cycle)
        edges = [(cycle[l], cycle[(l + 1) % n]) for l in range(n)]
        members = [self.col[i] for e in edges for i in self.edge_nodes[e]]
        self.milp.add_row(members, [1.0] * len(members), hi=n - 1)


def solve_ilp(egraph: EGraphData, start: dict[int, int], seconds: float, solver: str,
              acyclicity: str = "order", short_cycles: bool = True, scc_search: bool = True,
              threads: int = 1, rel_gap: float = REL_GAP, path_bound: bool = True, prune: bool = True,
              work: int = WORK, give_up: Optional[solvers.GiveUp] = None) -> IlpResult:
    """Best acyclic choice found within `work` units of solver work (solvers.py; the same answer on every machine)
    and `seconds` of wall clock (model building included; a backstop), never worse than `start`, which must be a
    valid acyclic choice (the greedy one). acyclicity: "order" | "lazy" (see the module doc); scc_search: with
    "order", first improve the start one SCC at a time (see _improve_by_scc). rel_gap: stop (status "optimal") once
    the choice is proven within this relative gap of a lower bound. path_bound: also use the solver-free
    critical-path bound (bound.py), and skip the ILP when it already proves the start within rel_gap. prune: drop
    the nodes reduced-cost fixing excludes (_pruned_model) before each search, when HiGHS is there. give_up: the
    whole model's solve stops there (solvers.GiveUp), as on the work limit, when its gap is that wide."""
    if acyclicity not in ("order", "lazy"):
        raise ValueError(f"acyclicity must be 'order' or 'lazy', not {acyclicity!r}")
    if not rel_gap >= 0:
        raise ValueError(f"rel_gap must be >= 0, not {rel_gap!r}")
    if work < 1:
        raise ValueError(f"work must be >= 1, not {work!r}")
    if any(n.cost < 0 for n in egraph.nodes):
        raise ValueError("ILP extraction needs non-negative node costs")
    spend = _Spend(work, time.monotonic() + seconds - _TAIL)
    best = dict(start)
    if seconds < _MIN_SECONDS:                   # not even time to build the model (about 1.5 s on bert.json)
        return IlpResult(best, "fallback", None, None, 0, clocked=True)
    low = path_lower_bound(egraph) if path_bound else None
    best_cost = dag.dag_cost(egraph, best)
    if low is not None and best_cost - low <= rel_gap * best_cost:
        return IlpResult(best, "optimal", _gap(best_cost, low), min(low, best_cost), 0)
    prune = prune and solvers.highs_available()

    def build(on: EGraphData) -> _Model:
        nonlocal low
        if not prune:
            model = _Model(on, reduce(on), acyclicity)
            if short_cycles:
                model.add_short_cycle_cuts()
            return model
        nonlocal best, best_cost
        model, lp_bound, lp_choice = _pruned_model(on, best, best_cost, acyclicity, short_cycles, spend, rel_gap)
        if lp_bound is not None:                 # a bound of the acyclic problem with best_cost (prune.py)
            low = lp_bound if low is None else max(low, lp_bound)
        lp_cost = None if lp_choice is None else dag.dag_cost(egraph, lp_choice)
        if lp_cost is not None and lp_cost < best_cost:
            best, best_cost = lp_choice, lp_cost
        return model

    def proven() -> bool:
        return low is not None and best_cost - low <= rel_gap * best_cost

    def finished() -> IlpResult:
        return IlpResult(best, "optimal", _gap(best_cost, low), min(low, best_cost), 0, spend.used, spend.clocked)

    model = build(egraph)
    if proven():
        return finished()
    session = solvers.Session(model.milp, solver, threads, rel_gap)
    answered = False                             # did any solve return a valid acyclic choice?
    while scc_search and acyclicity == "order" and len(set(model.scc_of.values())) > 1:
        # With pruning, the search stops at a choice _REPRUNE cheaper than the one the model was pruned with: a
        # cheaper choice excludes more, so prune again (from what is already dropped, which stays dropped), and go on
        # searching the smaller model unless that proved the choice.
        best, found = _improve_by_scc(model, session, best, spend, int(_SCC_SHARE * work),
                                      (1 - _REPRUNE) * best_cost if prune else -math.inf)
        answered = answered or found
        model.free_only_scc(None, best)
        cost = dag.dag_cost(egraph, best)
        if not (prune and cost < best_cost):
            break
        handed_back = cost < (1 - _REPRUNE) * best_cost       # else the search ended: prune once more, then stop
        best_cost = cost
        model = build(model.egraph)
        if proven():
            return finished()
        session = solvers.Session(model.milp, solver, threads, rel_gap)
        if not handed_back:
            break
    best_cost = dag.dag_cost(egraph, best)
    model.set_start(best)

    iterations, bound, proved = 0, None, False
    while spend.can_solve(session, work, 0.2):       # the whole model: all the work, while 0.2 s are left
        iterations += 1
        res = session.solve(spend.seconds(), spend.left(), give_up)
        spend.charge(res)
        log.debug("whole model: %s in %.2f s (%d work), objective %s, bound %s", res.status, res.seconds, res.work,
                  res.objective, res.bound)
        if res.bound is not None:                # every solve is a relaxation of the acyclic problem: keep the best
            bound = res.bound if bound is None else max(bound, res.bound)
        choice = model.read_choice(res.values)
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
            model.add_cycle_cut(c)
        model.set_start(best)

    if low is not None:                          # all are lower bounds of the acyclic problem: keep the highest
        bound = low if bound is None else max(bound, low)
    if bound is not None:
        bound = min(bound, best_cost)
    gap = None if bound is None else _gap(best_cost, bound)
    if proved or (gap is not None and gap <= rel_gap):
        status = "optimal"
    elif not answered:
        status = "fallback"                      # the ILP gave no acyclic solution: this is the start (greedy) choice
    elif spend.clocked:
        status = "time_limit"
    elif spend.worked:
        status = "work_limit"
    else:
        status = "feasible"                      # the solver gave up unproven for its own reasons
    return IlpResult(best, status, gap, bound, iterations, spend.used, spend.clocked)


class _Spend:
    """What one extraction may spend and has spent: work units (solvers.py), which decide every stop the same way
    on every machine, and the wall clock, the backstop; `clocked` records that the clock cut something short (a
    solve, an LP, or a search it left no time to start), so that another machine may answer otherwise."""

    def __init__(self, work: int, deadline: float):
        self.work, self.deadline = work, deadline
        self.used = 0
        self.clocked = False     # the wall clock stopped something
        self.worked = False      # the work limit stopped something

    def left(self) -> int:
        return self.work - self.used

    def seconds(self) -> float:
        return self.deadline - time.monotonic()

    def charge(self, res: solvers.SolveResult) -> None:
        self.used += res.work
        self.clocked |= res.limit == "time"
        self.worked |= res.limit == "work"

    def can_solve(self, session: solvers.Session, work_until: int, min_seconds: float) -> bool:
        """Whether a solve fits in the work left until `work_until` units are spent and in `min_seconds` of the
        clock; which of the two stopped it is recorded."""
        if work_until - self.used < session.min_work:
            self.worked = True
            return False
        if self.seconds() < min_seconds:
            self.clocked = True
            return False
        return True


def _gap(cost: float, low: float) -> float:
    return 0.0 if cost <= 0 else max(0.0, (cost - low) / cost)


_MIN_SECONDS = 0.5
# Kept back from the solvers for reading and checking their answer here and in extract() (~0.3 s on bert.json).
_TAIL = 0.4

# An LP value this close to 0 or 1 counts as integral (HiGHS's own default tolerance, mip_feasibility_tolerance).
_INTEGRAL = 1e-6

# The SCC search hands back for pruning again once its choice is this much (relative) cheaper than the one the model
# was pruned with (on bert.json: the greedy 0.8247, then 0.7837, which prunes the model to 2,009 nodes).
_REPRUNE = 0.01

# At most this share of the work goes to the SCC-by-SCC search; the rest to the whole model, which also gives the
# global bound (the search's bounds hold only for its restricted models).
_SCC_SHARE = 0.75


def _pruned_model(egraph: EGraphData, best: dict[int, int], best_cost: float, acyclicity: str, short_cycles: bool,
                  spend: _Spend, rel_gap: float) -> tuple[_Model, Optional[float], Optional[dict[int, int]]]:
    """The model of `egraph` less the nodes that reduced-cost fixing (prune.py) excludes from every choice cheaper
    than `best` (of cost best_cost), and the highest LP-dual bound met: every acyclic choice costs at least
    min(best_cost, that bound). Each round solves the model's LP relaxation, blacklists the nodes it excludes,
    and reduces again (reduce.py), which drops more (their ungroundable or unreachable neighbours); rounds go on
    while they exclude something (each excludes at least one node: a handful of rounds on TENSAT's e-graphs) and the
    bound is not yet within rel_gap; the clock (`spend`) stops them only as a backstop. The simplex method's path
    does not depend on the clock, so the rounds are the same on every machine. `best`'s nodes are never dropped, so
    it stays a warm start. The third value: the LP's own solution when it is integral and a valid acyclic choice (then
    the optimum, and no search is needed: the zoo's MobileNetV2 took 18 units of work instead of 28), else None."""
    keep = frozenset(best.values())
    black = set(egraph.blacklist)
    bound: Optional[float] = None
    while True:
        on = egraph if black == egraph.blacklist else dataclasses.replace(egraph, blacklist=frozenset(black))
        model = _Model(on, reduce(on, keep), acyclicity)
        if short_cycles:
            model.add_short_cycle_cuts()
        lp = solvers.solve_lp(model.milp, spend.seconds())
        if lp is None or lp.status != "optimal":
            spend.clocked |= lp is not None and lp.status == "time"
            return model, bound, None
        low, reduced = lagrangian_bound(model.milp, lp.row_duals)
        bound = low if bound is None else max(bound, low)
        x = lp.values[list(model.col.values())]
        if np.all(np.minimum(x, 1.0 - x) <= _INTEGRAL):
            choice = model.read_choice(lp.values)
            if choice is not None and dag.is_valid(egraph, choice):
                return model, bound, choice
        if best_cost - bound <= rel_gap * best_cost:
            return model, bound, None
        nodes = [i for i in sorted(model.col) if i not in keep]
        out = excluded([model.col[i] for i in nodes], model.milp, low, reduced, best_cost)
        log.debug("prune: %d nodes, LP %.6f, bound %.6f, %d excluded", len(model.col), lp.objective, low, len(out))
        if not out:
            return model, bound, None
        black.update(nodes[k] for k in out)


def _improve_by_scc(model: _Model, session: solvers.Session, best: dict[int, int], spend: _Spend,
                    work_until: int, stop_below: float = -math.inf) -> tuple[dict[int, int], bool]:
    """Large-neighbourhood search: re-optimise one SCC at a time, all nodes of the other SCCs fixed to the incumbent
    and the acyclic rest of the e-graph free. Cycles never cross SCCs, so each sub-problem keeps only its own order
    rows, and HiGHS solves most of them to optimality in well under a second where the whole model stalls: on
    bert.json, whose 7 SCCs are its 7 merge-rich layers, this is what finds the matmul merges the greedy misses.

    Rounds repeat until every SCC has been solved to optimality since the last improvement (an improvement changes
    the fixed context of all the others), or the search has spent `spend` up to `work_until` work units. A
    sub-problem that runs out of its work share is retried in a later round with twice the work. The search also
    ends once the best cost is below `stop_below` (for the caller to prune again). Returns (best choice, whether any
    sub-problem returned a valid choice)."""
    egraph = model.egraph
    size: dict[int, int] = defaultdict(int)
    for s in model.scc_of.values():
        size[s] += 1
    best_cost = dag.dag_cost(egraph, best)
    done: set[int] = set()          # solved to optimality since the last improvement
    solved: dict[int, int] = {}     # SCCs solved to optimality at least once -> work that took
    short: set[int] = set()         # SCCs whose last try ran out of its work
    allotted: dict[int, int] = {}
    any_valid = False
    while len(done) < len(size) and spend.can_solve(session, work_until, session.min_seconds):
        # Unsolved SCCs first, sharing the work left between them: re-checking a solved one in a slightly changed
        # context rarely pays and needs about the work it took before, while an unsolved one (bert.json's largest
        # needs ~5 s) is where the next improvement usually is.
        for s in sorted(size, key=lambda k: (k in solved, k)):
            if s in done:
                continue
            if not spend.can_solve(session, work_until, session.min_seconds):
                break
            left = work_until - spend.used
            if s in solved:
                # Twice what solving it took, and twice the last try's work after a try that ran out.
                want = 2 * solved[s] if s not in short else 2 * allotted[s]
            else:
                want = max(left // sum(1 for k in size if k not in solved), 2 * allotted.get(s, 0))
            allotted[s] = min(left, max(session.min_work, want))
            model.free_only_scc(s, best)
            model.set_start(best)
            res = session.solve(spend.seconds(), allotted[s])
            spend.charge(res)
            choice = model.read_choice(res.values)
            if choice is not None and dag.is_valid(egraph, choice):
                any_valid = True
                cost = dag.dag_cost(egraph, choice)
                if cost < best_cost - 1e-12 * max(1.0, abs(best_cost)):
                    best, best_cost = choice, cost
                    done.clear()             # every other SCC now sees a different fixed context
            if res.status == "optimal":
                done.add(s)
                solved[s] = max(1, res.work)
                short.discard(s)
            else:
                short.add(s)
            log.debug("scc %d (%d classes): %s in %.2f s (%d work), best %.6f", s, size[s], res.status, res.seconds,
                      res.work, best_cost)
            if best_cost < stop_below:
                return best, any_valid
    return best, any_valid


def _cycles(egraph: EGraphData, choice: dict[int, int]) -> list[list[int]]:
    """One cycle per strongly connected component of the chosen class graph (so one solve can cut several)."""
    g = dag.class_graph(egraph, choice)
    out = []
    for comp in sorted(sorted(s) for s in nx.strongly_connected_components(g) if len(s) > 1):
        out.append([u for u, _ in nx.find_cycle(g.subgraph(comp), source=comp[0])])
    return out
