"""A BERT-style encoder in raw TF ops (tf.Module, no Keras), shared by `bert_tiny` and `bert_taso`.

Shaped after TF1 BERT so the frozen graph shows the patterns TENSAT targets: Q, K and V are three separate
MatMul+BiasAdd on the same input (mergeable into one MatMul), attention is rank-4 BatchMatMulV2 + Softmax,
LayerNorm is moments + rsqrt, GELU is the erf form. Activations are kept 2-D ([-1, hidden]) around every dense
layer so plain MatMul ops appear; the batch dimension stays None.
"""
import collections
import math

import tensorflow as tf

from tensat_tf.zoo._common import around_one, prepare_export_dir, rng, small
from tensat_tf.zoo._layers import Dense

Config = collections.namedtuple("Config", "seq hidden heads layers intermediate")
EPS = 1e-12  # TF1 BERT's LayerNorm epsilon


class LayerNorm(tf.Module):
    def __init__(self, r, hidden, name):
        super().__init__(name=name)
        self.gamma = tf.Variable(around_one(r, (hidden,)), name="gamma")
        self.beta = tf.Variable(small(r, (hidden,)), name="beta")

    def __call__(self, x):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + EPS) * self.gamma + self.beta


def gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


class EncoderLayer(tf.Module):
    def __init__(self, r, cfg: Config, name):
        super().__init__(name=name)
        self.cfg = cfg
        h = cfg.hidden
        self.query = Dense(r, h, h, "query")
        self.key = Dense(r, h, h, "key")
        self.value = Dense(r, h, h, "value")
        self.attn_out = Dense(r, h, h, "attention_output")
        self.attn_norm = LayerNorm(r, h, "attention_norm")
        self.ffn_in = Dense(r, h, cfg.intermediate, "intermediate", gain=2.0)
        self.ffn_out = Dense(r, cfg.intermediate, h, "output")
        self.ffn_norm = LayerNorm(r, h, "output_norm")

    def split_heads(self, x2d):
        # [B*S, H] -> [B, heads, S, head_dim]
        c = self.cfg
        return tf.transpose(tf.reshape(x2d, [-1, c.seq, c.heads, c.hidden // c.heads]), [0, 2, 1, 3])

    def __call__(self, x2d):
        q, k, v = (self.split_heads(d(x2d)) for d in (self.query, self.key, self.value))
        scores = tf.linalg.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(self.cfg.hidden // self.cfg.heads))
        ctx = tf.linalg.matmul(tf.nn.softmax(scores), v)  # [B, heads, S, head_dim]
        ctx2d = tf.reshape(tf.transpose(ctx, [0, 2, 1, 3]), [-1, self.cfg.hidden])
        h = self.attn_norm(self.attn_out(ctx2d) + x2d)
        return self.ffn_norm(self.ffn_out(gelu(self.ffn_in(h))) + h)


class Bert(tf.Module):
    """Encoder layers + pooler; module_class() adds `serve`, a tf.function with the config's input signature."""

    def __init__(self, seed: int, cfg: Config, name: str):
        super().__init__(name=name)
        r = rng(seed)
        self.cfg = cfg
        self.encoder = [EncoderLayer(r, cfg, f"layer_{i}") for i in range(cfg.layers)]
        self.pooler = Dense(r, cfg.hidden, cfg.hidden, "pooler")

    def encode(self, embeddings):
        h = tf.reshape(embeddings, [-1, self.cfg.hidden])
        for layer in self.encoder:
            h = layer(h)
        seq = tf.reshape(h, [-1, self.cfg.seq, self.cfg.hidden])
        pooled = tf.math.tanh(self.pooler(seq[:, 0, :]))  # BERT pools the first ([CLS]) position
        return {"sequence_output": seq, "pooled_output": pooled}


def module_class(cfg: Config, name: str):
    """A Bert subclass for one config: the input signature is fixed when `serve` is decorated."""

    class Model(Bert):
        def __init__(self, seed: int):
            super().__init__(seed, cfg, name)

        @tf.function(input_signature=[tf.TensorSpec([None, cfg.seq, cfg.hidden], tf.float32, name="embeddings")])
        def serve(self, embeddings):
            return self.encode(embeddings)

    return Model


def build(export_dir: str, cfg: Config, name: str, seed: int) -> None:
    prepare_export_dir(export_dir)
    m = module_class(cfg, name)(seed)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
