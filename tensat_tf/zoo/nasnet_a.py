"""`nasnet_a`: NasNet-A as built by TASO's nasnet_a.py example (the TENSAT benchmark), in raw TF ops, NHWC.

The cell wiring is TASO's: each cell first squeezes its two inputs (the previous two cells' outputs) to C channels
with 1x1 conv + Relu; a normal cell adds 5 pairs of {separable 3x3 conv, 3x3 avg pool, identity} and concatenates
the sums (5C channels); a reduction cell does the same with stride-2 separable 7x7/5x5 convs and 3x3 max/avg pools.
A separable conv is DepthwiseConv2dNative (multiplier 1) + 1x1 Conv2D + BiasAdd (TASO: a grouped conv with one
channel per group + a 1x1 conv). TASO's duplicate ops are kept (normal cells add two identical avg pools of the
same input, and two separable convs of the same input). Stem: 7x7/2 conv 64 + Relu, 3x3/2 max pool; each of the
3 stages is NORMAL_CELLS normal cells then a reduction cell that doubles C; a GAP + dense head gives "logits".

Reduced in size only: C starts at 64 instead of TASO's 128 and the input is 160x160 instead of 224x224; the graph
(18 cells: 90 separable convs, 127 Conv2D, 51 avg pools, 18 concats) is TASO's. At TASO's size (45 M parameters,
181 MB) `tensat_tf convert` took 165 s on 2 CPU cores, most of it running the model; reduced (12.7 M, 52 MB) 35 s.
"""
import tensorflow as tf

from tensat_tf.zoo._common import prepare_export_dir, rng
from tensat_tf.zoo._layers import Conv, Dense, SeparableConv, global_avg_pool

SEED = 1212
SIZE = 160
STAGES, NORMAL_CELLS, BASE_CHANNELS = 3, 5, 64
CLASSES = 1000


def avg_pool(x, stride=1):
    return tf.nn.avg_pool2d(x, 3, stride, "SAME")


def max_pool(x, stride=2):
    return tf.nn.max_pool2d(x, 3, stride, "SAME")


class Cell(tf.Module):
    """The two input squeezes shared by both cell kinds (TASO: squeeze(cur) and fit(cur, prev); the inputs of a
    cell always have the same size in TASO's network, so fit is a squeeze too)."""

    def __init__(self, r, prev_c, cur_c, c, name):
        super().__init__(name=name)
        self.c = c
        # gain 1, not He's 2: every cell output is a sum of two branches, so halving the squeezed inputs' second
        # moment keeps the activations O(1) through the 18 cells (with gain 2 they grow ~2x per cell)
        self.squeeze_cur = Conv(r, 1, cur_c, c, "squeeze_cur", gain=1.0)
        self.squeeze_prev = Conv(r, 1, prev_c, c, "squeeze_prev", gain=1.0)

    def sep(self, r, k, name, stride=1):
        return SeparableConv(r, k, self.c, self.c, name, stride=stride)


class NormalCell(Cell):
    def __init__(self, r, prev_c, cur_c, c, name):
        super().__init__(r, prev_c, cur_c, c, name)
        self.seps = [self.sep(r, 3, f"sep3x3_{i}") for i in range(5)]

    def __call__(self, prev, cur):
        cur, prev = self.squeeze_cur(cur), self.squeeze_prev(prev)
        s = self.seps
        outputs = [
            s[0](cur) + cur,
            s[1](prev) + s[2](cur),
            avg_pool(cur) + prev,
            avg_pool(prev) + avg_pool(prev),
            s[3](prev) + s[4](prev),
        ]
        return tf.concat(outputs, axis=3)


class ReductionCell(Cell):
    def __init__(self, r, prev_c, cur_c, c, name):
        super().__init__(r, prev_c, cur_c, c, name)
        self.prev7_a = self.sep(r, 7, "prev_sep7x7_a", stride=2)
        self.cur5 = self.sep(r, 5, "cur_sep5x5", stride=2)
        self.prev7_b = self.sep(r, 7, "prev_sep7x7_b", stride=2)
        self.prev5 = self.sep(r, 5, "prev_sep5x5", stride=2)
        self.out0_3 = self.sep(r, 3, "sep3x3")

    def __call__(self, prev, cur):
        cur, prev = self.squeeze_cur(cur), self.squeeze_prev(prev)
        out0 = self.prev7_a(prev) + self.cur5(cur)
        out1 = max_pool(cur) + self.prev7_b(prev)
        out2 = avg_pool(cur, 2) + self.prev5(prev)
        out3 = max_pool(cur) + self.out0_3(out0)
        out4 = avg_pool(out0) + out1
        return tf.concat([out0, out1, out2, out3, out4], axis=3)


class NasNetA(tf.Module):
    def __init__(self, seed: int):
        super().__init__(name="nasnet_a")
        r = rng(seed)
        self.stem = Conv(r, 7, 3, 64, "stem", stride=2)
        self.cells = []
        prev_c = cur_c = 64
        c = BASE_CHANNELS
        for stage in range(STAGES):
            for i in range(NORMAL_CELLS):
                self.cells.append(NormalCell(r, prev_c, cur_c, c, f"stage{stage + 1}_normal{i + 1}"))
                prev_c, cur_c = cur_c, 5 * c
            c *= 2
            self.cells.append(ReductionCell(r, prev_c, cur_c, c, f"stage{stage + 1}_reduction"))
            prev_c = cur_c = 5 * c  # the next stage's first cell reads the reduction output twice
        self.head = Dense(r, cur_c, CLASSES, "logits")

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, name="image")])
    def serve(self, image):
        x = max_pool(self.stem(image))
        prev = cur = x
        for cell in self.cells:
            out = cell(prev, cur)
            # after a reduction both inputs of the next cell are its output, as in TASO's loop
            prev, cur = (out, out) if isinstance(cell, ReductionCell) else (cur, out)
        return {"logits": self.head(global_avg_pool(cur))}


def build(export_dir: str) -> None:
    prepare_export_dir(export_dir)
    m = NasNetA(SEED)
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.serve.get_concrete_function()})
