"""`tensat_tf batch --input_glob=GLOB --output_root=ROOT [--jobs=N]`: convert many models, one worker each.

Every flag of `convert` (engine, verification, --profile, --emit_onnx, --warmup, ...) applies to each model; give
them on the command line or in a --flagfile. See tensat_tf/batch.py for the process model, limits and resuming.
"""
from __future__ import annotations

import json
import os
import sys
import time

from absl import flags, logging

from tensat_tf import errors
from tensat_tf.cli import convert_cmd

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("input_glob", [], "SavedModel folders to convert: a glob (quote it; every matched folder "
                                            "is a model) or zoo:NAME; repeat the flag for more. A model's name is "
                                            "its path below the glob's fixed prefix ('/m/*/1' -> 'bert/1').")
flags.DEFINE_string("output_root", None, "Each model is written to OUTPUT_ROOT/<name>, its report to "
                                         "OUTPUT_ROOT/<name>.report.json.")
flags.DEFINE_integer("jobs", 1, "Models converted at once (one worker process each).")
flags.DEFINE_float("model_timeout", 3600.0, "Per-model wall-clock limit in seconds (0: none); the worker and its "
                                            "subprocesses are killed past it.")
flags.DEFINE_integer("model_memory_mb", 16384, "Per-model address-space limit (RLIMIT_AS) in MiB (0: none). "
                                               "Importing TensorFlow alone maps about 1.5 GiB.")
flags.DEFINE_integer("worker_threads", 0, "TF intra/inter-op threads per worker (0: cores / jobs).")


def main(args: list[str]) -> int:
    if args:
        raise errors.BadInput("batch takes no positional arguments (use --input_glob); got " + " ".join(args))
    if not FLAGS.input_glob:
        raise errors.BadInput("--input_glob is required")
    if not FLAGS.output_root:
        raise errors.BadInput("--output_root is required")
    if FLAGS.model_base_path or FLAGS.output_dir or FLAGS.report:
        raise errors.BadInput("batch writes OUTPUT_ROOT/<name> and its report; --model_base_path, --output_dir and "
                              "--report apply to convert only")
    if FLAGS.jobs < 1 or FLAGS.model_timeout < 0 or FLAGS.model_memory_mb < 0 or FLAGS.worker_threads < 0:
        raise errors.BadInput("--jobs must be >= 1; --model_timeout, --model_memory_mb, --worker_threads >= 0")
    options = convert_cmd.options_from_flags()      # checked once here, not in each worker
    from tensat_tf import batch
    from tensat_tf.progress import Progress
    jobs = batch.discover(FLAGS.input_glob, FLAGS.output_root)
    os.makedirs(FLAGS.output_root, exist_ok=True)
    t0 = time.monotonic()
    with Progress(FLAGS.progress, prefix="tensat_tf: ") as progress:
        lines = batch.run(jobs, options, n_jobs=FLAGS.jobs, timeout_s=FLAGS.model_timeout or None,
                          memory_mb=FLAGS.model_memory_mb, threads=FLAGS.worker_threads or None,
                          verbosity=logging.get_verbosity(),
                          on_result=lambda line: progress.print(json.dumps(line)), progress=progress)
    print(batch.table(lines, time.monotonic() - t0), file=sys.stderr)
    batch.raise_if_failed(lines)
    return 0
