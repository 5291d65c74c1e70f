"""`tensat_tf extract EGRAPH.json`: extraction alone on an egraph-serialize file; prints one JSON line.

Failures are tensat_tf.errors classes, which the dispatcher (tensat_tf/cli/main.py) prints as one line with their exit
code: MissingPath (no such file), BadEGraph (unreadable, or not an egraph-serialize e-graph), NoAcyclicExtraction (no
acyclic choice avoids the blacklist), BadInput (a bad argument).
"""
from __future__ import annotations

import json

from tensat_tf import errors
from tensat_tf.options import WORK
from tensat_tf.cli.engine_flags import FLAGS   # --method, --ilp_seconds, --ilp_work, --solver: the engine's flags


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise errors.BadInput("extract takes exactly one EGRAPH.json")
    return run(args[0], FLAGS.method, FLAGS.ilp_seconds, FLAGS.solver, FLAGS.ilp_work)


def run(path: str, method: str = "ilp", ilp_seconds: float = 10.0, solver: str = "auto", work: int = WORK) -> int:
    """Print {"file", "enodes", "eclasses", "dag_cost", "greedy_dag_cost", "method", "status", "seconds", "acyclic",
    "gap", "bound", "solver", "work", "clocked", "parts"} as one JSON line (bound: the proven lower bound on any
    acyclic choice's DAG cost, null for greedy; work: the solvers' work spent; clocked: whether the wall clock cut the
    search short, so that another machine may choose otherwise; parts: how many parts the ILP solved one by one,
    tensat_tf/extract/decompose.py, 0 for the whole e-graph) and return 0; raise a tensat_tf.errors class on failure
    (see the module docstring)."""
    from tensat_tf.extract import NoExtraction, extract, serialized    # not at import: the CLI loads every command
    if work < 1:
        raise errors.BadInput("--ilp_work must be >= 1")
    try:
        egraph = serialized.load(path)
    except FileNotFoundError:
        raise errors.MissingPath(f"no such file: {path}") from None
    except (OSError, ValueError) as exc:
        raise errors.BadEGraph(f"cannot read e-graph {path!r}: {exc}") from None
    try:
        result = extract(egraph, method=method, ilp_seconds=ilp_seconds, solver=solver, work=work)
    except NoExtraction as exc:
        raise errors.NoAcyclicExtraction(f"{path}: {exc}") from None
    except ValueError as exc:
        raise errors.BadInput(str(exc)) from None
    print(json.dumps({
        "file": path,
        "enodes": egraph.num_nodes,
        "eclasses": egraph.num_classes,
        "dag_cost": result.dag_cost,
        "greedy_dag_cost": result.greedy_dag_cost,
        "method": result.method,
        "status": result.status,
        "seconds": round(result.seconds, 3),
        "acyclic": result.acyclic,
        "gap": result.gap,
        "bound": result.bound,
        "solver": result.solver,
        "work": result.work,
        "clocked": result.clocked,
        "parts": result.parts,
    }))
    return 0
