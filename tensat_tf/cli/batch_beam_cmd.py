"""`python -m tensat_tf.cli.batch_beam_cmd --input_glob=GLOB --output_root=ROOT [convert's flags] [Beam's flags]`: the batch
as an Apache Beam pipeline (tensat_tf/batch_beam.py). Its flags are those of `tensat_tf batch` and `convert` (absl,
also from --flagfile); everything else is handed to Beam's PipelineOptions (--runner, --project, ...).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Optional

from absl import flags

import tensat_tf.cli.main  # noqa: F401  (defines every flag of the tensat_tf command)
from tensat_tf import batch, batch_beam, errors
from tensat_tf.cli import convert_cmd


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    fl = flags.FLAGS
    try:
        rest = fl(argv, known_only=True)
        if not fl.input_glob or not fl.output_root:
            raise errors.BadInput("--input_glob and --output_root are required")
        beam = batch_beam.import_beam()
        options = convert_cmd.options_from_flags()      # checked once here, not in each worker
        from apache_beam.options.pipeline_options import PipelineOptions
        if not fl["verbosity"].present:
            logging.getLogger().setLevel(logging.WARNING)     # Beam's INFO chatter is not for users
        jobs = batch.discover(fl.input_glob, fl.output_root)
        os.makedirs(fl.output_root, exist_ok=True)
        t0 = time.monotonic()
        with beam.Pipeline(options=PipelineOptions(rest[1:])) as p:
            batch_beam.build(p, jobs, options, fl.output_root, fl.model_timeout or None, fl.model_memory_mb,
                             fl.worker_threads or None, verbosity=fl.verbosity if fl["verbosity"].present else None)
        with open(os.path.join(fl.output_root, batch_beam.RESULTS)) as f:
            by_name = {v["model"]: v for v in map(json.loads, f)}
        lines = [by_name[j.name] for j in jobs]
        print(batch.table(lines, time.monotonic() - t0), file=sys.stderr)
        batch.raise_if_failed(lines)
        return 0
    except errors.TensatError as e:
        print(f"tensat_tf: error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
