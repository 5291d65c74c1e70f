"""`tensat_tf profile SAVED_MODEL_DIR|zoo:NAME [--xla] [--batch_size=N] [--threads=1|default]`: latency of every
signature, as served.

Runs in a clean worker process (tensat_tf.latency) with one intra-op and one inter-op thread, or TF's default thread
pools with --threads=default (what TF Serving uses); on the GPU when TF sees one. Prints one line per signature (and
per XLA run) and exits 0.
"""
from __future__ import annotations

import os

from absl import flags

from tensat_tf import errors
from tensat_tf.cli import engine_flags  # noqa: F401  (defines --batch_size and --unknown_dim)

flags.DEFINE_bool("xla", False, "Also time each signature under XLA (tf.function(jit_compile=True)); the compile "
                                "time (first call) is reported apart.")
flags.DEFINE_string("threads", "1", "Intra-op (= inter-op) threads of the worker, or 'default' for TF's own pools.")
FLAGS = flags.FLAGS


def _threads() -> int:
    if FLAGS.threads == "default":
        return 0
    try:
        n = int(FLAGS.threads)
    except ValueError:
        n = -1
    if n < 1:
        raise errors.BadInput(f"--threads must be a positive number or 'default': {FLAGS.threads}")
    return n


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise errors.BadInput("profile takes exactly one SAVED_MODEL_DIR (or zoo:NAME)")
    src = args[0]
    if src.startswith("zoo:"):
        from tensat_tf import zoo
        try:
            src = zoo.resolve(src)
        except zoo.UnknownModel as e:
            raise errors.UnknownName(str(e)) from None
    elif not os.path.exists(src):
        raise errors.MissingPath(f"no such file or directory: {src}")
    threads = _threads()
    from tensat_tf import latency
    from tensat_tf.io import load as load_mod
    model = load_mod.load(src)                       # the same checks and signature rules as convert
    for name in sorted(model.signatures):
        try:
            r = latency.measure([src], name, FLAGS.batch_size, xla=FLAGS.xla, threads=threads,
                                unknown_dim=FLAGS.unknown_dim)
        except latency.ProfileError as e:
            raise errors.InternalError(str(e)) from None
        for mode in ("tf", "xla"):
            if mode in r:
                x = r[mode][0]
                extra = f", XLA compile {x['compile_s']:.3f} s" if x.get("compile_s") is not None else ""
                print(f"{name} [{mode}, {r['device']}, batch {r['batch_size']}, threads "
                      f"{latency.threads_label(threads)}]: {x['ms']:.4f} ms "
                      f"(p10 {x['p10']:.4f}, p90 {x['p90']:.4f}){extra}")
    return 0
