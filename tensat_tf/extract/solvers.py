"""Solve a Milp (milp.py) under a work limit and a HARD wall-clock limit, from a starting solution (CBC's warm start,
HiGHS's objective cutoff), and report the solver's best bound.

The work limit is what makes a solve's answer the same on every machine: with HiGHS it counts the solver's limit
checks (its MIP interrupt callback, called at the points where it checks its own limits: after each root cut round
and heuristic, and between nodes), so a solve stopped after N checks stopped at the same point of the same search
on a fast machine and on a slow or busy one. A check is a point of the search, not an amount of time: 3-95 ms apart
on this VM (BENCHMARKS.md). CBC gets the work limit as its node limit (-maxNodes). The wall clock is the backstop
that keeps a conversion bounded on any machine; a solve it stops says so (SolveResult.limit == "time"), and its
answer may differ on another machine.

PuLP's own solve() can overrun its timeLimit: CBC has been seen to ignore `-sec` while in preprocessing or a long
LP, and PuLP waits for the subprocess without a timeout. Both backends here pass the limit to the solver AND enforce
it from outside:
  * CBC runs as a subprocess that is killed at the hard deadline (its best solution is then lost, so the soft
    limit handed to CBC stops a little earlier and the kill is only the backstop);
  * HiGHS runs in highspy's solver thread, and is interrupted through its interrupt callback at the deadline.
The caller always keeps its own best solution (at worst the greedy one), so a killed run loses nothing.

The solution comes back as SolveResult.values, a vector over the Milp's columns.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np
import pulp

from tensat_tf.extract.milp import Milp

# Seconds before the caller's deadline at which the solver's own limit is set: CBC's leaves it time to write its
# solution before the kill at the deadline; HiGHS keeps to its limit within ~0.1 s and needs less.
SOFT_MARGIN = 0.5
HIGHS_MARGIN = 0.25
# HiGHS only: how long past the deadline before the run is interrupted, and then abandoned.
GRACE = 1.0


@dataclasses.dataclass
class SolveResult:
    status: str                 # "optimal" | "feasible" (stopped with a solution) | "none" (no solution) | "infeasible"
    objective: Optional[float]  # of the solution in `values`, when there is one
    bound: Optional[float]      # best lower bound the solver proved (minimisation), if it said
    seconds: float
    values: Optional[np.ndarray] = None   # the solution, one value per Milp column
    work: int = 0               # work units spent (HiGHS: limit checks; CBC: branch-and-bound nodes)
    limit: Optional[str] = None # what stopped an unproven solve: "work" (the same everywhere), "time" (the clock)


@dataclasses.dataclass(frozen=True)
class GiveUp:
    """Stop a HiGHS solve at its `check`-th limit check (a point of its search that does not depend on the clock)
    when its relative gap is then above `gap`: a search that far from a proof there is not worth its work."""
    check: int
    gap: float


def highs_available() -> bool:
    return pulp.HiGHS().available()


class Session:
    """Solves one Milp repeatedly with "cbc" or "highs", each time from the Milp's `start` (when set: CBC's warm
    start, HiGHS's objective cutoff; either way a solve that finds nothing better hands it back) and within a
    wall-clock limit.

    Between solves the caller may change column bounds (`milp.lo` / `milp.hi`, to fix part of the model) or add rows.
    HiGHS keeps its model and only receives the changed bounds and the new rows; CBC, a subprocess, always gets the
    whole model anew (through PuLP).
    """

    def __init__(self, milp: Milp, solver: str, threads: int = 1, rel_gap: Optional[float] = None):
        if solver not in ("cbc", "highs"):
            raise ValueError(f"unknown solver {solver!r}")
        self.milp, self.solver, self.threads = milp, solver, threads
        # The solver stops, reporting "optimal", once (incumbent - bound) / incumbent <= rel_gap (None: its default,
        # 1e-4 for HiGHS, 0 for CBC).
        self.rel_gap = rel_gap
        # Below this a solve is pointless: CBC spends about that long writing, starting and presolving bert.json.
        # HiGHS gets HIGHS_MARGIN less than it is given, so under ~0.5 s it has too little to solve anything.
        self.min_seconds = 3.0 if solver == "cbc" else 0.5
        # Below this much work a solve is pointless: HiGHS makes its first checks after its root LP, and stopping
        # there hands back the warm start.
        self.min_work = 1 if solver == "cbc" else 4
        self._highs: Optional["_HiGHS"] = None
        self._pulp: Optional[_PulpMirror] = None

    def solve(self, seconds: float, work: Optional[int] = None, give_up: Optional[GiveUp] = None) -> SolveResult:
        """Solve within `work` units (None: no limit) and `seconds` of wall clock, whichever ends first. `give_up`
        (HiGHS only): stop, as on the work limit, at that check when the gap is still above that share."""
        t0 = time.monotonic()
        seconds = max(seconds, 0.1)
        self.milp._freeze()
        if self.solver == "cbc":
            deadline = t0 + seconds                 # bringing the model over to PuLP counts against the limit
            if self._pulp is None:
                self._pulp = _PulpMirror(self.milp)
            synced = self._pulp.sync(deadline - SOFT_MARGIN)
            if synced is None:
                res = SolveResult("none", None, None, 0.0, limit="time")   # the clock ran out building it
            else:
                res = _CBC(self.threads, self.rel_gap).run(self.milp, *synced, deadline - time.monotonic(), work)
        else:
            if self._highs is None:
                self._highs = _HiGHS(self.milp, self.threads, self.rel_gap)
            res = self._highs.run(seconds, work, give_up)
        res.seconds = time.monotonic() - t0
        return res


def solve(milp: Milp, solver: str, seconds: float, threads: int = 1, rel_gap: Optional[float] = None,
          work: Optional[int] = None) -> SolveResult:
    """One solve of `milp` (see Session)."""
    return Session(milp, solver, threads, rel_gap).solve(seconds, work)


@dataclasses.dataclass
class LpResult:
    status: str                 # "optimal" | "time" (the clock stopped it: values and duals are None) | "failed"
    objective: Optional[float] = None   # the LP relaxation's optimum, as HiGHS reports it
    values: Optional[np.ndarray] = None     # its solution, one value per Milp column
    row_duals: Optional[np.ndarray] = None  # one dual per Milp row (HiGHS's sign: reduced cost = cost - A^T duals)


def solve_lp(milp: Milp, seconds: float) -> Optional[LpResult]:
    """The LP relaxation of `milp` (integrality dropped, current column bounds) with HiGHS, within `seconds` of wall
    clock (a backstop: the simplex method's path does not depend on it); None when HiGHS is missing. Synchronous:
    HiGHS's simplex keeps to its own time limit, unlike its branch and bound."""
    if not highs_available():
        return None
    if seconds <= 0.05:
        return LpResult("time")
    import highspy

    milp._freeze()
    h = _new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(seconds))
    h.addVars(milp.num_cols, *_col_bounds(h, milp))
    h.changeColsCost(milp.num_cols, np.arange(milp.num_cols, dtype=np.int32), milp.cost)
    _add_rows(h, milp, 0)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        return LpResult("time" if status == highspy.HighsModelStatus.kTimeLimit else "failed")
    sol = h.getSolution()
    return LpResult("optimal", float(h.getInfo().objective_function_value), np.array(sol.col_value, dtype=np.float64),
                    np.array(sol.row_dual, dtype=np.float64))


