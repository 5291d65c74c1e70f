"""`bert_tiny`: a 2-layer BERT-style encoder written in raw TF ops (tf.Module, no Keras).

Shaped after TF1 BERT so the frozen graph shows the patterns TENSAT targets: Q, K and V are three separate
MatMul+BiasAdd on the same input (mergeable into one MatMul), attention is rank-4 BatchMatMulV2 + Softmax,
LayerNorm is moments + rsqrt, GELU is the erf form. Activations are kept 2-D ([-1, hidden]) around every dense
layer so plain MatMul ops appear; the batch dimension stays None.
"""
import math

import tensorflow as tf

from tensat_tf.zoo._common import around_one, he_normal, prepare_export_dir, rng, small

SEED = 303
SEQ, HIDDEN, HEADS, LAYERS, INTERMEDIATE = 32, 64, 4, 2, 128
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-12  # TF1 BERT's LayerNorm epsilon


class Dense(tf.Module):
    def __init__(self, r, fan_in, fan_out, name, gain=1.0):
        super().__init__(name=name)
        self.w = tf.Variable(he_normal(r, (fan_in, fan_out), fan_in, gain), name="kernel")
        self.b = tf.Variable(small(r, (fan_out,)), name="bias")

    def __call__(self, x2d):
        return tf.nn.bias_add(tf.matmul(x2d, self.w), self.b)


class LayerNorm(tf.Module):
    def __init__(self, r, name):
        super().__init__(name=name)
        self.gamma = tf.Variable(around_one(r, (HIDDEN,)), name="gamma")
        self.beta = tf.Variable(small(r, (HIDDEN,)), name="beta")

    def __call__(self, x):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + EPS) * self.gamma + self.beta


def gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def split_heads(x2d):
    # [B*S, H] -> [B, heads, S, head_dim]
    return tf.transpose(tf.reshape(x2d, [-1, SEQ, HEADS, HEAD_DIM]), [0, 2, 1, 3])


class EncoderLayer(tf.Module):
    def __init__(self, r, name):
        super().__init__(name=name)
        self.query = Dense(r, HIDDEN, HIDDEN, "query")
        self.key = Dense(r, HIDDEN, HIDDEN, "key")
        self.value = Dense(r, HIDDEN, HIDDEN, "value")
        self.attn_out = Dense(r, HIDDEN, HIDDEN, "attention_output")
        self.attn_norm = LayerNorm(r, "attention_norm")
        self.ffn_in = Dense(r, HIDDEN, INTERMEDIATE, "intermediate", gain=2.0)
        self.ffn_out = Dense(r, INTERMEDIATE, HIDDEN, "output")
        self.ffn_norm = LayerNorm(r, "output_norm")

    def __call__(self, x2d):
        q, k, v = (split_heads(d(x2d)) for d in (self.query, self.key, self.value))
        scores = tf.linalg.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(HEAD_DIM))
        ctx = tf.linalg.matmul(tf.nn.softmax(scores), v)  # [B, heads, S, head_dim]
        ctx2d = tf.reshape(tf.transpose(ctx, [0, 2, 1, 3]), [-1, HIDDEN])
        h = self.attn_norm(self.attn_out(ctx2d) + x2d)
        return self.ffn_norm(self.ffn_out(gelu(self.ffn_in(h))) + h)


class BertTiny(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="bert_tiny")
        r = rng(seed)
        self.encoder = [EncoderLayer(r, f"layer_{i}") for i in range(LAYERS)]
        self.pooler = Dense(r, HIDDEN, HIDDEN, "pooler")

    @tf.function(input_signature=[tf.TensorSpec([None, SEQ, HIDDEN], tf.float32, name="embeddings")])
    def serve(self, embeddings):
        h = tf.reshape(embeddings, [-1, HIDDEN])
        for layer in self.encoder:
            h = layer(h)
        seq = tf.reshape(h, [-1, SEQ, HIDDEN])
        pooled = tf.math.tanh(self.pooler(seq[:, 0, :]))  # BERT pools the first ([CLS]) position
        return {"sequence_output": seq, "pooled_output": pooled}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = BertTiny(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
