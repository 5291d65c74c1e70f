"""`inception_block`: one Inception (GoogLeNet) block as a tf.Module.

Four branches read the same NHWC input; three of them start with a 1x1 conv on it, which is the TASO/TENSAT
"merge convs sharing an input" opportunity. Every conv is Conv2D+BiasAdd+Relu; the branches meet in ConcatV2
on the channel axis.
"""
import tensorflow as tf

from tensat_tf.zoo._common import he_normal, prepare_export_dir, rng, small

SEED = 404
H = W = 16
C = 32


class ConvRelu(tf.Module):
    def __init__(self, r, k, cin, cout, name):
        super().__init__(name=name)
        self.w = tf.Variable(he_normal(r, (k, k, cin, cout), k * k * cin), name="kernel")
        self.b = tf.Variable(small(r, (cout,)), name="bias")

    def __call__(self, x):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, self.w, 1, "SAME"), self.b))


class InceptionBlock(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="inception_block")
        r = rng(seed)
        self.b1 = ConvRelu(r, 1, C, 24, "branch1x1")
        self.b3_reduce = ConvRelu(r, 1, C, 16, "branch3x3_reduce")
        self.b3 = ConvRelu(r, 3, 16, 32, "branch3x3")
        self.b5_reduce = ConvRelu(r, 1, C, 8, "branch5x5_reduce")
        self.b5 = ConvRelu(r, 5, 8, 16, "branch5x5")
        self.pool_proj = ConvRelu(r, 1, C, 16, "branch_pool")

    @tf.function(input_signature=[tf.TensorSpec([None, H, W, C], tf.float32, name="image")])
    def serve(self, image):
        pooled = tf.nn.max_pool2d(image, 3, 1, "SAME")
        branches = [
            self.b1(image),
            self.b3(self.b3_reduce(image)),
            self.b5(self.b5_reduce(image)),
            self.pool_proj(pooled),
        ]
        return {"features": tf.concat(branches, axis=3)}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = InceptionBlock(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
