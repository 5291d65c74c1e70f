"""One served call of each signature of a SavedModel, in a fresh process with TF's error log on: which of Grappler's
optimizers failed on it.

TF runs Grappler again when it instantiates a served function, and an optimizer that fails there only logs
"<optimizer> failed: ..." (meta_optimizer.cc, at ERROR) and leaves the function without its rewrites. TF 2.21's
remapper failed so on NASNet-Mobile's converted graph, and the function then ran every activation as its own kernel
(passes/remapper_guard.py). An optimizer can also leave a graph TFG cannot import ("<tfg passes> failed: ... empty op
name", tfg_optimizer_hook.cc): TF then runs the function without any of Grappler's rewrites. Offline Grappler
(tensat_tf/grappler.py, the tensat pass's own check) did not reproduce the first. The log is the only place such a
failure shows, and the converting process cannot read it: TF reads its log
level once, and the CLI turns the log off (cli/main.py). So a child process (`python -m tensat_tf.served_check`,
a JSON request on stdin) loads the SavedModel and calls each signature once on verification's inputs at its first
batch size (verify.verification_inputs; a graph whose op needs more rows than one, a graph network's
edge indices into its batch of nodes, is verified at the sizes the user gives and is served at them too), writing a
marker line to stderr before each call; the parent reads the
failures between the markers. TF logs such a failure once a minute per process (LOG_EVERY_N_SEC in
meta_optimizer.cc): a second failing function, or a second failing optimizer of one call, in the same minute goes
unlogged, so callers serve one graph per process (convert.py) and compare whether a call failed, not which
optimizers did.

The child only loads SavedModels that conversion wrote (public TF ops): the output, and the original graphs written
the same way where the output shows a failure.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Optional, Sequence

MARK = "tensat_tf.served_check: "
ERROR = MARK + "error: "
# meta_optimizer: an optimizer that failed; tfg_optimizer_hook: a function graph TFG cannot import, after which TF
# runs the function without any of Grappler's rewrites (passes/remapper_guard.py, the depthwise conv's bias)
FAILED = re.compile(r"(?:meta_optimizer|tfg_optimizer_hook)\.cc:\d+\] (\S+) failed: (.*)")
# what one check may take: loading the SavedModel and the first call of each signature (Grappler and oneDNN's
# primitives then); NASNet-Mobile's two signatures take about 6 s here
TIMEOUT_S = 600.0


class CheckError(RuntimeError):
    """The child process did not finish (it crashed, was killed or ran past its time)."""


def failures(path: str, signatures: dict, unknown_dim: int, seed: int = 0, highs: Optional[dict] = None,
             timeout: float = TIMEOUT_S, batch_size: int = 1) -> dict[str, list[dict]]:
    """{signature: [{"optimizer": name, "error": first 300 characters}, ...]} for each of `signatures` ({name:
    [load.TensorSpec, ...]}) served once from the SavedModel at `path`, unknown batches `batch_size` long; an empty
    list where none failed. CheckError where the check does not finish (a call that raises: its error line)."""
    request = {"path": path, "unknown_dim": unknown_dim, "seed": seed, "highs": highs or {}, "batch_size": batch_size,
               "signatures": {name: [{"key": s.key, "dtype": s.dtype.name, "shape": s.shape} for s in specs]
                              for name, specs in signatures.items()}}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")       # errors only: meta_optimizer logs the failure at ERROR
    try:
        r = subprocess.run([sys.executable, "-m", "tensat_tf.served_check"], input=json.dumps(request), env=env,
                           capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckError(f"the served check of {path} ran past {timeout:.0f} s") from None
    if r.returncode != 0:
        # the call's own error where the child caught one (TF's message ends in a node list that names no cause)
        said = [line[len(ERROR):] for line in r.stderr.splitlines() if line.startswith(ERROR)]
        tail = said or [line for line in r.stderr.splitlines() if line.strip()][-1:] or [f"exit status {r.returncode}"]
        raise CheckError(f"the served check of {path} failed: {tail[-1][:300]}")
    return parse(r.stderr, signatures)


def parse(stderr: str, names: Sequence[str]) -> dict[str, list[dict]]:
    """The optimizer failures logged after each signature's marker (module docstring)."""
    out: dict[str, list[dict]] = {name: [] for name in names}
    current = None
    for line in stderr.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip() or None
        elif current in out and (m := FAILED.search(line)):
            # TFG's name is its pass list ("tfg_optimizer{any(tfg-consolidate-attrs,...)}"): its kind is enough
            out[current].append({"optimizer": m.group(1).split("{")[0], "error": m.group(2).strip()[:300]})
    return out


def _child() -> None:
    request = json.load(sys.stdin)
    import tensorflow as tf

    from tensat_tf.io.load import TensorSpec
    from tensat_tf.verify import op_error_reason, verification_inputs
    model = tf.saved_model.load(request["path"])     # written by tf.saved_model.save: one MetaGraph, "serve"
    for name in sorted(request["signatures"]):
        specs = [TensorSpec(s["key"], "", tf.as_dtype(s["dtype"]), None if s["shape"] is None else tuple(s["shape"]))
                 for s in request["signatures"][name]]
        batch = request["batch_size"]
        ((_, feeds),) = verification_inputs(specs, [batch], request["seed"], request["unknown_dim"],
                                            highs=request["highs"].get(name))
        sys.stderr.flush()
        os.write(2, (MARK + name + "\n").encode())      # TF's C++ log writes to fd 2 unbuffered, as this does
        try:
            model.signatures[name](**feeds)
        except tf.errors.OpError as e:             # what failed, as verification names it, in one line
            os.write(2, f"{ERROR}signature {name} at batch {batch}: {op_error_reason(e, model.signatures[name])}\n"
                     .encode())
            sys.exit(1)
    os.write(2, (MARK + "\n").encode())


if __name__ == "__main__":
    _child()
