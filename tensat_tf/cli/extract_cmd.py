"""`tensat_tf extract EGRAPH.json`: extraction alone on an egraph-serialize file; prints one JSON line."""
from __future__ import annotations

from absl import flags

from tensat_tf import errors

flags.DEFINE_enum("method", "ilp", ["greedy", "ilp"], "Extraction method.")
flags.DEFINE_float("ilp_seconds", 10.0, "Hard wall-clock limit of the ILP solver.")
flags.DEFINE_enum("solver", "auto", ["auto", "cbc", "highs"], "ILP solver.")
FLAGS = flags.FLAGS


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise errors.BadInput("extract takes exactly one EGRAPH.json")
    from tensat_tf.cli import extract
    return extract.run(args[0], FLAGS.method, FLAGS.ilp_seconds, FLAGS.solver)