def _col_bounds(h, milp: Milp) -> tuple[np.ndarray, np.ndarray]:
    """The Milp's column bounds with HiGHS's infinity."""
    inf = h.getInfinity()
    return (np.where(np.isinf(milp.lo), -inf, milp.lo).astype(np.float64),
            np.where(np.isinf(milp.hi), inf, milp.hi).astype(np.float64))


def _add_rows(h, milp: Milp, first: int) -> None:
    """Rows `first`.. of the Milp into HiGHS, in one call."""
    if first >= len(milp.rows):
        return
    lo, hi, starts, idx, val = milp.row_arrays(first)
    inf = h.getInfinity()
    h.addRows(len(lo), np.where(np.isinf(lo), -inf, lo), np.where(np.isinf(hi), inf, hi), len(idx), starts, idx, val)


def _new_highs():
    """A highspy.Highs(); the first of the process with its licence banner kept off stdout (_stdout_silenced)."""
    import highspy

    if _HiGHS._banner_done:
        return highspy.Highs()
    with _stdout_silenced():
        h = highspy.Highs()
    _HiGHS._banner_done = True
    return h


class _PulpMirror:
    """The Milp as PuLP objects (for CBC's MPS writer), kept between solves: only new rows, the current bounds and the
    warm start are brought over each time (building bert.json's model through PuLP takes seconds)."""

    def __init__(self, milp: Milp):
        self.milp = milp
        self.prob = pulp.LpProblem("tensat_extract", pulp.LpMinimize)
        self.cols = [pulp.LpVariable(name, cat=pulp.LpInteger if milp.integer[k] else pulp.LpContinuous)
                     for k, name in enumerate(milp.names)]
        self.prob += pulp.LpAffineExpression([(self.cols[k], float(c)) for k, c in enumerate(milp.cost)])
        self.rows_built = 0

    def sync(self, deadline: float) -> Optional[tuple[pulp.LpProblem, list[pulp.LpVariable]]]:
        """The PuLP problem, up to date; None if the deadline passed first (the rows done so far are kept)."""
        milp, cols = self.milp, self.cols
        for n in range(self.rows_built, len(milp.rows)):
            if n % 512 == 0 and time.monotonic() > deadline:
                self.rows_built = n                 # rows before n are in; the next call goes on from n
                return None
            lo, hi, idx, val = milp.rows[n]
            expr = pulp.LpAffineExpression([(cols[j], float(v)) for j, v in zip(idx, val)])
            if not math.isinf(lo):
                self.prob += pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{n}", lo)
            if not math.isinf(hi):
                self.prob += pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{n}u", hi)
        self.rows_built = len(milp.rows)
        for k, v in enumerate(cols):
            v.lowBound = None if math.isinf(milp.lo[k]) else float(milp.lo[k])
            v.upBound = None if math.isinf(milp.hi[k]) else float(milp.hi[k])
            v.setInitialValue(None if milp.start is None else float(milp.start[k]))
        return self.prob, cols


