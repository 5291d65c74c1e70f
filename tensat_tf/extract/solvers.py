"""Run a PuLP model under a HARD wall-clock limit, with a warm start, and report the solver's best bound.

PuLP's own solve() can overrun its timeLimit: CBC has been seen to ignore `-sec` while in preprocessing or a long
LP, and PuLP waits for the subprocess without a timeout. Both backends here pass the limit to the solver AND enforce
it from outside:
  * CBC runs as a subprocess that is killed at the hard deadline (its best solution is then lost, so the soft
    limit handed to CBC stops a little earlier and the kill is only the backstop);
  * HiGHS runs in highspy's solver thread, and is interrupted through its interrupt callback at the deadline.
The caller always keeps its own best solution (at worst the greedy one), so a killed run loses nothing.

Variable values come back on the PuLP variables (`v.varValue`), as after prob.solve().
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

# Seconds before the caller's deadline at which the solver's own limit is set: CBC's leaves it time to write its
# solution before the kill at the deadline; HiGHS keeps to its limit within ~0.1 s and needs less.
SOFT_MARGIN = 0.5
HIGHS_MARGIN = 0.25
# HiGHS only: how long past the deadline before the run is interrupted, and then abandoned.
GRACE = 1.0


@dataclasses.dataclass
class SolveResult:
    status: str                 # "optimal" | "feasible" (stopped with a solution) | "none" (no solution) | "infeasible"
    objective: Optional[float]  # of the solution on the variables, when there is one
    bound: Optional[float]      # best lower bound the solver proved (minimisation), if it said
    seconds: float


def highs_available() -> bool:
    return pulp.HiGHS().available()


class Session:
    """Solves one PuLP problem (a minimisation) repeatedly with "cbc" or "highs", each time from the variables'
    current values as warm start (set them all, e.g. with setInitialValue) and within a wall-clock limit.

    Between solves the caller may change variable bounds (to fix part of the model) or add rows. HiGHS keeps its
    model and only receives the new bounds unless rows were added, which saves rebuilding a 60k-row model through
    PuLP's Python loops (about 0.7 s on bert.json) for every solve of a neighbourhood search; CBC, a subprocess,
    always gets the whole model anew.
    """

    def __init__(self, prob: pulp.LpProblem, solver: str, threads: int = 1):
        if solver not in ("cbc", "highs"):
            raise ValueError(f"unknown solver {solver!r}")
        self.prob, self.solver, self.threads = prob, solver, threads
        # Below this a solve is pointless: CBC spends about that long writing, starting and presolving bert.json.
        self.min_seconds = 3.0 if solver == "cbc" else 0.3
        self._highs: Optional["_HiGHS"] = None
        self._rows = -1

    def solve(self, seconds: float) -> SolveResult:
        t0 = time.monotonic()
        seconds = max(seconds, 0.1)
        if self.solver == "cbc":
            res = _CBC(self.threads).run(self.prob, seconds)
        else:
            if self._highs is None or self._rows != len(self.prob.constraints):
                self._highs = _HiGHS(self.threads)
                self._highs.build(self.prob)
                self._rows = len(self.prob.constraints)
            res = self._highs.run(self.prob, seconds)
        res.seconds = time.monotonic() - t0
        return res


def solve(prob: pulp.LpProblem, solver: str, seconds: float, threads: int = 1) -> SolveResult:
    """One solve of `prob` (see Session)."""
    return Session(prob, solver, threads).solve(seconds)


class _CBC(pulp.PULP_CBC_CMD):
    """PuLP's bundled CBC, reusing its MPS writer and solution reader, but with a killable subprocess and the bound
    parsed from CBC's log."""

    def __init__(self, threads: int):
        super().__init__(msg=False, warmStart=True)
        self.n_threads = threads

    def run(self, prob: pulp.LpProblem, seconds: float) -> SolveResult:
        # Writing the MPS file takes up to a second on bert.json: the limits count from here, not from CBC's start.
        deadline = time.monotonic() + seconds
        with tempfile.TemporaryDirectory(prefix="tensat_cbc_") as tmp:
            mps, sol, mst, log = (os.path.join(tmp, f"m.{ext}") for ext in ("mps", "sol", "mst", "log"))
            vs, var_names, con_names, _ = prob.writeMPS(mps, rename=1)
            self.writesol(mst, prob, vs, var_names, con_names)
            soft = max(0.1, deadline - time.monotonic() - SOFT_MARGIN)
            args = [self.path, mps, "-mips", mst, "-sec", f"{soft:.2f}", "-timeMode", "elapsed",
                    "-threads", str(self.n_threads), "-solve", "-printingOptions", "all", "-solution", sol]
            with open(log, "w") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    return SolveResult("none", None, None, 0.0)
            if proc.returncode != 0 or not os.path.exists(sol):
                return SolveResult("none", None, None, 0.0)
            status, values, _, _, _, sol_status = self.readsol_MPS(sol, prob, vs, var_names, con_names)
            with open(log) as f:
                text = f.read()
            # "best possible" has full precision; the summary's "Lower bound:" is rounded to 3 decimals.
            bound = _parse_float(r"best possible ([-+.\deE]+)", text)
            if bound is None:
                bound = _parse_float(r"Lower bound:\s*(\S+)", text)
        if status == pulp.LpStatusInfeasible:
            return SolveResult("infeasible", None, None, 0.0)
        if status != pulp.LpStatusOptimal:          # PuLP's "Optimal" also covers "stopped with a solution"
            return SolveResult("none", None, bound, 0.0)
        prob.assignVarsVals(values)
        obj = pulp.value(prob.objective)
        if sol_status == pulp.LpSolutionOptimal:
            return SolveResult("optimal", obj, obj, 0.0)
        return SolveResult("feasible", obj, bound, 0.0)


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


