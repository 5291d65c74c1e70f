"""Benchmark extraction on egraph-serialize files (default: TENSAT's e-graphs in /work/shared/data/egraphs).

For every *.json file: greedy DAG extraction, then the ILP with each solver under the time limit, then one long
reference ILP run. The table compares each result with the best cost known (lowest cost any run found) and with the
best lower bound proven (highest bound any solver reported), so "within x % of what can be proven" is explicit.

    python tools/bench_extract.py                                   # the table in BENCHMARKS.md
    python tools/bench_extract.py --reference_seconds=0 --solvers=highs
    python tools/bench_extract.py --solvers= --reference_seconds=0 \
        --variants=order,order-nocycles,order-noscc,order-nocycles-noscc,lazy,lazy-nocycles   # formulation choice
    python tools/bench_extract.py --solvers=highs --reference_seconds=0 --variants=order-noprune  # without pruning
    python tools/bench_extract.py --solvers=highs --reference_seconds=0 --busy=2   # the same choice on a busy machine?

Each ILP run's status column gives the work it spent (tensat_tf/extract/solvers.py) and "clocked" when the wall clock,
not the work limit, cut it short. --busy=N runs the default solver's ILP again with N other processes spinning on
the CPU and says whether it chose the same e-nodes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import subprocess
import sys
import time
from typing import Optional

from absl import app, flags

from tensat_tf.extract import dag, extract, greedy, ilp, resolve_solver, serialized
from tensat_tf.options import WORK

flags.DEFINE_string("dir", "/work/shared/data/egraphs", "Folder of egraph-serialize *.json files.")
flags.DEFINE_float("seconds", 10.0, "ILP time limit (whole extract() call).")
flags.DEFINE_float("big_seconds", 10.0, "ILP time limit for files with at least --big_enodes e-nodes.")
flags.DEFINE_integer("big_enodes", 10_000, "Size from which --big_seconds applies.")
flags.DEFINE_list("solvers", ["cbc", "highs"], "Solvers to run through extract().")
flags.DEFINE_integer("work", WORK, "ILP work limit (extract()'s work).")
flags.DEFINE_integer("busy", 0, "Run the default solver's ILP again with this many processes spinning on the CPU and "
                     "compare the choices (0: no).")
flags.DEFINE_list("variants", [], "Extra ILP formulations to compare with HiGHS, as "
                  "ACYCLICITY[-nocycles][-noscc][-noprune]: order or lazy acyclicity, without the 2-/3-cycle rows, "
                  "without the SCC-by-SCC search, without reduced-cost fixing.")
flags.DEFINE_float("reference_seconds", 300.0, "Time of the long reference ILP run (solver auto, relative gap "
                   "--reference_gap) that sets the best known cost and bound; 0 skips it.")
flags.DEFINE_float("reference_gap", 1e-4, "Relative optimality gap at which the reference run stops.")
flags.DEFINE_string("out", os.path.join("/tmp", "bench_extract.md"), "Markdown file to write.")
FLAGS = flags.FLAGS


@dataclasses.dataclass
class Run:
    label: str
    cost: float
    status: str
    seconds: float
    gap: Optional[float]
    bound: Optional[float]
    work: int = 0
    clocked: bool = False


def _fmt(x: Optional[float], spec: str) -> str:
    return "–" if x is None else format(x, spec)


def bench_file(path: str) -> tuple[dict, list[Run]]:
    egraph = serialized.load(path)
    limit = FLAGS.big_seconds if egraph.num_nodes >= FLAGS.big_enodes else FLAGS.seconds
    runs: list[Run] = []
    g = extract(egraph, method="greedy")
    runs.append(Run("greedy", g.dag_cost, g.status, g.seconds, None, None))
    busy = None
    for solver in FLAGS.solvers:
        r = extract(egraph, method="ilp", ilp_seconds=limit, solver=solver, work=FLAGS.work)
        assert r.acyclic and dag.is_valid(egraph, r.choice), f"{path}: invalid {solver} result"
        runs.append(Run(f"ilp-{solver}", r.dag_cost, r.status, r.seconds, r.gap, r.bound, r.work, r.clocked))
        if FLAGS.busy and solver == resolve_solver("auto"):
            with _spinning(FLAGS.busy):
                b = extract(egraph, method="ilp", ilp_seconds=limit, solver=solver, work=FLAGS.work)
            busy = (f"{'same' if b.choice == r.choice else 'DIFFERENT'} ({b.seconds:.1f} s"
                    + (", clocked" if b.clocked else "") + ")")
    for variant in FLAGS.variants:
        runs.append(_variant(egraph, variant, limit))
    if FLAGS.reference_seconds > 0:
        r = extract(egraph, method="ilp", ilp_seconds=FLAGS.reference_seconds, solver="auto",
                    rel_gap=FLAGS.reference_gap)
        assert r.acyclic and dag.is_valid(egraph, r.choice), f"{path}: invalid reference result"
        runs.append(Run("reference", r.dag_cost, r.status, r.seconds, r.gap, r.bound, r.work, r.clocked))
    info = {"file": os.path.basename(path), "enodes": egraph.num_nodes, "eclasses": egraph.num_classes,
            "limit": limit, "busy": busy}
    return info, runs


@contextlib.contextmanager
def _spinning(n: int):
    """n other processes spinning on the CPU for the duration: a slower, busier machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _variant(egraph, variant: str, limit: float) -> Run:
    acyclicity, *options = variant.split("-")
    t0 = time.monotonic()
    start = greedy.greedy_choice(egraph)
    res = ilp.solve_ilp(egraph, start, limit - (time.monotonic() - t0), "highs", acyclicity=acyclicity,
                        short_cycles="nocycles" not in options, scc_search="noscc" not in options,
                        prune="noprune" not in options)
    return Run(f"highs:{variant}", dag.dag_cost(egraph, res.choice), res.status, time.monotonic() - t0, res.gap,
               res.bound, res.work, res.clocked)


