"""The batch of `tensat_tf batch` as an Apache Beam pipeline (optional: apache-beam is not a dependency).

    pip install apache-beam      # see the README: it pins protobuf < 7, so pip downgrades protobuf 7.x to 6.33.x
    python -m tensat_tf.batch_beam --input_glob='/models/*' --output_root=/out --noprofile \\
        --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing

Flags: every flag of `tensat_tf batch` and `convert` (absl, also from --flagfile); everything else is handed to
Beam's PipelineOptions, so runner flags (--runner=DataflowRunner|FlinkRunner|SparkRunner, --project, ...) pass
through. The pipeline is Create(models) -> Reshuffle -> ParDo(convert one model) -> JSON lines written to
OUTPUT_ROOT/batch.jsonl. Each element is converted exactly as `tensat_tf batch` does it (tensat_tf.batch.run: a
spawned worker process with the time and memory limits, skipped when already finished), so a Beam worker never
imports TensorFlow or egglog itself and a retried bundle resumes instead of redoing finished models.

Only the DirectRunner was run here. On a distributed runner, --input_glob and --output_root must be paths every
worker sees (a shared filesystem): this module uses os/glob paths, not gs:// URLs, and the workers need tensat_tf
installed (e.g. --setup_file).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from typing import Optional, Sequence

from absl import flags

from tensat_tf import batch, errors

RESULTS = "batch.jsonl"


def _beam():
    try:
        import apache_beam
    except ImportError:
        raise errors.BadInput("apache-beam is not installed (pip install apache-beam; it is not a dependency of "
                              "tensat_tf, see the README)") from None
    return apache_beam


def build(pipeline, jobs: Sequence[batch.Job], flag_values: dict, output_root: str, timeout_s: Optional[float],
          memory_mb: int, threads: Optional[int]):
    """Add the batch to a Beam pipeline; -> the PCollection of result dicts."""
    beam = _beam()

    class ConvertModel(beam.DoFn):
        def process(self, job: dict):
            yield from batch.run([batch.Job(**job)], flag_values, n_jobs=1, timeout_s=timeout_s, memory_mb=memory_mb,
                                 threads=threads)

    results = (pipeline
               | "Models" >> beam.Create([dataclasses.asdict(j) for j in jobs])
               | "Spread" >> beam.Reshuffle()
               | "Convert" >> beam.ParDo(ConvertModel()))
    _ = (results
         | "Json" >> beam.Map(lambda line: json.dumps(line, sort_keys=True))
         | "Write" >> beam.io.WriteToText(os.path.join(output_root, RESULTS), shard_name_template=""))
    return results


def main(argv: Optional[list[str]] = None) -> int:
    import tensat_tf.cli.main  # noqa: F401  (defines every flag)
    from tensat_tf.cli import batch_cmd
    argv = list(sys.argv if argv is None else argv)
    fl = flags.FLAGS
    try:
        rest = fl(argv, known_only=True)
        if not fl.input_glob or not fl.output_root:
            raise errors.BadInput("--input_glob and --output_root are required")
        beam = _beam()
        from apache_beam.options.pipeline_options import PipelineOptions
        if not fl["verbosity"].present:
            logging.getLogger().setLevel(logging.WARNING)     # Beam's INFO chatter is not for users
        jobs = batch.discover(fl.input_glob, fl.output_root)
        os.makedirs(fl.output_root, exist_ok=True)
        t0 = time.monotonic()
        with beam.Pipeline(options=PipelineOptions(rest[1:])) as p:
            build(p, jobs, batch_cmd.worker_flags(), fl.output_root, fl.model_timeout or None, fl.model_memory_mb,
                  fl.worker_threads or None)
        with open(os.path.join(fl.output_root, RESULTS)) as f:
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
