"""`tensat_tf extract EGRAPH.json`: extract from an egraph-serialize file and print one JSON line.

The absl dispatcher (tensat_tf/cli/main.py) calls run(); `python -m tensat_tf.cli.extract FILE [method] [seconds]
[solver]` does the same without it.
"""
from __future__ import annotations

import json
import sys

from tensat_tf.extract import NoExtraction, extract, serialized

EXIT_OK, EXIT_NO_EXTRACTION, EXIT_BAD_INPUT = 0, 1, 2


def run(path: str, method: str = "ilp", ilp_seconds: float = 10.0, solver: str = "auto") -> int:
    """Print {"file", "enodes", "eclasses", "dag_cost", "greedy_dag_cost", "method", "status", "seconds", "acyclic",
    "gap", "bound", "solver"} as one JSON line (bound: the proven lower bound on any acyclic choice's DAG cost, null
    for greedy); return the exit code (2: unreadable file or bad argument, 1: the e-graph has no acyclic extraction)."""
    try:
        egraph = serialized.load(path)
    except (OSError, ValueError) as exc:
        print(f"tensat_tf extract: cannot read e-graph {path!r}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = extract(egraph, method=method, ilp_seconds=ilp_seconds, solver=solver)
    except NoExtraction as exc:
        print(f"tensat_tf extract: {path}: {exc}", file=sys.stderr)
        return EXIT_NO_EXTRACTION
    except ValueError as exc:
        print(f"tensat_tf extract: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
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
    }))
    return EXIT_OK


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 5:
        print("usage: python -m tensat_tf.cli.extract EGRAPH.json [ilp|greedy] [ilp_seconds] [auto|cbc|highs]",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    method = argv[2] if len(argv) > 2 else "ilp"
    try:
        seconds = float(argv[3]) if len(argv) > 3 else 10.0
    except ValueError:
        print(f"tensat_tf extract: ilp_seconds must be a number, not {argv[3]!r}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run(argv[1], method, seconds, argv[4] if len(argv) > 4 else "auto")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