class _CBC(pulp.PULP_CBC_CMD):
    """PuLP's bundled CBC, reusing its MPS writer and solution reader, but with a killable subprocess and the bound
    parsed from CBC's log."""

    def __init__(self, threads: int, rel_gap: Optional[float] = None):
        super().__init__(msg=False, warmStart=True)
        self.n_threads, self.rel_gap = threads, rel_gap

    def run(self, milp: Milp, prob: pulp.LpProblem, cols: list[pulp.LpVariable], seconds: float,
            work: Optional[int] = None) -> SolveResult:
        # Writing the MPS file takes up to a second on bert.json: the limits count from here, not from CBC's start.
        deadline = time.monotonic() + seconds
        with tempfile.TemporaryDirectory(prefix="tensat_cbc_") as tmp:
            mps, sol, mst, log = (os.path.join(tmp, f"m.{ext}") for ext in ("mps", "sol", "mst", "log"))
            vs, var_names, con_names, _ = prob.writeMPS(mps, rename=1)
            self.writesol(mst, prob, vs, var_names, con_names)
            soft = max(0.1, deadline - time.monotonic() - SOFT_MARGIN)
            args = [self.path, mps, "-mips", mst, "-sec", f"{soft:.2f}", "-timeMode", "elapsed"]
            if self.n_threads > 1:
                # "-threads 1" is not one thread: CBC starts a tree-search thread besides the main one, and the two
                # deadlock now and then (CbcBaseModel::waitForThreadsInTree joining a thread that waits in
                # CbcThread::waitThread; gdb on a hung run): 5 of 400 runs of a 6-column model hung without a line
                # of output, 0 of 600 without the flag. The flaky [cbc] tests of tests/test_extract.py were this.
                args += ["-threads", str(self.n_threads)]
            if self.rel_gap is not None:
                args += ["-ratioGap", f"{self.rel_gap:g}"]
            if work is not None:
                args += ["-maxNodes", str(max(1, int(work)))]
            args += ["-solve", "-printingOptions", "all", "-solution", sol]
            with open(log, "w") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    return SolveResult("none", None, None, 0.0, limit="time")
            if proc.returncode != 0 or not os.path.exists(sol):
                return SolveResult("none", None, None, 0.0)
            status, values, _, _, _, sol_status = self.readsol_MPS(sol, prob, vs, var_names, con_names)
            with open(log) as f:
                text = f.read()
        nodes = _parse_float(r"Enumerated nodes:\s*([-+.\deE]+)", text)
        spent = max(1, int(nodes or 0))
        limit = "time" if "Stopped on time" in text else "work" if "Stopped on node" in text else None
        if status == pulp.LpStatusInfeasible:
            return SolveResult("infeasible", None, None, 0.0, work=spent)
        if status != pulp.LpStatusOptimal:          # PuLP's "Optimal" also covers "stopped with a solution"
            return SolveResult("none", None, cbc_bound(text, None), 0.0, work=spent, limit=limit)
        prob.assignVarsVals(values)
        x = np.array([0.0 if v.varValue is None else float(v.varValue) for v in cols], dtype=np.float64)
        obj = milp.objective(x)
        if sol_status == pulp.LpSolutionOptimal:
            # "Optimal" is also a stop within -ratioGap: its bound is below the objective
            return SolveResult("optimal", obj, cbc_bound(text, obj) if "gap tolerance" in text else obj, 0.0, x,
                               work=spent)
        return SolveResult("feasible", obj, cbc_bound(text, obj), 0.0, x, work=spent, limit=limit)


