"""`nasrnn_taso`: the NasRNN of the TASO/TENSAT benchmarks: hidden 512, unrolled 5 steps (tf.Module).

The cell is nasrnn's (TASO's nas_node: 8 terms x_t @ W1 + h @ W2 per step, 16 MatMuls). As in TASO's nasrnn.py,
every step draws its own weights (TASO calls new_weight inside each cell), so 80 distinct [512, 512] weights,
~21 M parameters, ~84 MB; the initial state is a learned [1, 512] weight. TASO feeds 5 separate [1, 512] inputs;
here one input [None, 5, 512] is sliced per step, as in nasrnn.
"""
import tensorflow as tf

from tensat_tf.zoo._common import he_normal, prepare_export_dir, rng
from tensat_tf.zoo.nasrnn import TERMS, cell

SEED = 606
STEPS, HIDDEN = 5, 512


class NasRNNTaso(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="nasrnn_taso")
        r = rng(seed)

        def weights(step, kind):  # gain 1, as in nasrnn
            return [tf.Variable(he_normal(r, (HIDDEN, HIDDEN), 2 * HIDDEN, 1.0), name=f"step_{step}/w{kind}_{i}")
                    for i in range(TERMS)]

        self.wx, self.wh = [], []
        for step in range(STEPS):
            self.wx.append(weights(step, "x"))
            self.wh.append(weights(step, "h"))
        self.h0 = tf.Variable(he_normal(r, (1, HIDDEN), 1, 1.0), name="initial_state")

    @tf.function(input_signature=[tf.TensorSpec([None, STEPS, HIDDEN], tf.float32, name="x")])
    def serve(self, x):
        h = self.h0
        for step in range(STEPS):
            h = cell(x[:, step, :], h, self.wx[step], self.wh[step])
        return {"state": h}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = NasRNNTaso(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
