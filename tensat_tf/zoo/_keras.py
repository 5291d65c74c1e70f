"""Randomize, calibrate and export Keras 3 models for the zoo.

Keras' own initializers give zero biases and identity BatchNorm (gamma 1, beta 0, mean 0, variance 1); Grappler folds
those away and the optimizer would be tested on a degenerate graph. So every weight is redrawn here from a seeded
numpy generator, and any weight whose role is unknown is an error rather than being left at its default.
"""
import numpy as np
import keras

from tensat_tf.zoo._common import around_one, he_normal, prepare_export_dir, rng, small

_CALIBRATION_BATCH = 8


def _redraw(layer, var, r: np.random.RandomState) -> np.ndarray:
    shape = tuple(var.shape)
    name = var.name
    if name in ("kernel", "recurrent_kernel"):
        # Depthwise kernels are (h, w, in, multiplier): each output sees only h*w inputs, not h*w*in.
        depthwise = isinstance(layer, keras.layers.DepthwiseConv2D)
        fan_in = int(np.prod(shape[:-2] if depthwise else shape[:-1]))
        return he_normal(r, shape, fan_in)
    if name in ("bias", "beta"):
        return small(r, shape)
    if name == "gamma":
        return around_one(r, shape)
    if name == "moving_mean":
        return small(r, shape)
    if name == "moving_variance":
        # Placeholder until calibrate_batchnorm(); positive like a real variance.
        return around_one(r, shape)
    # Weight roles of the real-exports suite (zoo/keras_apps.py, zoo/transformers.py); no older builder has them.
    if name == "depthwise_kernel":      # SeparableConv2D: (h, w, in, multiplier), each output sees h*w inputs
        return he_normal(r, shape, int(np.prod(shape[:-2])))
    if name == "pointwise_kernel":
        return he_normal(r, shape, int(np.prod(shape[:-1])))
    if name == "scale" or type(layer).__name__ == "LayerScale":    # RMSNormalization; ConvNeXt's LayerScale
        return around_one(r, shape)
    if name == "embeddings":
        return small(r, shape, 1.0)
    if name == "mean" and isinstance(layer, keras.layers.Normalization):
        return small(r, shape)
    if name == "variance" and isinstance(layer, keras.layers.Normalization):
        return around_one(r, shape)
    if name == "count" and isinstance(layer, keras.layers.Normalization):
        return var.numpy()              # an int counter of adapt(), not used at inference
    raise ValueError(f"zoo: no random draw defined for weight {var.path!r} of {type(layer).__name__}")


def randomize_weights(model: keras.Model, seed: int) -> None:
    """Redraw every weight of every layer, in the model's (deterministic) layer order."""
    r = rng(seed)
    done = set()
    for layer in model.layers:
        for var in layer.weights:
            var.assign(_redraw(layer, var, r))
            done.add(id(var))
        if isinstance(layer, keras.layers.Normalization):
            layer.finalize_state()      # call() reads tensors copied from its variables at build time
    missed = [v.path for v in model.weights if id(v) not in done]
    if missed:  # nested models would hide weights from model.layers; refuse rather than keep defaults
        raise ValueError(f"zoo: weights not randomized: {missed}")


def calibrate_batchnorm(model: keras.Model, input_shape, seed: int) -> None:
    """Set BN moving statistics to the real statistics of a seeded random batch.

    With random moving statistics the activations of a deep net (MobileNetV2 has 52 BNs) drift to 0 or blow up;
    with calibrated ones each BN output is gamma * N(0, 1) + beta, so activations stay O(1). One training-mode pass
    with momentum 0 makes every BN store exactly the batch moments it saw (rounded, see _rounded).
    """
    bns = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    if not bns:
        return
    x = _calibration_batch(model, input_shape, seed)
    momenta = [bn.momentum for bn in bns]
    try:
        for bn in bns:
            bn.momentum = 0.0
        model(x, training=True)
    finally:
        for bn, m in zip(bns, momenta):
            bn.momentum = m
    for bn in bns:
        bn.moving_mean.assign(_rounded(bn.moving_mean.numpy()))
        # A channel that is constant over the batch would store variance 0; keep every variance positive.
        bn.moving_variance.assign(np.maximum(_rounded(bn.moving_variance.numpy()), 1e-3))


def calibrate_head(model: keras.Model, input_shape, seed: int) -> None:
    """Rescale a final Dense layer so its logits vary O(1) from one input to another.

    After GlobalAveragePooling the features of random-noise images barely differ between inputs (the average of
    many independent positions), so the softmax output is almost constant (MobileNetV2: 0.001 +- 0.0001) and a
    wrong rewrite would hardly show in it. Standardizing the head's input over a seeded batch and folding that into
    the kernel and bias keeps the layer a plain Dense, with outputs that depend on the input.
    """
    head = model.layers[-1]
    if not isinstance(head, keras.layers.Dense):
        return
    x = _calibration_batch(model, input_shape, seed)
    features = np.asarray(keras.Model(model.input, head.input)(x))
    features = features.reshape(-1, features.shape[-1])
    mean = features.mean(axis=0)
    scale = 1.0 / np.sqrt(features.var(axis=0).mean() + 1e-12)  # one scale: per-feature ones would amplify noise
    kernel = head.kernel.numpy()
    # (f - mean) * scale @ K + b  ==  f @ (scale K) + (b - scale mean @ K)
    head.kernel.assign(_rounded(kernel * scale))
    head.bias.assign(_rounded(head.bias.numpy() - scale * mean @ kernel))


def _calibration_batch(model: keras.Model, input_shape, seed: int):
    x = rng(seed).standard_normal((_CALIBRATION_BATCH,) + tuple(input_shape)).astype(np.float32)
    # keras.applications built on an input_tensor take a one-element list; a bare array there draws a warning.
    return [x] if isinstance(model.input, list) else x


def _rounded(values: np.ndarray) -> np.ndarray:
    # Values computed by TF kernels may differ in the last bits with thread count or CPU; the zoo promises the
    # same weights everywhere, so keep float16 precision only.
    return np.asarray(values, np.float16).astype(np.float32)


def export(model: keras.Model, input_shape, seed: int, export_dir: str) -> None:
    """Randomize + calibrate, then model.export(): Keras 3 writes the `serve` and `serving_default` signatures."""
    prepare_export_dir(export_dir)
    randomize_weights(model, seed)
    calibrate_batchnorm(model, input_shape, seed + 1)
    calibrate_head(model, input_shape, seed + 2)
    model.export(export_dir, verbose=False)


def export_application(application, input_shape, seed: int, export_dir: str, **kwargs) -> None:
    """Export a keras.applications constructor (weights=None) with random weights, as export() does."""
    # input_tensor with a fixed name: the default input is auto-named (keras_tensor_NNN), a per-process counter,
    # and that name becomes the signature's input key.
    image = keras.Input(input_shape, name="image")
    export(application(input_tensor=image, weights=None, **kwargs), input_shape, seed, export_dir)
