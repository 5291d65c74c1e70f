"""`resnext50`: ResNeXt-50 (32x4d) in raw TF ops (tf.Module), NHWC 224x224x3, as in the TASO/TENSAT benchmarks.

Stem 7x7/2 conv + 3x3/2 max pool, then bottleneck blocks 3/4/6/3 of widths 128/256/512/1024 (32 groups of 4..32
channels) and outputs 256/512/1024/2048: 1x1 conv, grouped 3x3 conv (stride 2 in the first block of stages 2-4),
1x1 conv, plus the shortcut (a 1x1 projection conv in each stage's first block), AddV2 and Relu. The grouped conv
is one Conv2D whose filter has width // 32 in-channels. Each conv is Conv2D + BiasAdd (BatchNorm folded, as TASO's
graph has no BN), followed by Relu where the block has one. TASO's graph ends at the last block; a GAP + dense
1000-way head ("logits", no softmax) is added here. ~25 M parameters, ~100 MB on disk.
"""
import tensorflow as tf

from tensat_tf.zoo._common import prepare_export_dir, rng
from tensat_tf.zoo._layers import Conv, Dense, global_avg_pool

SEED = 1010
SIZE = 224
GROUPS = 32
STAGES = [(3, 128, 256), (4, 256, 512), (6, 512, 1024), (3, 1024, 2048)]  # (blocks, width, out channels)
CLASSES = 1000
# Gain of a block's last conv: the residual sum grows by about the branch's variance per block; a small branch
# keeps the 16 blocks' output O(1) without BatchNorm.
BRANCH_GAIN = 0.25


class Block(tf.Module):
    def __init__(self, r, cin, width, cout, stride, name):
        super().__init__(name=name)
        self.reduce = Conv(r, 1, cin, width, "conv1")
        self.grouped = Conv(r, 3, width, width, "conv2", stride=stride, groups=GROUPS)
        self.expand = Conv(r, 1, width, cout, "conv3", relu=False, gain=BRANCH_GAIN)
        self.project = Conv(r, 1, cin, cout, "shortcut", stride=stride, relu=False) \
            if stride != 1 or cin != cout else None

    def __call__(self, x):
        shortcut = self.project(x) if self.project else x
        return tf.nn.relu(shortcut + self.expand(self.grouped(self.reduce(x))))


class ResNeXt50(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="resnext50")
        r = rng(seed)
        self.stem = Conv(r, 7, 3, 64, "stem", stride=2)
        self.blocks = []
        cin = 64
        for stage, (blocks, width, cout) in enumerate(STAGES):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                self.blocks.append(Block(r, cin, width, cout, stride, f"stage{stage + 1}_block{i + 1}"))
                cin = cout
        self.head = Dense(r, cin, CLASSES, "logits")

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, name="image")])
    def serve(self, image):
        x = tf.nn.max_pool2d(self.stem(image), 3, 2, "SAME")
        for block in self.blocks:
            x = block(x)
        return {"logits": self.head(global_avg_pool(x))}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = ResNeXt50(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
