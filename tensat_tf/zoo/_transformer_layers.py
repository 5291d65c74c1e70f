"""Keras 3 layers of the real-exports suite's transformers (zoo/transformers.py), written only with keras.ops.

They follow what Keras-built language and vision models contain (keras_hub's Llama/ViT blocks), so the frozen graphs
carry the same Einsum projections, rotary-embedding arithmetic, causal masks and shape plumbing on a dynamic batch
and sequence length.
"""
import keras
from keras import layers, ops


class RotaryEmbedding(layers.Layer):
    """Rotary position embedding (RoPE, half-split form) of [batch, seq, heads, head_dim] by position in seq."""

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength

    def call(self, x):
        seq, dim = ops.shape(x)[1], x.shape[-1]
        inv_freq = 1.0 / (self.max_wavelength ** (ops.arange(0, dim, 2, dtype="float32") / dim))
        angles = ops.einsum("s,f->sf", ops.arange(seq, dtype="float32"), inv_freq)      # [seq, dim/2]
        cos = ops.expand_dims(ops.concatenate([ops.cos(angles)] * 2, axis=-1), 1)       # [seq, 1, dim]
        sin = ops.expand_dims(ops.concatenate([ops.sin(angles)] * 2, axis=-1), 1)
        x1, x2 = ops.split(x, 2, axis=-1)
        return x * cos + ops.concatenate([-x2, x1], axis=-1) * sin


class CausalGroupedQueryAttention(layers.Layer):
    """Grouped-query self-attention with RoPE on queries and keys and a causal mask, from EinsumDense projections.

    keras.layers.GroupQueryAttention exists in Keras 3.15 but has no hook between the projections and the scores,
    where rotary embeddings go; decoder implementations (keras_hub's Llama) build it from EinsumDense as here.
    """

    def __init__(self, num_query_heads, num_key_value_heads, head_dim, **kwargs):
        super().__init__(**kwargs)
        self.nq, self.nkv, self.hd = num_query_heads, num_key_value_heads, head_dim
        self.query = layers.EinsumDense("btd,dnh->btnh", (None, self.nq, self.hd), name="query")
        self.key = layers.EinsumDense("btd,dnh->btnh", (None, self.nkv, self.hd), name="key")
        self.value = layers.EinsumDense("btd,dnh->btnh", (None, self.nkv, self.hd), name="value")
        self.rope = RotaryEmbedding(name="rope")
        self.out = None

    def build(self, input_shape):
        d = input_shape[-1]
        self.query.build(input_shape)
        self.key.build(input_shape)
        self.value.build(input_shape)
        self.out = layers.EinsumDense("btnh,nhd->btd", (None, d), name="attention_output")
        self.out.build((None, None, self.nq, self.hd))

    def call(self, x):
        q = self.rope(self.query(x))
        k = self.rope(self.key(x))
        v = self.value(x)
        groups = self.nq // self.nkv
        k = ops.repeat(k, groups, axis=2)
        v = ops.repeat(v, groups, axis=2)
        scores = ops.einsum("btnh,bsnh->bnts", q, k) * (1.0 / self.hd ** 0.5)
        seq = ops.shape(x)[1]
        causal = ops.tril(ops.ones((seq, seq), dtype="bool"))
        scores = ops.where(causal[None, None, :, :], scores, ops.full_like(scores, -1e9))
        probs = ops.softmax(scores, axis=-1)
        return self.out(ops.einsum("bnts,bsnh->btnh", probs, v))


class ClassTokenAndPositions(layers.Layer):
    """Prepend a learned class token (broadcast over the dynamic batch) and add learned position embeddings."""

    def build(self, input_shape):
        num_patches, d = input_shape[1], input_shape[2]
        # named "embeddings" so the zoo's seeded redraw (zoo/_keras.py) knows their role
        self.class_token = self.add_weight(shape=(1, 1, d), name="embeddings")
        self.positions = self.add_weight(shape=(1, num_patches + 1, d), name="embeddings")

    def call(self, x):
        cls = ops.broadcast_to(self.class_token, (ops.shape(x)[0], 1, x.shape[-1]))
        return ops.concatenate([cls, x], axis=1) + self.positions


class TiedLogits(layers.Layer):
    """Logits as the hidden states times the token embedding transposed (GPT-2's tied output projection)."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def call(self, x):
        return ops.matmul(x, ops.transpose(self.embedding.embeddings))


def silu(x):
    return x * ops.sigmoid(x)


def gelu_tanh(x):
    """GELU's tanh approximation (GPT-2's), which Keras' "gelu" activation is not (it is the exact, erf form)."""
    return keras.activations.gelu(x, approximate=True)
