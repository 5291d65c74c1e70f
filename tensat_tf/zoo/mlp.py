"""`mlp`: a two-layer perceptron as a tf.Module with two signatures.

It covers the multi-signature and dict-output cases: `serving_default` returns {hidden, probs} (sorted keys decide the
frozen output order), `logits` returns a bare tensor. Ops: MatMul, BiasAdd, Relu, Softmax.
"""
import tensorflow as tf

from tensat_tf.zoo._common import he_normal, prepare_export_dir, rng, small

SEED = 101
IN, HIDDEN, OUT = 16, 32, 4


class MLP(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="mlp")
        r = rng(seed)
        self.w1 = tf.Variable(he_normal(r, (IN, HIDDEN), IN), name="w1")
        self.b1 = tf.Variable(small(r, (HIDDEN,)), name="b1")
        self.w2 = tf.Variable(he_normal(r, (HIDDEN, OUT), HIDDEN, gain=1.0), name="w2")
        self.b2 = tf.Variable(small(r, (OUT,)), name="b2")

    def _forward(self, x):
        hidden = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, self.w1), self.b1))
        return hidden, tf.nn.bias_add(tf.matmul(hidden, self.w2), self.b2)

    @tf.function(input_signature=[tf.TensorSpec([None, IN], tf.float32, name="x")])
    def serve(self, x):
        hidden, logits = self._forward(x)
        return {"hidden": hidden, "probs": tf.nn.softmax(logits)}

    @tf.function(input_signature=[tf.TensorSpec([None, IN], tf.float32, name="x")])
    def logits(self, x):
        return self._forward(x)[1]


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = MLP(SEED)
    tf.saved_model.save(m, export_dir, signatures={
        "serving_default": m.serve.get_concrete_function(),
        "logits": m.logits.get_concrete_function(),
    })
