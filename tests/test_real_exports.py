"""The real-exports suite (issue 10): Keras 3 exports of keras.applications and Keras-layer transformers.

Every suite model builds (seeded, nothing downloaded), keeps a dynamic batch (and sequence) dim in its signature,
converts with the default engine and profiling off, and verifies. The conversions are slow except the fastest few.
"""
import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf import zoo
from tensat_tf.convert import convert
from tensat_tf.options import Options
from tensat_tf.zoo import keras_apps, transformers

TEXT = {"real_encoder", "real_decoder"}            # token ids [batch, seq]: both dims dynamic
FAST = ["real_mobilenet", "real_vit"]              # the quickest to build and convert (unmarked)
SLOW = [n for n in zoo.SUITE_NAMES if n not in FAST]


# --- registry -----------------------------------------------------------------------------------------------------

def test_suite_registered_apart_from_the_hand_written_zoo():
    assert len(keras_apps.APPS) >= 12 and len(transformers.MODELS) >= 3
    assert set(zoo.SUITE_NAMES) == set(keras_apps.APPS) | set(transformers.MODELS)
    assert not set(zoo.SUITE_NAMES) & set(zoo.NAMES)     # tests/test_zoo.py builds every NAMES entry
    for name in zoo.SUITE_NAMES:
        assert zoo.describe(name) and "\n" not in zoo.describe(name)
    with pytest.raises(zoo.UnknownModel, match="real_vit"):
        zoo.describe("real_nope")
    # distinct seeds: no two suite models share their weights' random stream
    seeds = [s for _, _, s, _ in keras_apps.APPS.values()] + list(transformers.SEEDS.values())
    assert len(seeds) == len(set(seeds))


def test_importing_the_zoo_does_not_import_keras():
    import subprocess
    import sys
    code = "import sys, tensat_tf.zoo; print('keras' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --- seeded weights -----------------------------------------------------------------------------------------------

def _weights(model):
    return [v.numpy().copy() for v in model.weights]


def test_transformer_weights_are_seeded_and_not_default():
    import keras
    from tensat_tf.zoo import _keras
    drawn = []
    for _ in range(2):
        model = transformers.decoder()
        _keras.randomize_weights(model, 7)
        transformers._fix_einsum_fan_in(model, 8)
        drawn.append(_weights(model))
    for a, b in zip(*drawn):
        np.testing.assert_array_equal(a, b)
    for v, value in zip(model.weights, drawn[0]):
        # no weight left at Keras' default zeros / ones
        assert not np.all(value == 0) and not np.all(value == 1), v.path
    model = transformers.decoder()
    _keras.randomize_weights(model, 9)
    assert any(not np.array_equal(a, b) for a, b in zip(drawn[0], _weights(model)))
    assert isinstance(model.get_layer("layer0_ffn_gate"), keras.layers.EinsumDense)


def test_new_weight_roles_are_redrawn():
    """SeparableConv2D, Normalization, RMSNormalization, Embedding: the roles the suite adds to zoo/_keras.py."""
    import keras
    from tensat_tf.zoo import _keras
    L = keras.layers
    x = inp = keras.Input((8, 8, 3))
    x = L.Normalization(name="norm")(x)
    x = L.SeparableConv2D(4, 3, name="sep")(x)
    x = L.RMSNormalization(name="rms")(x)
    model = keras.Model(inp, x)
    _keras.randomize_weights(model, 3)
    norm = model.get_layer("norm")
    assert not np.allclose(norm.mean.numpy(), 0) and np.all(norm.variance.numpy() > 0)
    assert not np.allclose(model.get_layer("rms").scale.numpy(), 1)
    sep = model.get_layer("sep")
    # depthwise fan-in is h*w = 9 (not h*w*in = 27): std about sqrt(2/9)
    assert 0.3 < float(np.std(sep.depthwise_kernel.numpy())) < 0.65


# --- the measurement tool's shape-plumbing count ------------------------------------------------------------------

