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
import tempfile
import time
from typing import Optional

import pulp

# Seconds before the hard deadline at which the solver's own limit is set, and the grace a solver gets after it.
SOFT_MARGIN = 0.5
GRACE = 1.0


@dataclasses.dataclass
class SolveResult:
    status: str                 # "optimal" | "feasible" (stopped with a solution) | "none" (no solution) | "infeasible"
    objective: Optional[float]  # of the solution on the variables, when there is one
    bound: Optional[float]      # best lower bound the solver proved (minimisation), if it said
    seconds: float


def highs_available() -> bool:
    return pulp.HiGHS().available()


def solve(prob: pulp.LpProblem, solver: str, seconds: float, threads: int = 1) -> SolveResult:
    """Solve `prob` (a minimisation) with "cbc" or "highs", starting from the variables' initial values (those set
    with setInitialValue; all of them should be set), within `seconds` of wall-clock time."""
    t0 = time.monotonic()
    seconds = max(seconds, 0.1)
    if solver == "cbc":
        res = _CBC(seconds, threads).run(prob)
    elif solver == "highs":
        res = _HiGHS(seconds, threads).run(prob)
    else:
        raise ValueError(f"unknown solver {solver!r}")
    res.seconds = time.monotonic() - t0
    return res


class _CBC(pulp.PULP_CBC_CMD):
    """PuLP's bundled CBC, reusing its MPS writer and solution reader, but with a killable subprocess and the bound
    parsed from CBC's log."""

    def __init__(self, seconds: float, threads: int):
        super().__init__(msg=False, timeLimit=max(0.1, seconds - SOFT_MARGIN), warmStart=True)
        self.n_threads = threads
        self.hard_seconds = seconds

    def run(self, prob: pulp.LpProblem) -> SolveResult:
        with tempfile.TemporaryDirectory(prefix="tensat_cbc_") as tmp:
            mps, sol, mst, log = (os.path.join(tmp, f"m.{ext}") for ext in ("mps", "sol", "mst", "log"))
            vs, var_names, con_names, _ = prob.writeMPS(mps, rename=1)
            self.writesol(mst, prob, vs, var_names, con_names)
            args = [self.path, mps, "-mips", mst, "-sec", f"{self.timeLimit:.2f}", "-timeMode", "elapsed",
                    "-threads", str(self.n_threads), "-solve", "-printingOptions", "all", "-solution", sol]
            with open(log, "w") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                try:
                    proc.wait(timeout=self.hard_seconds + GRACE)
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
    import sys
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
    """PuLP's in-process HiGHS, plus what PuLP 3.3 leaves out: the warm start (setSolution) and an interruptible run
    (highspy's solver thread and cancelSolve)."""

    _banner_done = False

    def __init__(self, seconds: float, threads: int):
        super().__init__(msg=False, threads=threads, timeLimit=max(0.1, seconds - SOFT_MARGIN))
        self.hard_seconds = seconds

    def createAndConfigureSolver(self, lp):
        if _HiGHS._banner_done:
            return super().createAndConfigureSolver(lp)
        with _stdout_silenced():
            super().createAndConfigureSolver(lp)
        _HiGHS._banner_done = True

    def run(self, prob: pulp.LpProblem) -> SolveResult:
        import highspy
        import numpy as np

        self.createAndConfigureSolver(prob)
        self.buildSolverModel(prob)
        h: highspy.Highs = prob.solverModel
        variables = prob.variables()
        start = [(v.index, v.varValue) for v in variables if v.varValue is not None]
        if start:
            h.setSolution(len(start), np.array([i for i, _ in start], dtype=np.int32),
                          np.array([x for _, x in start], dtype=np.float64))
        h.HandleUserInterrupt = True
        h.startSolve()
        done, _ = h.wait(self.hard_seconds + GRACE / 2)
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
        for v in variables:
            v.varValue = col[v.index]
        obj = pulp.value(prob.objective)
        return SolveResult("optimal" if ms == MS.kOptimal else "feasible", obj, bound, 0.0)
