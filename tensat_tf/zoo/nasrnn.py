"""`nasrnn`: the NasRNN cell from the TASO/TENSAT benchmarks, unrolled over a few time steps (tf.Module).

As in TASO's nasrnn.py, each step forms 8 terms x_t @ Wx_i + h @ Wh_i (16 MatMuls: x_t and h each feed 8 of them, the
"merge MatMuls sharing an input" opportunity) and mixes them with Relu/Sigmoid/Tanh, AddV2 and Mul. Unlike TASO the
weights are shared across steps (a real RNN); like TASO the initial state is a learned [1, hidden] weight, which
broadcasts against the batch in the first step's AddV2.
"""
import tensorflow as tf

from tensat_tf.zoo._common import he_normal, prepare_export_dir, rng

SEED = 505
STEPS, HIDDEN = 3, 64
TERMS = 8


def cell(x, h, wx, wh):
    """TASO's nas_node: the TERMS products x @ wx[i] + h @ wh[i], mixed into the next state."""
    t = [tf.matmul(x, a) + tf.matmul(h, b) for a, b in zip(wx, wh)]
    s, th, relu = tf.math.sigmoid, tf.math.tanh, tf.nn.relu
    m0 = relu(t[0]) + s(t[3])
    m1 = s(t[1]) + th(t[2])
    m2 = s(t[4]) * th(t[5])
    m3 = s(t[6]) * relu(t[7])
    m4 = s(m1) + th(m2)
    m5 = th(m0) * th(m3)
    m6 = th(m4) * th(m5)
    return th(m6)


class NasRNN(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="nasrnn")
        r = rng(seed)
        # gain 1: each term is the sum of two unit-variance products; the tanh/sigmoid gates stay out of saturation.
        self.wx = [tf.Variable(he_normal(r, (HIDDEN, HIDDEN), 2 * HIDDEN, 1.0), name=f"wx_{i}") for i in range(TERMS)]
        self.wh = [tf.Variable(he_normal(r, (HIDDEN, HIDDEN), 2 * HIDDEN, 1.0), name=f"wh_{i}") for i in range(TERMS)]
        self.h0 = tf.Variable(he_normal(r, (1, HIDDEN), 1, 1.0), name="initial_state")

    @tf.function(input_signature=[tf.TensorSpec([None, STEPS, HIDDEN], tf.float32, name="x")])
    def serve(self, x):
        h = self.h0
        for step in range(STEPS):
            h = cell(x[:, step, :], h, self.wx, self.wh)
        return {"state": h}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = NasRNN(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
