"""Raw-TF layers (tf.Module) shared by the zoo's hand-written models; weights drawn from a seeded RandomState.

Every conv and dense layer carries a non-zero bias (a BatchNorm folded for inference), so BiasAdd stays in the
frozen graph for the rewrites to see, as in inception_block.
"""
import tensorflow as tf

from tensat_tf.zoo._common import he_normal, small


class Dense(tf.Module):
    def __init__(self, r, fan_in, fan_out, name, gain=1.0):
        super().__init__(name=name)
        self.w = tf.Variable(he_normal(r, (fan_in, fan_out), fan_in, gain), name="kernel")
        self.b = tf.Variable(small(r, (fan_out,)), name="bias")

    def __call__(self, x2d):
        return tf.nn.bias_add(tf.matmul(x2d, self.w), self.b)


class Conv(tf.Module):
    """Conv2D + BiasAdd (+ Relu). groups > 1 is a grouped conv: the filter's in-channels are cin // groups, which
    tf.nn.conv2d runs as one Conv2D op (TF 2.21 runs that on CPU too, with or without oneDNN).

    gain defaults to 2 (He) before a Relu and 1 otherwise.
    """

    def __init__(self, r, k, cin, cout, name, stride=1, groups=1, relu=True, padding="SAME", gain=None):
        super().__init__(name=name)
        assert cin % groups == 0 and cout % groups == 0, (cin, cout, groups)
        fan_in = k * k * cin // groups
        gain = (2.0 if relu else 1.0) if gain is None else gain
        self.w = tf.Variable(he_normal(r, (k, k, cin // groups, cout), fan_in, gain), name="kernel")
        self.b = tf.Variable(small(r, (cout,)), name="bias")
        self.stride, self.relu, self.padding = stride, relu, padding

    def __call__(self, x):
        y = tf.nn.bias_add(tf.nn.conv2d(x, self.w, self.stride, self.padding), self.b)
        return tf.nn.relu(y) if self.relu else y


class SeparableConv(tf.Module):
    """Depthwise k x k (DepthwiseConv2dNative, multiplier 1, no bias) then a pointwise 1x1 Conv2D + BiasAdd."""

    def __init__(self, r, k, cin, cout, name, stride=1, relu=False):
        super().__init__(name=name)
        self.depthwise = tf.Variable(he_normal(r, (k, k, cin, 1), k * k, 1.0), name="depthwise_kernel")
        self.pointwise = Conv(r, 1, cin, cout, "pointwise", relu=relu)
        self.stride = stride

    def __call__(self, x):
        strides = [1, self.stride, self.stride, 1]
        return self.pointwise(tf.nn.depthwise_conv2d(x, self.depthwise, strides, "SAME"))


def global_avg_pool(x):
    return tf.reduce_mean(x, axis=[1, 2])
