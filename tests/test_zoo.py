"""Tests of the built-in model zoo (tensat_tf.zoo): API, signatures, random weights, determinism, graph shapes."""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep oneDNN/CUDA banners out of the test log

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants as c2c

from tensat_tf import zoo

FAST = [n for n in zoo.NAMES if n not in zoo.SLOW_NAMES]
KERAS_SIGNATURES = {"serve", "serving_default"}
SIGNATURES = {
    "mlp": {"serving_default", "logits"},
    "keras_cnn": KERAS_SIGNATURES,
    "keras_resnext": KERAS_SIGNATURES,
    "lstm": KERAS_SIGNATURES,
    "conv1d_kws": KERAS_SIGNATURES,
    "mobilenet_v2": KERAS_SIGNATURES,
    "resnet50": KERAS_SIGNATURES,
    "inception_v3": KERAS_SIGNATURES,
    "vgg19": KERAS_SIGNATURES,
}
# Real Keras applications with BatchNorm (unfused: Rsqrt per BN); the other slow models have tests of their own.
BN_APPLICATIONS = ["inception_v3", "mobilenet_v2", "resnet50"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each fast model built once for the module: name -> loaded SavedModel."""
    root = tmp_path_factory.mktemp("zoo")
    loaded = {}
    for name in FAST:
        zoo.build(name, str(root / name))
        loaded[name] = tf.saved_model.load(str(root / name))
    return loaded


def random_feeds(fn, batch=3, seed=0):
    r = np.random.RandomState(seed)
    specs = fn.structured_input_signature[1]
    # a dynamic sequence (conv1d_kws's frames) gets 12 steps
    return {k: tf.constant(r.standard_normal([batch] + [12 if d is None else d for d in s.shape[1:].as_list()])
                           .astype(np.float32)) for k, s in specs.items()}


def run_all(loaded):
    """signature -> {output key -> array}, on the same seeded input for every call."""
    return {k: {o: v.numpy() for o, v in f(**random_feeds(f)).items()} for k, f in loaded.signatures.items()}


def frozen(fn):
    return c2c.convert_variables_to_constants_v2_as_graph(fn, lower_control_flow=False)[1]


def op_counts(graph_def):
    """Ops of the main graph and of every library function (While bodies live there)."""
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return collections.Counter(n.op for n in nodes)


def consumers_by_input(graph_def, op):
    """input tensor name -> how many `op` nodes read it (first data input only)."""
    return collections.Counter(n.input[0] for n in graph_def.node if n.op == op)


def check_batch_of_one(loaded, name):
    for key, fn in loaded.signatures.items():
        for out_key, value in fn(**random_feeds(fn, batch=1)).items():
            assert value.shape[0] == 1 and np.isfinite(value.numpy()).all(), f"{name}/{key}/{out_key}"


def check_runs(loaded, name):
    assert set(loaded.signatures) == SIGNATURES.get(name, {"serving_default"})
    for key, fn in loaded.signatures.items():
        for spec in fn.structured_input_signature[1].values():
            assert spec.shape[0] is None, f"{name}/{key}: batch dimension must stay None"
        for out_key, value in run_all(loaded)[key].items():
            assert np.isfinite(value).all(), f"{name}/{key}/{out_key}"
            # Rows come from different random inputs; identical rows would mean a dead (input-independent) model.
            assert not np.allclose(value[0], value[1]), f"{name}/{key}/{out_key} ignores its input"


# --- registry API ---------------------------------------------------------------------------------------------

def test_names_and_descriptions():
    assert zoo.NAMES == sorted(zoo.NAMES)
    assert {"mlp", "keras_cnn", "bert_tiny", "inception_block", "nasrnn", "lstm", "mobilenet_v2"} <= set(zoo.NAMES)
    tensat_benchmarks = {"bert_taso", "nasrnn_taso", "resnext50", "nasnet_a", "inception_v3", "squeezenet", "vgg19"}
    assert tensat_benchmarks <= set(zoo.NAMES)
    assert zoo.SLOW_NAMES <= set(zoo.NAMES)
    for name in zoo.NAMES:
        text = zoo.describe(name)
        assert text and "\n" not in text


def test_unknown_names_raise(tmp_path):
    for call in (lambda: zoo.describe("nope"), lambda: zoo.build("nope", str(tmp_path / "m")),
                 lambda: zoo.resolve("zoo:nope")):
        with pytest.raises(zoo.UnknownModel, match="mlp") as err:
            call()
        assert isinstance(err.value, ValueError)


def test_build_refuses_non_empty_dir(tmp_path):
    (tmp_path / "junk").write_text("x")
    with pytest.raises(FileExistsError):
        zoo.build("mlp", str(tmp_path))


def test_resolve_passes_paths_through():
    assert zoo.resolve("/some/saved_model") == "/some/saved_model"


def test_resolve_builds_once_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    path = zoo.resolve("zoo:mlp")
    assert path == os.path.join(str(tmp_path), f"mlp-{zoo.ZOO_VERSION}")
    assert set(tf.saved_model.load(path).signatures) == SIGNATURES["mlp"]

    def no_rebuild(name, export_dir):
        raise AssertionError("resolve rebuilt a cached model")

    monkeypatch.setattr(zoo, "build", no_rebuild)
    assert zoo.resolve("zoo:mlp") == path
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temp directories left behind


def test_resolve_loser_of_a_race_uses_the_winner(tmp_path, monkeypatch):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    final = os.path.join(str(tmp_path), f"mlp-{zoo.ZOO_VERSION}")
    real_build = zoo.build

    def racing_build(name, export_dir):
        real_build(name, final)  # another process finishes first...
        real_build(name, export_dir)  # ...while this one is still building

    monkeypatch.setattr(zoo, "build", racing_build)
    assert zoo.resolve("zoo:mlp") == final
    assert os.listdir(tmp_path) == [os.path.basename(final)]


# --- every fast model -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAST)
def test_signatures_run_with_finite_outputs(built, name):
    check_runs(built[name], name)


@pytest.mark.parametrize("name", FAST)
def test_batch_of_one(built, name):
    check_batch_of_one(built[name], name)


@pytest.mark.parametrize("name", FAST)
def test_weights_are_random(built, name):
    # Keras' defaults (zero bias, gamma 1, beta 0, mean 0, variance 1) would be folded away by Grappler.
    for fn in built[name].signatures.values():
        assert fn.variables
        for v in fn.variables:
            values = v.numpy()
            assert not np.all(values == 0) and not np.all(values == 1), v.name
            if "variance" in v.name:
                assert (values > 0).all(), v.name


# the Keras path (with calibration), tf.Modules, and a conv net of the shared raw layers (_layers)
@pytest.mark.parametrize("name", ["keras_cnn", "bert_tiny", "squeezenet"])
def test_build_is_deterministic(built, name, tmp_path):
    zoo.build(name, str(tmp_path / name))
    again, first = run_all(tf.saved_model.load(str(tmp_path / name))), run_all(built[name])
    assert again.keys() == first.keys()
    for key in first:
        for out_key in first[key]:
            np.testing.assert_array_equal(again[key][out_key], first[key][out_key])


# --- graph structure the optimizer relies on --------------------------------------------------------------------

def test_mlp_signature_outputs(built):
    sigs = built["mlp"].signatures
    assert set(sigs["serving_default"].structured_outputs) == {"hidden", "probs"}
    assert list(sigs["logits"].structured_outputs) == ["output_0"]  # how SavedModel keys a bare tensor
    probs = run_all(built["mlp"])["serving_default"]["probs"]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_bert_tiny_ops(built):
    gd = frozen(built["bert_tiny"].signatures["serving_default"])
    ops = op_counts(gd)
    # per layer: Q, K, V, attention output, FFN in, FFN out; plus the pooler
    assert ops["MatMul"] == 2 * 6 + 1
    assert ops["BatchMatMulV2"] == 2 * 2 and ops["Softmax"] == 2 and ops["Erf"] == 2 and ops["Rsqrt"] == 4
    # Q, K and V are three MatMuls on one tensor (the merge-MatMul opportunity), not one fused projection
    assert sorted(consumers_by_input(gd, "MatMul").values()).count(3) == 2


def test_inception_block_ops(built):
    gd = frozen(built["inception_block"].signatures["serving_default"])
    ops = op_counts(gd)
    assert ops["ConcatV2"] == 1 and ops["Conv2D"] == 6 and ops["BiasAdd"] == 6 and ops["Relu"] == 6
    assert max(consumers_by_input(gd, "Conv2D").values()) == 3  # three 1x1 convs read the block input
    assert built["inception_block"].signatures["serving_default"].structured_outputs["features"].shape[-1] == 88


def test_nasrnn_ops(built):
    gd = frozen(built["nasrnn"].signatures["serving_default"])
    ops = op_counts(gd)
    assert ops["MatMul"] == 3 * 16
    assert {"AddV2", "Mul", "Tanh", "Sigmoid", "Relu"} <= set(ops)
    # x_1..x_3 and the states after steps 1 and 2 each feed 8 MatMuls; the initial state is a weight, which the
    # frozen graph reads once per MatMul.
    assert list(consumers_by_input(gd, "MatMul").values()).count(8) == 5


def test_squeezenet_ops(built):
    gd = frozen(built["squeezenet"].signatures["serving_default"])
    ops = op_counts(gd)
    # stem + 8 fires x (squeeze, expand 1x1, expand 3x3) + classifier, each Conv2D + BiasAdd + Relu
    assert ops["Conv2D"] == ops["BiasAdd"] == ops["Relu"] == 26
    assert ops["ConcatV2"] == 8 and ops["MaxPool"] == 3 and ops["Mean"] == 1
    # in each fire the two expand convs read the squeezed tensor
    assert sorted(consumers_by_input(gd, "Conv2D").values()).count(2) == 8
    assert built["squeezenet"].signatures["serving_default"].structured_outputs["logits"].shape[-1] == 1000


def test_keras_cnn_keeps_unfused_batchnorm(built):
    ops = op_counts(frozen(built["keras_cnn"].signatures["serving_default"]))
    assert ops["Conv2D"] == 2 and ops["DepthwiseConv2dNative"] == 1 and ops["Rsqrt"] == 3
    assert ops["Softmax"] == 1 and "FusedBatchNormV3" not in ops


def test_keras_resnext_calls_its_grouped_convs_through_xla(built):
    """Five grouped Conv2Ds and a grouped Conv1D, each a call of an XLA-compiled function (passes/grouped_conv.py)."""
    gd = frozen(built["keras_resnext"].signatures["serving_default"])
    calls = [n for n in gd.node if n.op == "StatefulPartitionedCall"]
    assert len(calls) == 6 and all(n.attr["_XlaMustCompile"].b for n in calls)
    bodies = {n.attr["f"].func.name: n for n in calls}
    convs = [m for f in gd.library.function if f.signature.name in bodies for m in f.node_def if m.op == "Conv2D"]
    assert len(convs) == 6


def test_lstm_keeps_a_while_loop(built):
    for fn in built["lstm"].signatures.values():
        gd = frozen(fn)
        assert [n.op for n in gd.node].count("While") == 1
        assert gd.library.function  # the loop body and condition


# --- slow: the real Keras applications and TENSAT's benchmark models --------------------------------------------

def build_slow(name, tmp_path):
    """Build, load and run one slow model (batch 3 and batch 1): the loaded model and its frozen serving graph."""
    zoo.build(name, str(tmp_path / name))
    loaded = tf.saved_model.load(str(tmp_path / name))
    check_runs(loaded, name)
    check_batch_of_one(loaded, name)
    return loaded, frozen(loaded.signatures["serving_default"])


SLOW_TESTS = {"bert_taso", "nasrnn_taso", "resnext50", "nasnet_a", "vgg19"}  # test_<name> below


def test_every_slow_model_is_tested():
    assert zoo.SLOW_NAMES == set(BN_APPLICATIONS) | SLOW_TESTS


@pytest.mark.slow
@pytest.mark.parametrize("name", BN_APPLICATIONS)
def test_keras_application(name, tmp_path):
    _, gd = build_slow(name, tmp_path)
    ops = op_counts(gd)
    assert ops["Conv2D"] > 30 and ops["Rsqrt"] > 30 and ops["Softmax"] == 1


@pytest.mark.slow
def test_vgg19(tmp_path):
    _, gd = build_slow("vgg19", tmp_path)
    ops = op_counts(gd)
    assert ops["Conv2D"] == 16 and ops["MaxPool"] == 5 and ops["MatMul"] == 1 and ops["Softmax"] == 1
    assert "Rsqrt" not in ops


@pytest.mark.slow
def test_bert_taso(tmp_path):
    _, gd = build_slow("bert_taso", tmp_path)
    ops = op_counts(gd)
    assert ops["MatMul"] == 8 * 6 + 1
    assert ops["BatchMatMulV2"] == 8 * 2 and ops["Softmax"] == 8 and ops["Erf"] == 8 and ops["Rsqrt"] == 16
    assert sorted(consumers_by_input(gd, "MatMul").values()).count(3) == 8  # Q, K, V read one tensor per layer


@pytest.mark.slow
def test_nasrnn_taso(tmp_path):
    loaded, gd = build_slow("nasrnn_taso", tmp_path)
    ops = op_counts(gd)
    assert ops["MatMul"] == 5 * 16
    # x_1..x_5 and the states after steps 1..4 each feed 8 MatMuls (the initial state is a weight, see nasrnn)
    assert list(consumers_by_input(gd, "MatMul").values()).count(8) == 9
    # every step has its own weights, as in TASO
    assert len(loaded.signatures["serving_default"].variables) == 5 * 16 + 1


@pytest.mark.slow
def test_resnext50(tmp_path):
    try:
        loaded, gd = build_slow("resnext50", tmp_path)
    except tf.errors.OpError as e:
        if "grouped convolutions" in str(e):      # CPUs without AVX-512: TF's fused conv kernel lacks groups
            why = next(line for line in str(e).splitlines() if "grouped convolutions" in line).strip()
            pytest.skip(f"TF cannot run the original here (a kernel this CPU lacks): {why}")
        raise
    ops = op_counts(gd)
    assert ops["Conv2D"] == ops["BiasAdd"] - 1 == 53 and ops["AddV2"] == 16 and ops["MatMul"] == 1
    # the 16 grouped 3x3 convs: 32 groups, each filter sees cin / 32 input channels
    grouped = [v.shape for v in loaded.signatures["serving_default"].variables
               if v.shape.rank == 4 and v.shape[2] * 32 == v.shape[3]]
    assert len(grouped) == 16 and all(s[:2] == [3, 3] for s in grouped)


@pytest.mark.slow
def test_nasnet_a(tmp_path):
    _, gd = build_slow("nasnet_a", tmp_path)
    ops = op_counts(gd)
    cells, reductions = 3 * 5 + 3, 3
    normal = cells - reductions
    # 5 separable convs per cell (depthwise + pointwise), 2 input squeezes per cell, the stem
    assert ops["DepthwiseConv2dNative"] == 5 * cells
    assert ops["Conv2D"] == 5 * cells + 2 * cells + 1
    assert ops["ConcatV2"] == cells and ops["AddV2"] == 5 * cells
    assert ops["AvgPool"] == 3 * normal + 2 * reductions and ops["MaxPool"] == 2 * reductions + 1
