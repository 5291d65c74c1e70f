"""The real-exports suite's transformers, built from Keras 3 layers and exported with keras.export.ExportArchive.

  real_encoder  token ids [batch, seq] -> Embedding + learned positions, 2 x (MultiHeadAttention, LayerNormalization,
                Dense GELU FFN), post-norm as in BERT; output [batch, seq, 64]
  real_decoder  token ids [batch, seq] -> Embedding, 2 x (RMSNormalization, causal grouped-query attention with
                rotary embeddings (4 query heads, 2 key/value heads), RMSNormalization, SwiGLU FFN), pre-norm as in
                Llama; output logits [batch, seq, 256]
  real_vit      images [batch, 32, 32, 3] -> Conv2D 8x8 patchify, class token, position embeddings, 2 pre-norm
                MultiHeadAttention blocks with GELU MLP, LayerNormalization, Dense head on the class token (10)

Batch (and sequence, for the text models) are dynamic in the signature, as in a real export: the frozen graphs keep
the Shape/StridedSlice/Pack plumbing that comes with them. Weights are redrawn from seeded generators
(tensat_tf/zoo/_keras.py); keras is imported only when a model is built.

Not in the suite, for tools/sweep_apps.py --transformers: `gpt`, a GPT-2-style decoder (learned positions, pre-norm
LayerNormalization, causal MultiHeadAttention, Dense FFN with the tanh GELU, final norm, logits from the token
embedding transposed); `seq2seq`, an encoder-decoder (source and target token ids [batch, seq], two inputs of their
own lengths; pre-norm encoder layers; decoder layers of causal self-attention, cross-attention to the encoder's
output and a ReLU FFN, as in the original Transformer and T5; logits [batch, target seq, vocab]).
"""
import dataclasses

MODELS = {
    "real_encoder": "Keras 3 encoder, token ids [None, None]: 2 x (MultiHeadAttention + LayerNorm + GELU FFN), d 64",
    "real_decoder": "Keras 3 decoder, token ids [None, None]: RMSNorm, RoPE, causal GQA (4q/2kv), SwiGLU, 2 layers",
    "real_vit": "Keras 3 ViT 32x32x3, dynamic batch: Conv2D patchify 8x8, class token, 2 MultiHeadAttention blocks",
}
SEEDS = {"real_encoder": 1201, "real_decoder": 1202, "real_vit": 1203, "gpt": 1204, "seq2seq": 1205}


@dataclasses.dataclass(frozen=True)
class Size:
    """A transformer's dimensions. The suite's models are SUITE; tools/sweep_apps.py --transformers builds the same
    architectures (and `gpt`, which the suite does not have) at other sizes."""
    vocab: int = 256
    d: int = 64
    heads: int = 4
    ffn: int = 128
    layers: int = 2


SUITE = Size()


def encoder(size: Size = SUITE):
    import keras
    from keras import layers, ops
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = layers.Embedding(size.vocab, size.d, name="token_embedding")(ids)
    positions = layers.Lambda(lambda t: ops.arange(ops.shape(t)[1]), name="positions")(ids)
    x = x + layers.Embedding(128, size.d, name="position_embedding")(positions)
    x = layers.LayerNormalization(epsilon=1e-12, name="embedding_norm")(x)
    for i in range(size.layers):
        a = layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"layer{i}_attention")(x, x)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_attention_norm")(x + a)
        h = layers.Dense(size.ffn, activation="gelu", name=f"layer{i}_ffn_in")(x)
        h = layers.Dense(size.d, name=f"layer{i}_ffn_out")(h)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_ffn_norm")(x + h)
    return keras.Model(ids, x, name="real_encoder")


def decoder(size: Size = SUITE):
    import keras
    from keras import layers
    from tensat_tf.zoo._transformer_layers import CausalGroupedQueryAttention, silu
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = layers.Embedding(size.vocab, size.d, name="token_embedding")(ids)
    for i in range(size.layers):
        h = layers.RMSNormalization(name=f"layer{i}_attention_norm")(x)
        x = x + CausalGroupedQueryAttention(size.heads, size.heads // 2, size.d // size.heads,
                                            name=f"layer{i}_attention")(h)
        h = layers.RMSNormalization(name=f"layer{i}_ffn_norm")(x)
        gate = layers.EinsumDense("btd,df->btf", (None, size.ffn), name=f"layer{i}_ffn_gate")(h)
        up = layers.EinsumDense("btd,df->btf", (None, size.ffn), name=f"layer{i}_ffn_up")(h)
        h = layers.Lambda(lambda t: silu(t[0]) * t[1], name=f"layer{i}_swiglu")([gate, up])
        x = x + layers.EinsumDense("btf,fd->btd", (None, size.d), name=f"layer{i}_ffn_down")(h)
    x = layers.RMSNormalization(name="final_norm")(x)
    logits = layers.Dense(size.vocab, use_bias=False, name="lm_head")(x)
    return keras.Model(ids, logits, name="real_decoder")


def vit(size: Size = SUITE):
    import keras
    from keras import layers
    from tensat_tf.zoo._transformer_layers import ClassTokenAndPositions
    images = keras.Input((32, 32, 3), name="image")
    x = layers.Conv2D(size.d, 8, strides=8, name="patchify")(images)     # [batch, 4, 4, d]
    x = layers.Reshape((16, size.d), name="patches")(x)
    x = ClassTokenAndPositions(name="class_token_and_positions")(x)
    for i in range(size.layers):
        h = layers.LayerNormalization(epsilon=1e-6, name=f"block{i}_attention_norm")(x)
        x = x + layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"block{i}_attention")(h, h)
        h = layers.LayerNormalization(epsilon=1e-6, name=f"block{i}_mlp_norm")(x)
        h = layers.Dense(size.ffn, activation="gelu", name=f"block{i}_mlp_in")(h)
        x = x + layers.Dense(size.d, name=f"block{i}_mlp_out")(h)
    x = layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    cls = layers.Lambda(lambda t: t[:, 0], name="class_token")(x)
    return keras.Model(images, layers.Dense(10, name="head")(cls), name="real_vit")


