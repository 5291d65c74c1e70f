"""`tensat_tf extract EGRAPH.json`: extraction alone on an egraph-serialize file; prints one JSON line."""
from __future__ import annotations

from tensat_tf import errors
from tensat_tf.cli.engine_flags import FLAGS   # --method, --ilp_seconds, --solver are the engine's flags


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise errors.BadInput("extract takes exactly one EGRAPH.json")
    from tensat_tf.cli import extract
    return extract.run(args[0], FLAGS.method, FLAGS.ilp_seconds, FLAGS.solver)