def _plumbing():
    """tools/plumbing.py (tools/ is not a package; bench_rules.py itself defines absl flags that clash with the CLI's
    once both are imported in one test process)."""
    path = os.path.join(os.path.dirname(__file__), "..", "tools", "plumbing.py")
    spec = importlib.util.spec_from_file_location("plumbing_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plumbing_counts_shape_arithmetic_and_computed_reshapes():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32)])
    def f(x):
        s = tf.shape(x)                                   # Shape
        flat = tf.reshape(x, tf.stack([s[0] * s[1], 4]))  # 2 StridedSlice, Mul, Pack -> Reshape (computed target)
        return tf.reshape(flat, [-1, 2, 2]) + 1.0         # Reshape by a constant: not plumbing
    graph_def = f.get_concrete_function().graph.as_graph_def()
    ops = [n.op for n in graph_def.node]
    assert ops.count("Reshape") == 2
    # Shape, 2 StridedSlice, Mul, Pack, and the Reshape whose target they compute
    assert _plumbing().plumbing(graph_def) == 6


# --- build, convert, verify ---------------------------------------------------------------------------------------

def check_suite_model(name, tmp_path):
    src = zoo.resolve(f"zoo:{name}")
    report = convert(f"zoo:{name}", str(tmp_path / "out"), Options(signatures=["serving_default"], profile=False))
    sig = report["signatures"]["serving_default"]
    # a real export: dynamic batch, and dynamic sequence for the text models
    (spec,) = sig["inputs"].values()
    assert spec["shape"][0] == -1
    if name in TEXT:
        assert spec["dtype"] == "int32" and list(spec["shape"]) == [-1, -1]
    assert set(tf.saved_model.load(src).signatures) == {"serve", "serving_default"}
    tensat = [p for p in sig["passes"] if p["name"] == "tensat"][0]
    assert tensat["ok"], tensat["error"]
    assert sig["egraph"]["enodes"] > 0
    assert sig["extraction"]["cost_after"] <= sig["extraction"]["cost_before"]
    # no rewrite that TF's remapper fails on (both MobileNetV3s did, until cost/fusion.py's hazard)
    assert "Grappler fails" not in (sig["extraction"].get("kept_input") or "")
    v = sig["verification"]
    assert v["passed"]
    assert v["max_rel_diff"] <= 10 * max(1e-5, v["noise_floor"])
    return report


def check_depends_on_input(name):
    """Seeded weights must not leave a dead model: two random inputs give different outputs."""
    fn = tf.saved_model.load(zoo.resolve(f"zoo:{name}")).signatures["serving_default"]
    (key, spec), = fn.structured_input_signature[1].items()
    r = np.random.RandomState(0)
    shape = [2] + [8 if d is None else d for d in spec.shape.as_list()[1:]]
    x = r.randint(0, transformers.SUITE.vocab, shape) if spec.dtype.is_integer else r.standard_normal(shape)
    (out,) = fn(**{key: tf.constant(x, spec.dtype)}).values()
    out = out.numpy()
    assert np.all(np.isfinite(out))
    assert not np.allclose(out[0], out[1], rtol=1e-3, atol=1e-6), f"{name} ignores its input"


@pytest.mark.parametrize("name", FAST)
def test_fast_suite_model_converts(name, zoo_cache, tmp_path):
    check_suite_model(name, tmp_path)
    check_depends_on_input(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_suite_model_converts(name, zoo_cache, tmp_path):
    check_suite_model(name, tmp_path)
    check_depends_on_input(name)


# --- transformers outside the suite (tools/sweep_apps.py --transformers) ------------------------------------------

def test_gpt_outside_the_suite_builds_at_any_size_and_converts(tmp_path):
    src = str(tmp_path / "gpt")
    transformers.build("gpt", src, transformers.Size(vocab=96, d=32, heads=4, ffn=64, layers=1))
    assert "gpt" not in zoo.SUITE_NAMES and "gpt" not in transformers.MODELS
    fn = tf.saved_model.load(src).signatures["serving_default"]
    (key, spec), = fn.structured_input_signature[1].items()
    assert spec.shape.as_list() == [None, None]
    ids = np.random.RandomState(0).randint(0, 96, (2, 5))
    (out,) = fn(**{key: tf.constant(ids, tf.int32)}).values()
    assert out.shape == (2, 5, 96)                          # logits over the vocabulary: the tied head
    # causal: a change in the last token leaves every earlier position's logits as they were
    ids2 = ids.copy()
    ids2[:, -1] = (ids2[:, -1] + 1) % 96
    (out2,) = fn(**{key: tf.constant(ids2, tf.int32)}).values()
    np.testing.assert_allclose(out.numpy()[:, :-1], out2.numpy()[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out.numpy()[:, -1], out2.numpy()[:, -1])
    report = convert(src, str(tmp_path / "out"), Options(signatures=["serving_default"], profile=False))
    assert report["signatures"]["serving_default"]["verification"]["passed"]


def test_seq2seq_outside_the_suite_converts_with_its_cross_attention_optimized(tmp_path):
    """Two token inputs of their own lengths: the decoder's cross-attention reads the encoder's output, so its query
    and key carry two graph inputs' batch symbols. The tensat pass used to fail on that graph's shape analysis and
    keep its input (tests/test_broadcast_einsum.py has the unit case); now it runs and the rules apply."""
    src = str(tmp_path / "s2s")
    transformers.build("seq2seq", src, transformers.Size(vocab=96, d=32, heads=4, ffn=64, layers=1))
    assert "seq2seq" not in zoo.SUITE_NAMES and "seq2seq" not in transformers.MODELS
    fn = tf.saved_model.load(src).signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    assert sorted(specs) == ["source_ids", "target_ids"]
    assert all(v.shape.as_list() == [None, None] for v in specs.values())
    rng = np.random.RandomState(0)
    source, target = rng.randint(0, 96, (2, 7)), rng.randint(0, 96, (2, 5))

    def run(s, t):
        (out,) = fn(source_ids=tf.constant(s, tf.int32), target_ids=tf.constant(t, tf.int32)).values()
        return out.numpy()
    out = run(source, target)
    assert out.shape == (2, 5, 96)
    changed = target.copy()
    changed[:, -1] = (changed[:, -1] + 1) % 96
    np.testing.assert_allclose(run(source, changed)[:, :-1], out[:, :-1], rtol=1e-5, atol=1e-6)   # causal
    other = source.copy()
    other[:, 0] = (other[:, 0] + 1) % 96
    assert not np.allclose(run(other, target)[:, 0], out[:, 0])              # every position reads the source
    report = convert(src, str(tmp_path / "out"), Options(signatures=["serving_default"], profile=False))
    sig = report["signatures"]["serving_default"]
    assert sig["verification"]["passed"]
    assert all(p["ok"] for p in sig["passes"]), [p["error"] for p in sig["passes"] if not p["ok"]]
    assert sig["egraph"]["typed_nodes"] > 100 and sig["rules_applied"].get("E11-einsum-heads-as-dense")


def test_sweep_refuses_a_malformed_transformer_size():
    import subprocess
    import sys
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "sweep_apps.py")
    proc = subprocess.run([sys.executable, tool, "--transformers=gpt:64x4"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "DxHEADSxFFNxLAYERS" in proc.stderr



def test_sweep_converts_a_saved_model_it_did_not_build(tmp_path):
    """--saved_models: a user's own export is converted and measured like a built one, and left as it was."""
    import hashlib
    import subprocess
    import sys
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "sweep_apps.py")
    proc = subprocess.run([sys.executable, tool, f"--saved_models={tmp_path}"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "not a SavedModel folder" in proc.stderr
    w = tf.constant(np.random.RandomState(0).standard_normal((16, 8)).astype(np.float32))
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": tf.nn.relu(tf.matmul(x, w) + 0.5)},
                           input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    src = str(tmp_path / "mine")
    tf.saved_model.save(module, src, signatures={"serving_default": module.f})
    before = hashlib.sha256(open(os.path.join(src, "saved_model.pb"), "rb").read()).hexdigest()
    proc = subprocess.run([sys.executable, tool, f"--saved_models={src}"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| mine |" in proc.stdout and "1 of 1 converted and verified" in proc.stdout
    assert hashlib.sha256(open(os.path.join(src, "saved_model.pb"), "rb").read()).hexdigest() == before


# --- peer runtimes (tools/bench.py) -------------------------------------------------------------------------------

def test_time_blocks_pairs_every_subject_in_every_block():
    from tensat_tf import peers
    calls = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    medians, runs = peers.time_blocks(fns, blocks=4, runs=3, warmup=1)
    assert runs == 3 and [len(m) for m in medians] == [4, 4]
    timed = calls[2 * (1 + 3):]                   # after warm-up and the 3 probe calls of each subject
    # the order rotates: a first in block 0, b first in block 1, ...
    assert timed[:6] == ["a"] * 3 + ["b"] * 3 and timed[6:12] == ["b"] * 3 + ["a"] * 3


@pytest.mark.slow
def test_openvino_runs_the_original_in_f32(zoo_cache):
    pytest.importorskip("openvino")
    from tensat_tf import peers
    src = zoo.resolve("zoo:real_vit")
    x = np.random.RandomState(0).standard_normal((2, 32, 32, 3)).astype(np.float32)
    ref = tf.saved_model.load(src).signatures["serving_default"](image=tf.constant(x))["output_0"].numpy()
    (got,) = peers._openvino_call(peers.compile_openvino(src), {"image": x})().values()
    # bf16 (OpenVINO's default on CPUs with bf16 units) differs by ~1e-1 here
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_bench_pools_rounds_of_workers_block_by_block():
    """tools/bench.py --rounds (peers.pooled): each subject's blocks from every round, in round order (still paired
    across subjects), its ms their median; a subject that failed in one round keeps the error."""
    from tensat_tf import peers
    one = {"runs": 5, "blocks": 2, "subjects": [{"runtime": "tf", "block_ms": [1.0, 2.0], "ms": 1.5},
                                                 {"runtime": "tf", "block_ms": [3.0, 4.0], "ms": 3.5}]}
    two = {"runs": 7, "blocks": 3, "subjects": [{"runtime": "tf", "block_ms": [5.0, 6.0, 7.0], "ms": 6.0},
                                                 {"runtime": "tf", "error": "no"}]}
    m = peers.pooled([one, two])
    assert m["blocks"] == 5 and m["runs"] == 5
    assert m["subjects"][0]["block_ms"] == [1.0, 2.0, 5.0, 6.0, 7.0] and m["subjects"][0]["ms"] == 5.0
    assert m["subjects"][1] == {"runtime": "tf", "error": "no"}
    assert peers.pooled([one]) == one and one["subjects"][0]["block_ms"] == [1.0, 2.0]
