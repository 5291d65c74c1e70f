"""The batch of `tensat_tf batch` as an Apache Beam pipeline (optional: apache-beam is not a dependency).

    pip install apache-beam      # see the README: it pins protobuf < 7, so pip downgrades protobuf 7.x to 6.33.x
    python -m tensat_tf.batch_beam --input_glob='/models/*' --output_root=/out --noprofile \\
        --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing

Flags (tensat_tf/cli/batch_beam_cmd.py): every flag of `tensat_tf batch` and `convert` (absl, also from --flagfile),
turned into one checked Options before the pipeline starts; everything else is handed to Beam's PipelineOptions, so
runner flags (--runner=DataflowRunner|FlinkRunner|SparkRunner, --project, ...) pass through. The pipeline is
Create(models) -> Reshuffle -> ParDo(convert one model) -> JSON lines written to OUTPUT_ROOT/batch.jsonl. Each
element is converted exactly as `tensat_tf batch` does it (tensat_tf.batch.run: a spawned worker process with the
time and memory limits, skipped when already finished), so a Beam worker never imports TensorFlow or egglog itself
and a retried bundle resumes instead of redoing finished models.

Only the DirectRunner was run here. On a distributed runner, --input_glob and --output_root must be paths every
worker sees (a shared filesystem): this module uses os/glob paths, not gs:// URLs, and the workers need tensat_tf
installed (e.g. --setup_file).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

from tensat_tf import batch, errors
from tensat_tf.options import Options

RESULTS = "batch.jsonl"


def import_beam():
    try:
        import apache_beam
    except ImportError:
        raise errors.BadInput("apache-beam is not installed (pip install apache-beam; it is not a dependency of "
                              "tensat_tf, see the README)") from None
    return apache_beam


def build(pipeline, jobs: Sequence[batch.Job], options: Options, output_root: str, timeout_s: Optional[float],
          memory_mb: int, threads: Optional[int], verbosity: Optional[int] = None):
    """Add the batch to a Beam pipeline (options: checked by the caller, as for batch.run); -> the PCollection of
    result dicts."""
    beam = import_beam()
    data = options.to_json()                # what the DoFn carries to Beam's workers: plain data

    class ConvertModel(beam.DoFn):
        def process(self, job: dict):
            yield from batch.run([batch.Job(**job)], Options.from_json(data), n_jobs=1, timeout_s=timeout_s,
                                 memory_mb=memory_mb, threads=threads, verbosity=verbosity)

    results = (pipeline
               | "Models" >> beam.Create([dataclasses.asdict(j) for j in jobs])
               | "Spread" >> beam.Reshuffle()
               | "Convert" >> beam.ParDo(ConvertModel()))
    _ = (results
         | "Json" >> beam.Map(lambda line: json.dumps(line, sort_keys=True))
         | "Write" >> beam.io.WriteToText(os.path.join(output_root, RESULTS), shard_name_template=""))
    return results