def gpt(size: Size = SUITE):
    import keras
    from keras import layers, ops
    from tensat_tf.zoo._transformer_layers import TiedLogits, gelu_tanh
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    tokens = layers.Embedding(size.vocab, size.d, name="token_embedding")
    x = tokens(ids)
    positions = layers.Lambda(lambda t: ops.arange(ops.shape(t)[1]), name="positions")(ids)
    x = x + layers.Embedding(256, size.d, name="position_embedding")(positions)
    for i in range(size.layers):
        h = layers.LayerNormalization(epsilon=1e-5, name=f"layer{i}_attention_norm")(x)
        x = x + layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"layer{i}_attention")(
            h, h, use_causal_mask=True)
        h = layers.LayerNormalization(epsilon=1e-5, name=f"layer{i}_ffn_norm")(x)
        h = layers.Activation(gelu_tanh, name=f"layer{i}_gelu")(layers.Dense(size.ffn, name=f"layer{i}_ffn_in")(h))
        x = x + layers.Dense(size.d, name=f"layer{i}_ffn_out")(h)
    x = layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
    return keras.Model(ids, TiedLogits(tokens, name="lm_head")(x), name="gpt")


def seq2seq(size: Size = SUITE):
    import keras
    from keras import layers, ops

    def embedded(ids, name):
        x = layers.Embedding(size.vocab, size.d, name=f"{name}_embedding")(ids)
        positions = layers.Lambda(lambda t: ops.arange(ops.shape(t)[1]), name=f"{name}_positions")(ids)
        return x + layers.Embedding(256, size.d, name=f"{name}_position_embedding")(positions)

    def ffn(x, name):
        h = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ffn_norm")(x)
        h = layers.Dense(size.ffn, activation="relu", name=f"{name}_ffn_in")(h)
        return x + layers.Dense(size.d, name=f"{name}_ffn_out")(h)

    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_ids")
    x = embedded(source, "source")
    for i in range(size.layers):
        h = layers.LayerNormalization(epsilon=1e-6, name=f"encoder{i}_attention_norm")(x)
        x = ffn(x + layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"encoder{i}_attention")(h, h),
                f"encoder{i}")
    memory = layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)
    y = embedded(target, "target")
    for i in range(size.layers):
        h = layers.LayerNormalization(epsilon=1e-6, name=f"decoder{i}_attention_norm")(y)
        y = y + layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"decoder{i}_attention")(
            h, h, use_causal_mask=True)
        h = layers.LayerNormalization(epsilon=1e-6, name=f"decoder{i}_cross_norm")(y)
        y = ffn(y + layers.MultiHeadAttention(size.heads, size.d // size.heads, name=f"decoder{i}_cross")(h, memory),
                f"decoder{i}")
    y = layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")(y)
    logits = layers.Dense(size.vocab, name="lm_head")(y)
    return keras.Model({"source_ids": source, "target_ids": target}, logits, name="seq2seq")


def _fix_einsum_fan_in(model, seed: int) -> None:
    """Redraw EinsumDense kernels with their true fan-in (the contracted input axes only).

    The generic redraw takes every kernel axis but the last as fan-in, which for a [d, heads, head_dim] projection
    counts the heads too and shrinks the attention logits towards a uniform softmax.
    """
    import keras
    from tensat_tf.zoo._common import he_normal, rng
    r = rng(seed)
    for layer in _all_layers(model):
        if isinstance(layer, keras.layers.EinsumDense):
            inputs, kernel = layer.equation.split("->")[0].split(",")
            contracted = [i for i, c in enumerate(kernel) if c in inputs]
            shape = tuple(layer.kernel.shape)
            fan_in = 1
            for i in contracted:
                fan_in *= shape[i]
            layer.kernel.assign(he_normal(r, shape, fan_in, gain=1.0))


def _all_layers(layer):
    yield layer
    for sub in layer._flatten_layers(include_self=False, recursive=True):
        yield sub


BUILDERS = {"real_encoder": encoder, "real_decoder": decoder, "real_vit": vit, "gpt": gpt, "seq2seq": seq2seq}


def build(name: str, export_dir: str, size: Size = SUITE) -> None:
    import keras
    import tensorflow as tf

    from tensat_tf.zoo import _keras
    from tensat_tf.zoo._common import prepare_export_dir
    model = BUILDERS[name](size)
    seed = SEEDS[name]
    prepare_export_dir(export_dir)
    _keras.randomize_weights(model, seed)
    _fix_einsum_fan_in(model, seed + 1)
    call = model.call
    if name == "real_vit":
        _keras.calibrate_head(model, (32, 32, 3), seed + 2)
        specs = [tf.TensorSpec((None, 32, 32, 3), tf.float32, name="image")]
    elif name == "seq2seq":
        specs = [tf.TensorSpec((None, None), tf.int32, name=n) for n in ("source_ids", "target_ids")]
        call = lambda source_ids, target_ids: model.call({"source_ids": source_ids,  # noqa: E731
                                                          "target_ids": target_ids})
    else:
        specs = [tf.TensorSpec((None, None), tf.int32, name="token_ids")]
    # An explicit input signature with dynamic batch and sequence; both endpoint names are the ones model.export()
    # writes, so these exports look like any other Keras 3 export.
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", call, input_signature=specs)
    archive.add_endpoint("serving_default", call, input_signature=specs)
    archive.write_out(export_dir, verbose=False)
