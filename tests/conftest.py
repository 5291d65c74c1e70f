import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# One TF runtime for every test machine: TF turns oneDNN's ops on by default only on some CPUs, and both what the
# runtime fuses and the cost profile the pass picks by default follow it (tensat_tf/cost/fusion.py "Without
# oneDNN"). Tests of the other runtime's profile name it (device="cpu-eigen").
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory):
    """One zoo cache per test session: each model is built once, whatever the tests that use it."""
    path = str(tmp_path_factory.mktemp("zoo_cache"))
    old = os.environ.get("TENSAT_TF_ZOO_CACHE")
    os.environ["TENSAT_TF_ZOO_CACHE"] = path
    yield path
    if old is None:
        os.environ.pop("TENSAT_TF_ZOO_CACHE", None)
    else:
        os.environ["TENSAT_TF_ZOO_CACHE"] = old


def tree_digest(path: str) -> dict:
    """name -> (size, mtime_ns, sha256) of every file under path: proves an input was not touched."""
    import hashlib
    out = {}
    for root, _, files in os.walk(path):
        for f in sorted(files):
            p = os.path.join(root, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(fh.read()).hexdigest())
    return out


def exported_graph(model, path: str):
    """Keras `model` exported to `path` (model.export), then cleaned_graph."""
    model.export(path, verbose=False)
    return cleaned_graph(path)


def cleaned_graph(path: str):
    """The SavedModel at `path` loaded and frozen, then cleaned as convert does before the e-graph (Grappler's
    clean-up, the shape plumbing folds): -> (graph_def, GrapplerItem) of serving_default."""
    from tensat_tf.io import load
    from tensat_tf.passes import canonicalize, shapes
    sig = load.load(path).signatures["serving_default"]
    return shapes.optimize(canonicalize.optimize(sig.graph_def, sig.item), sig.item), sig.item


def run_graph(gd, item, feeds):
    """Run a GraphDef's fetches (item.fetches) on feeds given in item.feeds order, in a TF1 session."""
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(list(item.fetches), dict(zip(item.feeds, feeds)))


def conv_scale_bias_relu(channels: int):
    """Conv2D + per-channel Mul + per-channel AddV2 + Relu (a Keras BatchNormalization in inference form) on an
    [N, 8, 8, 3] input, seeded: -> (graph_def, GrapplerItem)."""
    import numpy as np
    import tensorflow as tf
    from tensat_tf.item import GrapplerItem
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        y = tf.nn.conv2d(x, tf.constant(rng.normal(size=(3, 3, 3, channels)).astype(np.float32)), 1, "SAME")
        y = y * tf.constant(rng.uniform(0.5, 1.5, channels).astype(np.float32))
        y = y + tf.constant(rng.normal(size=channels).astype(np.float32))
        tf.identity(tf.nn.relu(y), name="out")
    return g.as_graph_def(), GrapplerItem(feeds=["x:0"], fetches=["out:0"])


def save_dense_gelu(path: str, k: int, n: int, out: int = 0) -> str:
    """A SavedModel: x [batch, k] -> Dense(n) with TF's exact GELU (Erfc, not in ONNX; a rank-2 input, no reshape for
    rules F19 / F24 to move) -> Dense(out) when out; seeded weights."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable((0.5 * rng.standard_normal((k, n))).astype(np.float32))
            self.b = tf.Variable(np.linspace(-2, 2, n).astype(np.float32))
            self.w2 = tf.Variable((0.5 * rng.standard_normal((n, out))).astype(np.float32)) if out else None

        @tf.function(input_signature=[tf.TensorSpec([None, k], tf.float32, name="x")])
        def serve(self, x):
            h = tf.nn.gelu(tf.matmul(x, self.w) + self.b, approximate=False)
            return {"y": tf.matmul(h, self.w2) if out else h}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path