def table(results: list[tuple[dict, list[Run]]]) -> str:
    labels = [r.label for r in results[0][1]] if results else []
    head = ["file", "e-nodes", "e-classes", "limit s", "greedy DAG cost"]
    busy = any(info.get("busy") for info, _ in results)
    for lab in labels[1:]:
        head += [f"{lab} cost", "bound", "status", "s", "gap"]
    head += ["best known", "best bound", "ILP (auto) vs best known", "ILP (auto) vs best bound"]
    head += ["busy machine"] if busy else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for info, runs in results:
        best = min(r.cost for r in runs)
        bounds = [r.bound for r in runs if r.bound is not None]
        bound = max(bounds) if bounds else None
        auto = next((r for r in runs if r.label == f"ilp-{resolve_solver('auto')}"), None)
        row = [info["file"], f"{info['enodes']:,}", f"{info['eclasses']:,}", f"{info['limit']:g}",
               f"{runs[0].cost:.6f}"]
        for r in runs[1:]:
            row += [f"{r.cost:.6f}", _fmt(r.bound, ".6f"),
                    f"{r.status} ({r.work} work{', clocked' if r.clocked else ''})", f"{r.seconds:.1f}",
                    _fmt(None if r.gap is None else 100 * r.gap, ".2f")
                    + ("" if r.gap is None else " %")]
        row += [f"{best:.6f}", _fmt(bound, ".6f"),
                "–" if auto is None or not best else f"+{100 * (auto.cost - best) / best:.2f} %",
                "–" if auto is None or bound is None or not auto.cost else f"+{100 * (auto.cost - bound) / auto.cost:.2f} %"]
        row += [info.get("busy") or "–"] if busy else []
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    files = sorted(glob.glob(os.path.join(FLAGS.dir, "*.json")))
    if not files:
        print(f"no *.json files in {FLAGS.dir}", file=sys.stderr)
        return 2
    results = []
    for path in files:
        info, runs = bench_file(path)
        results.append((info, runs))
        print(f"{info['file']}: " + ", ".join(f"{r.label} {r.cost:.6f} (bound {_fmt(r.bound, '.6f')}, {r.status}, "
                                               f"{r.seconds:.1f} s)" for r in runs), flush=True)
    text = table(results)
    print(text)
    with open(FLAGS.out, "w", encoding="utf-8") as f:
        f.write(f"Command: `python tools/bench_extract.py {' '.join(sys.argv[1:])}`\n\n{text}\n")
    print(f"written to {FLAGS.out}")
    return 0


if __name__ == "__main__":
    app.run(main)