def cbc_bound(log: str, objective: Optional[float]) -> Optional[float]:
    """CBC's proven lower bound, read from its log so that it is never above the true one: "best possible" (full
    precision; a stop on time), else the objective less the "integer gap" it exited on (a stop within -ratioGap),
    else the summary's "Lower bound:", which is rounded (to 3 decimals), less half a unit of its last digit."""
    exact = _parse_float(r"best possible ([-+.\deE]+)", log)
    if exact is not None:
        return exact
    gap = _parse_float(r"integer gap of ([-+.\deE]+)", log)
    if gap is not None and objective is not None:
        return objective - abs(gap) * (1 + 1e-6)   # the gap is printed to 8 digits: round it up
    printed = re.search(r"Lower bound:\s*(\S+)", log)
    if printed is None:
        return None
    mantissa, _, exponent = printed.group(1).lower().partition("e")
    try:
        value, scale = float(printed.group(1)), 10.0 ** int(exponent) if exponent else 1.0
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return value - 0.5 * 10.0 ** -len(mantissa.partition(".")[2]) * scale


def _parse_float(pattern: str, text: str) -> Optional[float]:
    m = re.search(pattern, text)
    try:
        v = float(m.group(1)) if m else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) else None


@contextlib.contextmanager
def _stdout_silenced():
    """Point file descriptor 1 at /dev/null: the first highspy.Highs() of a process prints a licence banner from C++
    straight to stdout, before any option can turn it off, and the CLI's stdout must hold one JSON line only."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class _HiGHS:
    """highspy directly: the Milp in bulk, then only changed bounds and new rows; the start as objective cutoff; an
    interruptible run (highspy's solver thread and cancelSolve)."""

    _banner_done = False

    def __init__(self, milp: Milp, threads: int, rel_gap: Optional[float]):
        import highspy                              # optional dependency: only here, where HiGHS is known to exist

        h = _new_highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", int(threads))
        if rel_gap is not None:
            h.setOptionValue("mip_rel_gap", float(rel_gap))
        got = h.getOptionValue("mip_rel_gap")        # highspy 1.16 answers (status, value)
        self.rel_gap = float(got[1] if isinstance(got, tuple) else got)
        h.HandleUserInterrupt = True
        n = milp.num_cols
        self.milp, self.h = milp, h
        lo, hi = _col_bounds(h, milp)
        h.addVars(n, lo, hi)
        idx = np.arange(n, dtype=np.int32)
        h.changeColsCost(n, idx, milp.cost)
        kinds = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous for b in milp.integer]
        h.changeColsIntegrality(n, idx, np.array(kinds))
        self.built_bounds = (lo, hi)
        self.rows_built = 0
        self._add_new_rows()

    def _add_new_rows(self) -> None:
        _add_rows(self.h, self.milp, self.rows_built)
        self.rows_built = len(self.milp.rows)

    def run(self, seconds: float, work: Optional[int] = None, give_up: Optional[GiveUp] = None) -> SolveResult:
        import highspy

        h = self.h
        self._add_new_rows()
        lo, hi = _col_bounds(h, self.milp)
        if not (np.array_equal(lo, self.built_bounds[0]) and np.array_equal(hi, self.built_bounds[1])):
            idx = np.arange(len(lo), dtype=np.int32)
            h.changeColsBounds(len(idx), idx, lo, hi)
            self.built_bounds = (lo, hi)
        # HiGHS keeps to its own limit within ~0.1 s, so it only needs a small margin; the guard below is spare.
        h.setOptionValue("time_limit", float(max(0.1, seconds - HIGHS_MARGIN)))
        start = self.milp.start
        # The start is HiGHS's objective cutoff (objective_bound), not its incumbent. Given as a solution
        # (setSolution), HiGHS 1.16 can price it below its own cost (its presolve's probing), hand it back as proven
        # and stop: zoo:real_nasnet_mobile's probes got 3.29821 back as 3.29340, and every such solve had to be run
        # again without the start (BENCHMARKS.md). As a cutoff, start - rel_gap * start, it prunes what an incumbent
        # would. HiGHS then proves that nothing is cheaper than the cutoff except what it returns, but it may return a
        # solution above the cutoff (even above the start) and report that solution's cost as its bound: with the
        # cutoff at a set cover's optimum 134 it answered "optimal, 136, bound 136". So the bound kept is never above
        # the cutoff, and the answer is the cheaper of the start and HiGHS's solution.
        start_cost = None if start is None else self.milp.objective(start)
        cutoff = math.inf if start is None else start_cost - self.rel_gap * abs(start_cost)
        h.setOptionValue("objective_bound", float(cutoff))
        state = {"checks": 0, "work": False, "cancel": False}

        def count(event):
            state["checks"] += 1
            state["work"] |= work is not None and state["checks"] >= work
            if give_up is not None and state["checks"] == give_up.check:
                d = event.data_out
                # the gap to the cheaper of the start and HiGHS's incumbent; none known (no start): go on
                top = min(d.mip_primal_bound, math.inf if start_cost is None else start_cost)
                state["work"] |= math.isfinite(top) and top > 0 and (top - d.mip_dual_bound) > give_up.gap * top
            answer(event)

        def answer(event):
            # Every time, True or False: HiGHS keeps the interrupt flag from the last callback, of the last run too
            # (a session's next solve stopped at its first check), and this runs after highspy's own handler.
            event.interrupt(state["work"] or state["cancel"])
        callbacks = [(h.cbMipInterrupt, count), (h.cbSimplexInterrupt, answer), (h.cbIpmInterrupt, answer)]
        for kind, fn in callbacks:
            kind += fn
        try:
            h.startSolve()
            done, _ = h.wait(seconds + GRACE / 2)
            if not done:
                state["cancel"] = True
                h.cancelSolve()
                done, _ = h.wait(GRACE)
        finally:
            for kind, fn in callbacks:
                kind -= fn
        spent = state["checks"]
        if not done:
            # The solver thread ignored the interrupt; it is a daemon thread and is left behind, unused.
            return SolveResult("none", None, None, 0.0, work=spent, limit="time")

        ms = h.getModelStatus()
        info = h.getInfo()
        MS = highspy.HighsModelStatus
        complete = ms in (MS.kOptimal, MS.kInfeasible, MS.kUnboundedOrInfeasible)
        if start is None and ms != MS.kOptimal and complete:
            return SolveResult("infeasible", None, None, 0.0, work=spent)
        # an interrupt the work limit did not ask for is the wall clock's (cancelSolve above)
        limit = ("work" if state["work"] else "time") if ms in (MS.kInterrupt, MS.kTimeLimit) else None
        bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
        if bound is not None:
            bound = min(bound, cutoff)
        elif complete and start is not None:        # infeasible: nothing is cheaper than the cutoff
            bound = cutoff
        x, cost = None, None
        if info.primal_solution_status == int(highspy.SolutionStatus.kSolutionStatusFeasible):
            x = np.array(h.getSolution().col_value, dtype=np.float64)
            cost = self.milp.objective(x)
        if start is not None and (x is None or cost >= start_cost):
            x, cost = start.astype(np.float64), start_cost
        if x is None:
            return SolveResult("none", None, bound, 0.0, work=spent, limit=limit)
        return SolveResult("optimal" if complete else "feasible", cost, bound, 0.0, x, work=spent, limit=limit)