class _HiGHS(pulp.HiGHS):
    """PuLP's in-process HiGHS, plus what PuLP 3.3 leaves out: the warm start (setSolution), an interruptible run
    (highspy's solver thread and cancelSolve), and re-solving after bound changes without rebuilding the model."""

    _banner_done = False

    def __init__(self, threads: int):
        super().__init__(msg=False, threads=threads)

    def build(self, prob: pulp.LpProblem) -> None:
        if _HiGHS._banner_done:
            self.createAndConfigureSolver(prob)
        else:
            with _stdout_silenced():
                self.createAndConfigureSolver(prob)
            _HiGHS._banner_done = True
        self.buildSolverModel(prob)
        self.h = prob.solverModel
        self.h.HandleUserInterrupt = True
        self.variables = prob.variables()
        self.built_bounds = self._bounds()

    def _bounds(self):
        inf = self.h.getInfinity()
        lo = np.array([-inf if v.lowBound is None else v.lowBound for v in self.variables], dtype=np.float64)
        hi = np.array([inf if v.upBound is None else v.upBound for v in self.variables], dtype=np.float64)
        return lo, hi

    def run(self, prob: pulp.LpProblem, seconds: float) -> SolveResult:
        import highspy                              # optional dependency: only here, where HiGHS is known to exist

        h = self.h
        lo, hi = self._bounds()
        if not (np.array_equal(lo, self.built_bounds[0]) and np.array_equal(hi, self.built_bounds[1])):
            idx = np.arange(len(self.variables), dtype=np.int32)
            h.changeColsBounds(len(idx), idx, lo, hi)
            self.built_bounds = (lo, hi)
        # HiGHS keeps to its own limit within ~0.1 s, so it only needs a small margin; the guard below is spare.
        h.setOptionValue("time_limit", float(max(0.1, seconds - HIGHS_MARGIN)))
        start = [(k, v.varValue) for k, v in enumerate(self.variables) if v.varValue is not None]
        if start:
            h.setSolution(len(start), np.array([k for k, _ in start], dtype=np.int32),
                          np.array([x for _, x in start], dtype=np.float64))
        h.startSolve()
        done, _ = h.wait(seconds + GRACE / 2)
        if not done:
            h.cancelSolve()
            done, _ = h.wait(GRACE)
        if not done:
            # The solver thread ignored the interrupt; it is a daemon thread and is left behind, unused.
            return SolveResult("none", None, None, 0.0)

        ms = h.getModelStatus()
        info = h.getInfo()
        MS = highspy.HighsModelStatus
        if ms in (MS.kInfeasible, MS.kUnboundedOrInfeasible):
            return SolveResult("infeasible", None, None, 0.0)
        bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
        if info.primal_solution_status != int(highspy.SolutionStatus.kSolutionStatusFeasible):
            return SolveResult("none", None, bound, 0.0)
        col = h.getSolution().col_value
        for k, v in enumerate(self.variables):
            v.varValue = col[k]
        obj = pulp.value(prob.objective)
        return SolveResult("optimal" if ms == MS.kOptimal else "feasible", obj, bound, 0.0)
