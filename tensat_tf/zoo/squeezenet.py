"""`squeezenet`: SqueezeNet 1.1 in raw TF ops (tf.Module), NHWC 224x224x3, as in the TASO/TENSAT benchmarks.

Torchvision's squeezenet1_1 layout: 3x3/2 conv 64, then 8 fire modules (squeeze 1x1 -> expand 1x1 | expand 3x3,
ConcatV2 on channels) with 3x3/2 max pools after the stem and fires 2 and 4, then a 1x1 conv to 1000 classes,
Relu and global average pooling ("logits"). The two expand convs read the same squeezed tensor: TENSAT's "merge
convs sharing an input" case, where it finds its largest speedups. VALID padding reproduces torchvision's
ceil-mode pools here (111 -> 55 -> 27 -> 13). Every conv is Conv2D + BiasAdd + Relu; 1.2 M parameters.
"""
import tensorflow as tf

from tensat_tf.zoo._common import prepare_export_dir, rng
from tensat_tf.zoo._layers import Conv, global_avg_pool

SEED = 1111
SIZE = 224
CLASSES = 1000
# (squeeze, expand) channels of fire modules 2..9; a max pool follows the stem and fires 3 and 5 (indices 1, 3)
FIRES = [(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256)]
POOL_AFTER = {1, 3}


class Fire(tf.Module):
    def __init__(self, r, cin, squeeze, expand, name):
        super().__init__(name=name)
        self.squeeze = Conv(r, 1, cin, squeeze, "squeeze1x1")
        self.expand1 = Conv(r, 1, squeeze, expand, "expand1x1")
        self.expand3 = Conv(r, 3, squeeze, expand, "expand3x3")

    def __call__(self, x):
        s = self.squeeze(x)
        return tf.concat([self.expand1(s), self.expand3(s)], axis=3)


def max_pool(x):
    return tf.nn.max_pool2d(x, 3, 2, "VALID")


class SqueezeNet(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="squeezenet")
        r = rng(seed)
        self.stem = Conv(r, 3, 3, 64, "conv1", stride=2, padding="VALID")
        self.fires = []
        cin = 64
        for i, (squeeze, expand) in enumerate(FIRES):
            self.fires.append(Fire(r, cin, squeeze, expand, f"fire{i + 2}"))
            cin = 2 * expand
        self.classifier = Conv(r, 1, cin, CLASSES, "conv10")

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, name="image")])
    def serve(self, image):
        x = max_pool(self.stem(image))
        for i, fire in enumerate(self.fires):
            x = fire(x)
            if i in POOL_AFTER:
                x = max_pool(x)
        return {"logits": global_avg_pool(self.classifier(x))}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = SqueezeNet(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
