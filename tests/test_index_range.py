"""Verification's token ids reach every row of the tables they index (tensat_tf/index_range.py)."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tensat_tf import errors, index_range, verify
from tensat_tf.convert import convert
from tensat_tf.io import load as load_mod
from tensat_tf.io.load import TensorSpec
from tensat_tf.options import Options
from tensat_tf.passes.tensat import TensatPass

ROWS = 50


class _Tables(tf.Module):
    def __init__(self):
        rng = np.random.RandomState(0)
        self.emb = tf.Variable(rng.standard_normal((ROWS, 8)).astype(np.float32))
        self.pos = tf.Variable(rng.standard_normal((30, 8)).astype(np.float32))
        self.w = tf.Variable(rng.standard_normal((8, 4)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")])
    def embed(self, ids):
        # Keras 3's ops.take: a negative id counts from the end
        e = tf.gather(self.emb, tf.where(ids < 0, ids + ROWS, ids))
        return {"y": tf.matmul(e, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="ids"),
                                  tf.TensorSpec([None, None], tf.int32, name="mask")])
    def two_tables(self, ids, mask):
        i = tf.cast(ids, tf.int32)
        e = tf.gather(self.emb, i) + tf.gather(self.pos, tf.reshape(i, [-1, tf.shape(i)[1]]))
        return {"y": tf.matmul(e * tf.cast(mask, tf.float32)[..., None], self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
    def one_hot(self, ids):
        return {"y": tf.matmul(tf.one_hot(ids, 8), self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids"),
                                  tf.TensorSpec([None, 8], tf.float32, name="x")])
    def computed_table(self, ids, x):
        return {"y": tf.matmul(tf.gather(x * 2.0, ids), self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
    def guarded(self, ids):
        with tf.control_dependencies([tf.debugging.assert_less(ids, 5)]):
            return {"y": tf.matmul(tf.gather(self.emb, ids), self.w)}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tables") / "model")
    m = _Tables()
    tf.saved_model.save(m, path, signatures={n: getattr(m, n) for n in
                                             ("embed", "two_tables", "one_hot", "computed_table", "guarded")})
    return path


def test_an_input_is_bounded_by_the_smallest_table_it_indexes(tables):
    model = load_mod.load(tables)
    got = {name: index_range.highs(sig.graph_def, sig.inputs) for name, sig in model.signatures.items()}
    assert got["embed"] == {"ids": ROWS}                 # through Keras' negative-index select
    assert got["two_tables"] == {"ids": 30}              # through a cast and a reshape; the mask indexes nothing
    assert got["one_hot"] == {"ids": 8}
    assert got["computed_table"] == {}                   # a table that is not a constant: its rows are unknown


def test_wide_ids_keep_small_ones_and_stay_in_range():
    spec = [TensorSpec("ids", "ids:0", tf.int32, (-1, 64))]
    plain = verify.random_inputs(spec, 4, 0)["ids"].numpy()
    assert plain.max() == 1                              # what every integer input got before
    wide = verify.random_inputs(spec, 4, 0, highs={"ids": ROWS})["ids"].numpy()
    assert wide.min() >= 0 and wide.max() < ROWS and (wide >= 2).mean() > 0.3 and (wide == 0).mean() > 0.1
    # an input whose bound is the default range draws what it drew before
    assert np.array_equal(verify.random_inputs(spec, 4, 0, highs={"ids": 2})["ids"].numpy(), plain)


def test_check_original_falls_back_where_the_original_refuses_wide_ids(tables):
    model = load_mod.load(tables, only=["embed", "guarded"])
    assert index_range.highs(model.signatures["guarded"].graph_def, model.signatures["guarded"].inputs) == {
        "ids": ROWS}
    assert verify.check_original(model) == {"embed": {"ids": ROWS}, "guarded": {}}


def test_signatures_sharing_a_frozen_graph_are_checked_once(tables):
    """load shares one frozen graph between signatures that compute the same thing; running the second adds nothing."""
    model = load_mod.load(tables, only=["embed"])
    sig = model.signatures["embed"]

    def never(**feeds):
        raise AssertionError("the second signature of one frozen graph was run")
    model.signatures["twin"] = dataclasses.replace(sig, name="twin", function=never)
    assert verify.check_original(model) == {"embed": {"ids": ROWS}, "twin": {"ids": ROWS}}


def _corrupt_row(monkeypatch, row: int):
    """The tensat pass's output with one row of the embedding moved by 1 %: a wrong rewrite of the table."""
    original = TensatPass.optimize

    def corrupt(self, graph_def, item):
        out = original(self, graph_def, item)
        for node in out.node:
            if node.op == "Const" and [d.size for d in node.attr["value"].tensor.tensor_shape.dim] == [ROWS, 8]:
                arr = tf.make_ndarray(node.attr["value"].tensor).copy()
                arr[row] *= 1.01
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(arr))
                return out
        raise AssertionError("no embedding table in the pass's output")
    monkeypatch.setattr(TensatPass, "optimize", corrupt)


def test_a_wrong_row_of_the_embedding_fails_verification(tables, tmp_path, monkeypatch):
    _corrupt_row(monkeypatch, 7)
    with pytest.raises(errors.VerificationFailed):
        convert(tables, str(tmp_path / "out"), Options(signatures=["embed"], profile=False))
    # ids of 0 and 1 only, as verification drew them before, never read row 7: the same conversion passed
    monkeypatch.setattr(index_range, "highs", lambda graph_def, inputs: {})
    convert(tables, str(tmp_path / "out2"), Options(signatures=["embed"], profile=False))


def test_warm_up_records_hold_the_ids_verification_drew(tables, tmp_path):
    from tensat_tf import serving
    out = str(tmp_path / "out")
    report = convert(tables, out, Options(signatures=["embed"], profile=False, warmup=True))
    assert report["verification"]["passed"]
    assert report["signatures"]["embed"]["verification"]["index_bounds"] == {"ids": ROWS}
    ids = [r.predict_log.request.inputs["ids"] for r in serving.read_records(serving.warmup_path(out))]
    assert max(tf.make_ndarray(t).max() for t in ids) >= 2
