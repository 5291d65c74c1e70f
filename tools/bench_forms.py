"""Does a rewrite pay before a rule is written? Alternative forms of the same computation in TF public ops, timed
side by side on this machine's TF runtime as a served call runs them (a TF1 session, Grappler and oneDNN's rewrites
on, one intra-op and one inter-op thread, batch 1, weights of MIN_VARIABLE_ELEMENTS or more read from variables as
the output SavedModel reads them).

    python tools/bench_forms.py [--experiments=residual_addn,layer_norm,...] [--blocks=16]

Experiments (each a chain of a few copies of the pattern, so that it outweighs the call's fixed cost):
  residual_addn   conv + bias + residual add (+ Relu): AddV2, or AddN, which TF's remapper fuses into the conv
                  (`_MklNativeFusedConv2D` with an Add post-op); the residual is the conv's own input ("own") or the
                  block's input with the conv on another tensor ("block"); and a Dense's MatMul + bias + residual
  layer_norm      a layer norm over the last axis, centred first (rules F25/F26's form) or as FusedBatchNormV3 in
                  training mode on the rows as NCHW channels (Keras 2's form)
  se_fc           a squeeze-excite block's two one-pixel FCs: BatchMatMulV2 on [b, 1, 1, C] (rule F29's form),
                  Reshape + MatMul + Reshape, or a broadcast Mul + Sum; weights constant or variables
  se_block        a whole squeeze-excite block as Keras writes it (global mean without its axes, Reshape to
                  [b, 1, 1, C], two 1x1 convs with bias, the gate multiplied into the block's input): the FCs as
                  BatchMatMulV2 on [b, 1, 1, C] (rule F29's form), as 2-D MatMuls on the mean's [b, C] rows with
                  the Reshape moved after them (bias fused into the MatMul), or as 2-D MatMuls each reshaped back
                  to [b, 1, 1, K] before its bias (rule F38's form: a plain MatMul, the bias a separate kernel); ReLU
                  + hard sigmoid (MobileNetV3) or swish + sigmoid (EfficientNet)
  conv1x1         a 1x1 conv + bias + ReLU6 on a small image, as the conv (bias and ReLU6 fused) or as rule F39's
                  MatMul of the pixel rows, reshaped back before the bias
  matmul_vs_conv1x1 x [rows, K] by a variable [K, N] + bias + Relu, 1-64 rows, the weights of all copies in the L3
                  cache or beyond it: a 1x1 Conv2D of a [1, 1, rows, K] image, or a MatMul (both fused with their bias
                  and Relu; cost/devices.py streamed_matmul_*)
  sibling_conv1x1 an Inception branch head, 1x1 convs + bias + Relu side by side on one input at Inception-ResNet-v2's
                  shapes: a conv each, one conv of the joined filters + SplitV (rules MERGE-CONV-BIAS-*), a MatMul
                  each (F39), or one MatMul + SplitV
  preact_bias     a per-channel bias before Relu and a 1x1 conv (DenseNet's, ResNetV2's pre-activation): AddV2 of a
                  [1, 1, 1, C] constant or BiasAdd
  small_m         x [M, K] by a variable weight [K, N] at small M: MatMul, BatchMatMulV2, Einsum, MatMul(transpose_b)
  batch_matmul_dense  x [1, t, K] (batch and sequence dynamic) by a variable [K, N]: BatchMatMulV2 (Grappler's
                  EinsumDense) or Keras' Dense form, Reshape to rows, MatMul, Reshape back (rules/einsum.rules E10)
  einsum_dense    MultiHeadAttention's projections as EinsumDense writes them (Einsum + bias) or as Dense layers
                  (rules/einsum.rules E11/E12/E14)
  position_gather learned positions: GatherV2 of Range(0, n) behind Keras' negative-index SelectV2, or a Slice
  conv1d          Keras' Conv1D + batch norm + ReLU: the scale, bias and ReLU after the Squeeze ("keras"), inside it
                  with the scale in the filter ("inside", rules/squeeze.rules), or every layer in 4-D ("4d": one
                  layer's Squeeze and the next one's ExpandDims cancelled too)
  attention_scores MultiHeadAttention's scores q [b, t, n, h] . k [b, s, n, h] -> [b, n, t, s] as Keras' TF backend
                  writes `aecd,abcd->acbe` outside dot_product_attention (dropout > 0): Transpose(k) @ Transpose(q)
                  then a Transpose of the scores; as rules/einsum.rules E16/E17 leave it (both operands transposed to
                  heads-first, adj_y, no copy of the scores); and as an Einsum of that equation (older exports)
  grouped_conv    a grouped 3x3 conv + bias + ReLU (ResNeXt's cardinality 32, RegNet's group width 8) as Keras 3 runs
                  it on CPU (a call of an XLA-compiled function, the bias and ReLU outside it), as one native grouped
                  Conv2D (passes/grouped_conv.py inlines the call where oneDNN runs it; bias and ReLU fused), or as a
                  Split, one Conv2D per group and a ConcatV2
  dilated         a causal dilated Conv1D (+ bias + ReLU + residual) as TF's convolution() runs it
                  (SpaceToBatchND -> Conv2D -> BatchToSpaceND, paddings from the dynamic length) or as one Conv2D with
                  `dilations` (rules/dilation.rules)

Each row: reference / candidate, the median of per-block ratios of block medians with its 95 % interval (> 1: the
candidate is faster; tensat_tf/speedup.py's paired decision, blocks interleaved with the order rotated,
tensat_tf/latency.py Timings), the candidate's kernels as TF ran them (traced), and the largest difference of its
output from the reference's relative to the reference's largest magnitude.
"""
from __future__ import annotations

import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# one-thread sessions in a process whose first device had TF's default pools spread kernels over both cores
# (tensat_tf/cost/measured.py WORKER_ENV)
os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

EXPERIMENTS = ("residual_addn", "layer_norm", "se_fc", "se_block", "conv1x1", "matmul_vs_conv1x1", "sibling_conv1x1",
               "preact_bias", "small_m", "batch_matmul_dense", "einsum_dense", "position_gather", "conv1d", "dilated",
               "attention_scores", "grouped_conv")
flags.DEFINE_list("experiments", list(EXPERIMENTS), f"Any of {', '.join(EXPERIMENTS)}.")
flags.DEFINE_integer("blocks", 16, "Paired blocks per comparison.")
flags.DEFINE_integer("runs", 20, "Session.run calls of each form per block (the block's median is compared).")
FLAGS = flags.FLAGS

COPIES = 6          # copies of the pattern chained in one graph
# kernels every form runs, left out of the kernel column
PLUMBING = {"Const", "_SOURCE", "_Arg", "_Retval", "VarHandleOp", "ReadVariableOp", "Identity", "NoOp"}


class Forms:
    """One graph holding every form of one experiment on a shared input; forms[name] is its fetch. The input's first
    `dynamic` dims are unknown in the graph, as a signature's batch (and sequence) are."""

    def __init__(self, tf, shape: tuple, dynamic: int = 1, dtype=None):
        self.tf = tf
        self.graph = tf.Graph()
        self.forms: dict = {}
        self.rng = np.random.default_rng(0)
        with self.graph.as_default():
            self.x = tf.compat.v1.placeholder(dtype or tf.float32, [None] * dynamic + list(shape[dynamic:]))
        self.feed = {self.x: self.rng.random(shape).astype(np.float32) if dtype is None
                     else np.zeros(shape, np.int32)}
        self._vars = 0

    def sum_forms(self, outputs: dict, axis: int) -> None:
        """Each form's several outputs (form -> list of tensors) reduced over `axis` and added into its one fetch."""
        for form, ys in outputs.items():
            self.forms[form] = self.tf.math.add_n([self.tf.reduce_sum(y, axis) for y in ys])

    def weight(self, shape: tuple, scale: float = 0.1, variable: bool = None, value: np.ndarray = None):
        """A weight as the output SavedModel holds it: a variable from MIN_VARIABLE_ELEMENTS elements, else a Const
        (`variable` forces either); random unless `value` is given."""
        from tensat_tf.options import MIN_VARIABLE_ELEMENTS
        if value is None:
            value = (scale * self.rng.standard_normal(shape)).astype(np.float32)
        if variable is None:
            variable = value.size >= MIN_VARIABLE_ELEMENTS
        if not variable:
            return self.tf.constant(value)
        self._vars += 1
        return self.tf.compat.v1.get_variable(f"w{self._vars}", initializer=value).read_value()


def _session(tf, forms: Forms):
    cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    s = tf.compat.v1.Session(graph=forms.graph, config=cfg)
    with forms.graph.as_default():
        s.run(tf.compat.v1.global_variables_initializer())
    return s


def _kernels(tf, s, fetch, feed) -> str:
    from tensat_tf.latency import traced_kernels
    md = tf.compat.v1.RunMetadata()
    s.run(fetch, feed, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
          run_metadata=md)
    ran = collections.Counter(op for op, _ in traced_kernels(md) if op not in PLUMBING)
    return ", ".join(f"{op} {n}" for op, n in sorted(ran.items()))


def compare(tf, title: str, forms: Forms) -> list[str]:
    """Rows for every form against the first (the reference), all timed in the same blocks."""
    from tensat_tf import latency, speedup
    s = _session(tf, forms)
    names = list(forms.forms)
    outs = {n: s.run(forms.forms[n], forms.feed) for n in names}
    ref = outs[names[0]]
    scale = float(np.abs(ref).max()) or 1.0
    fns = [lambda f=forms.forms[n]: s.run(f, forms.feed) for n in names]
    latency.warm(fns, 5)
    timings = latency.Timings(len(fns))
    for i in range(FLAGS.blocks):
        timings.block(fns, FLAGS.runs, i)
    rows = [f"| {title} | {names[0]} (reference) | {np.median(timings.medians[0]):.3f} | | | "
            f"{_kernels(tf, s, forms.forms[names[0]], forms.feed)} | |"]
    for k, n in enumerate(names[1:], 1):
        d = speedup.compare(timings.medians[0], timings.medians[k])
        err = float(np.abs(outs[n] - ref).max()) / scale
        rows.append(f"| {title} | {names[0]} / {n} | {np.median(timings.medians[0]):.3f} | "
                    f"{np.median(timings.medians[k]):.3f} | {d.ratio:.3f} [{d.low:.3f}, {d.high:.3f}] {d.verdict} | "
                    f"{_kernels(tf, s, forms.forms[n], forms.feed)} | {err:.1e} |")
    s.close()
    return rows


def residual_addn(tf):
    rows = []
    for h, c in ((16, 64), (8, 256), (4, 512)):
        for where in ("own", "block"):
            for relu in (True, False):
                f = Forms(tf, (1, h, h, c))
                with f.graph.as_default():
                    ws = [(f.weight((3, 3, c, c), 0.05), f.weight((c,))) for _ in range(COPIES)]
                    for form in ("AddV2", "AddN"):
                        y = f.x
                        for w, b in ws:
                            z = y if where == "own" else tf.nn.relu(y * 1.5)
                            conv = tf.nn.bias_add(tf.nn.conv2d(z, w, 1, "SAME"), b)
                            y = conv + y if form == "AddV2" else tf.math.add_n([conv, y])
                            y = tf.nn.relu(y) if relu else y
                        f.forms[form] = y
                rows += compare(tf, f"conv3x3 {h}x{h}x{c} + bias + residual ({where})" + (" + Relu" if relu else ""),
                                f)
    for t, c in ((16, 64), (128, 256)):
        f = Forms(tf, (1, t, c), dynamic=2)
        with f.graph.as_default():
            ws = [(f.weight((c, c), 0.05), f.weight((c,))) for _ in range(COPIES)]
            for form in ("AddV2", "AddN"):
                y = f.x
                for w, b in ws:
                    mm = tf.reshape(tf.nn.bias_add(tf.linalg.matmul(tf.reshape(y, [-1, c]), w), b), tf.shape(y))
                    y = mm + y if form == "AddV2" else tf.math.add_n([mm, y])
                f.forms[form] = y
        rows += compare(tf, f"Dense [1, {t}, {c}] + bias + residual", f)
    return rows


def layer_norm(tf):
    rows = []
    for shape in ((1, 16, 64), (1, 128, 768), (1, 3136, 96)):
        c = shape[-1]
        f = Forms(tf, shape, dynamic=2)
        with f.graph.as_default():
            rows_n = tf.shape(f.x)[0] * tf.shape(f.x)[1]
            ones, zeros = tf.fill([rows_n], 1.0), tf.fill([rows_n], 0.0)
            for form in ("centred", "FusedBatchNormV3"):
                y = f.x
                for _ in range(COPIES):
                    if form == "centred":
                        m = tf.reduce_mean(y, -1, keepdims=True)
                        v = tf.reduce_mean(tf.math.squared_difference(y, m), -1, keepdims=True)
                        y = (y - m) * tf.math.rsqrt(v + 1e-6)
                    else:
                        o = tf.raw_ops.FusedBatchNormV3(
                            x=tf.reshape(y, [1, -1, c, 1]), scale=ones, offset=zeros, mean=tf.zeros([0]),
                            variance=tf.zeros([0]), epsilon=1e-6, data_format="NCHW", is_training=True)[0]
                        y = tf.reshape(o, tf.shape(y))
                    y = tf.nn.relu(y) * 1.01 + 0.1
                f.forms[form] = y
        rows += compare(tf, f"layer norm {list(shape)}", f)
    return rows


def se_fc(tf):
    rows = []
    for c, k in ((16, 8), (96, 24), (240, 64), (576, 144)):
        for variable in (False, True):
            f = Forms(tf, (1, 1, 1, c))
            with f.graph.as_default():
                ws = [(f.weight((c, k), variable=variable), f.weight((k,)), f.weight((k, c), variable=variable),
                       f.weight((c,))) for _ in range(COPIES)]
                for form in ("BatchMatMulV2", "MatMul", "Mul+Sum"):
                    y = f.x
                    for w1, b1, w2, b2 in ws:
                        if form == "BatchMatMulV2":
                            s = tf.nn.relu(tf.nn.bias_add(tf.linalg.matmul(y, w1), b1))
                            s = tf.nn.bias_add(tf.linalg.matmul(s, w2), b2)
                        elif form == "MatMul":
                            s = tf.nn.relu(tf.nn.bias_add(tf.linalg.matmul(tf.reshape(y, [-1, c]), w1), b1))
                            s = tf.reshape(tf.nn.bias_add(tf.linalg.matmul(s, w2), b2), [-1, 1, 1, c])
                        else:
                            s = tf.nn.relu(tf.nn.bias_add(tf.reduce_sum(tf.reshape(y, [-1, 1, 1, c, 1]) * w1, 3), b1))
                            s = tf.nn.bias_add(tf.reduce_sum(tf.reshape(s, [-1, 1, 1, k, 1]) * w2, 3), b2)
                        y = y * tf.sigmoid(s)
                    f.forms[form] = y
            rows += compare(tf, f"one-pixel FCs {c} -> {k} -> {c}, weights " + ("variables" if variable else "Const"),
                            f)
    return rows


def _pixel_matmul(tf, x, w):
    """A 1x1 conv of x by the [1, 1, C, K] filter w as one MatMul: x's pixels as rows of C by w as a [C, K] matrix."""
    c, k = w.shape[2], w.shape[3]
    return tf.linalg.matmul(tf.reshape(x, [-1, c]), tf.reshape(w, [c, k]))


def _matmul_bias_after_reshape(tf, x, w, b, shape):
    """Rules F38's / F39's form of a 1x1 conv: _pixel_matmul reshaped to `shape` before the bias, so that TF's
    remapper fuses nothing into the MatMul."""
    return tf.nn.bias_add(tf.reshape(_pixel_matmul(tf, x, w), shape), b)


def _conv1x1_bias(tf, x, w, b, shape, as_matmul: bool):
    """x by the 1x1 filter w plus the bias b: the conv (TF's remapper fuses the bias into it), or as_matmul, rule
    F39's MatMul form reshaped to `shape`."""
    return (_matmul_bias_after_reshape(tf, x, w, b, shape) if as_matmul
            else tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))


def se_block(tf):
    rows = []
    for h, c, k in ((8, 16, 8), (4, 96, 24), (4, 240, 64), (2, 576, 144)):
        for act in ("relu", "swish"):
            f = Forms(tf, (1, h, h, c))
            with f.graph.as_default():
                ws = [(f.weight((1, 1, c, k)), f.weight((k,)), f.weight((1, 1, k, c)), f.weight((c,)))
                      for _ in range(COPIES)]
                inner = tf.nn.relu if act == "relu" else tf.nn.silu
                gate = (lambda t: tf.nn.relu6(t + 3.0) * (1.0 / 6.0)) if act == "relu" else tf.sigmoid
                for form in ("Conv2D", "BatchMatMulV2", "MatMul", "MatMul, bias after reshape"):
                    y = f.x
                    for w1, b1, w2, b2 in ws:
                        m = tf.reduce_mean(y, [1, 2])
                        if form == "MatMul, bias after reshape":
                            s = inner(_matmul_bias_after_reshape(tf, m, w1, b1, [-1, 1, 1, k]))
                            s = gate(_matmul_bias_after_reshape(tf, s, w2, b2, [-1, 1, 1, c]))
                        elif form == "MatMul":
                            s = inner(tf.nn.bias_add(tf.linalg.matmul(m, tf.reshape(w1, [c, k])), b1))
                            s = tf.reshape(gate(tf.nn.bias_add(tf.linalg.matmul(s, tf.reshape(w2, [k, c])), b2)),
                                           [-1, 1, 1, c])
                        else:
                            m = tf.reshape(m, [-1, 1, 1, c])
                            if form == "Conv2D":
                                s = inner(tf.nn.bias_add(tf.nn.conv2d(m, w1, 1, "VALID"), b1))
                                s = gate(tf.nn.bias_add(tf.nn.conv2d(s, w2, 1, "VALID"), b2))
                            else:
                                s = inner(tf.nn.bias_add(tf.linalg.matmul(m, tf.reshape(w1, [c, k])), b1))
                                s = gate(tf.nn.bias_add(tf.linalg.matmul(s, tf.reshape(w2, [k, c])), b2))
                        y = y * s
                    f.forms[form] = y
            rows += compare(tf, f"squeeze-excite {h}x{h}x{c} -> {k} -> {c}, {act}", f)
    return rows


def conv1x1(tf):
    rows = []
    for h, c, k in ((2, 512, 1024), (4, 256, 512), (4, 512, 512), (8, 128, 256), (16, 64, 128), (32, 32, 64),
                    (28, 128, 512), (56, 64, 256)):
        f = Forms(tf, (1, h, h, c))
        with f.graph.as_default():
            ws = [(f.weight((1, 1, c, k), 0.05), f.weight((k,))) for _ in range(COPIES)]
            outputs = {}
            for form in ("Conv2D", "MatMul, bias after reshape", "MatMul + bias + ReLU6, then reshape"):
                ys = []
                for i, (w, b) in enumerate(ws):
                    x = f.x + float(i)      # a distinct input per copy (k != c: the copies read the input side by side)
                    if form.endswith("then reshape"):       # the remapper fuses all three (no rule writes it)
                        ys.append(tf.reshape(tf.nn.relu6(tf.nn.bias_add(_pixel_matmul(tf, x, w), b)), [-1, h, h, k]))
                    else:
                        ys.append(tf.nn.relu6(_conv1x1_bias(tf, x, w, b, [-1, h, h, k], form != "Conv2D")))
                outputs[form] = ys
            f.sum_forms(outputs, 3)
        rows += compare(tf, f"1x1 conv + bias + ReLU6 {h}x{h}x{c} -> {k}", f)
    return rows


def matmul_vs_conv1x1(tf):
    """The two forms share each copy's weight: COPIES of 1024 x 2048 (48 MB) outgrow the 32 MB L3 cache, of 512 x
    512 (6 MB) fit it; 48 copies of 512 x 512 or 1024 x 256 (48 MB) outgrow it again, as a large model's do."""
    rows = []
    for k, n, ms, copies in ((1024, 2048, (1, 2, 4, 8, 16), COPIES), (1024, 1024, (4, 16, 64), COPIES),
                             (512, 512, (1, 2, 4, 8, 16), COPIES), (1024, 512, (4,), COPIES),
                             (512, 1024, (4,), COPIES), (2048, 256, (4,), COPIES),
                             (512, 512, (4, 16), 48), (1024, 256, (4, 16), 48), (512, 128, (64,), 48)):
        for m in ms:
            f = Forms(tf, (1, m, k))
            with f.graph.as_default():
                ws = [(f.weight((k, n), 0.05), f.weight((n,))) for _ in range(copies)]
                outputs = {}
                for form in ("Conv2D", "MatMul"):
                    ys = []
                    for i, (w, b) in enumerate(ws):
                        x = f.x + float(i)
                        if form == "Conv2D":
                            y = tf.nn.conv2d(tf.expand_dims(x, 1), tf.reshape(w, [1, 1, k, n]), 1, "SAME")
                        else:
                            y = tf.linalg.matmul(tf.reshape(x, [-1, k]), w)
                        ys.append(tf.reshape(tf.nn.relu(tf.nn.bias_add(y, b)), [-1, m, n]))
                    outputs[form] = ys
                f.sum_forms(outputs, 2)
            rows += compare(tf, f"{m} rows x {k} -> {n} + bias + Relu, {copies} copies", f)
    return rows


def sibling_conv1x1(tf):
    """An Inception branch head: 1x1 convs + bias + Relu side by side on one input, at Inception-ResNet-v2's shapes
    (75x75 images: block35, block17, block8). Rules MERGE-CONV-BIAS-* write one conv of the joined filters and a
    SplitV, F39 a MatMul each; the joined filters are one weight, as the rewritten graph holds them."""
    rows = []
    for h, c, ks in ((7, 320, (32, 32, 32)), (3, 1088, (192, 128)), (1, 2080, (192, 192))):
        f = Forms(tf, (1, h, h, c))
        with f.graph.as_default():
            values = [[((0.05 * f.rng.standard_normal((1, 1, c, k))).astype(np.float32),
                        (0.1 * f.rng.standard_normal(k)).astype(np.float32)) for k in ks] for _ in range(COPIES)]
            outputs = {}
            for form in ("Conv2D each", "one Conv2D + SplitV", "MatMul each, bias after reshape",
                         "one MatMul, bias after reshape + SplitV"):
                ys, as_matmul = [], "MatMul" in form
                for i, heads in enumerate(values):
                    x = f.x + float(i)      # a distinct input per copy
                    if form.startswith("one"):
                        heads = [(np.concatenate([w for w, _ in heads], 3), np.concatenate([b for _, b in heads]))]
                    outs = [tf.nn.relu(_conv1x1_bias(tf, x, f.weight(None, value=w), f.weight(None, value=b),
                                                     [-1, h, h, w.shape[3]], as_matmul)) for w, b in heads]
                    ys += tf.split(outs[0], list(ks), 3) if form.startswith("one") else outs
                outputs[form] = ys
            f.sum_forms(outputs, 3)
        rows += compare(tf, f"sibling 1x1 convs + bias + Relu {h}x{h}x{c} -> {'+'.join(map(str, ks))}", f)
    return rows


def preact_bias(tf):
    rows = []
    for h, c in ((16, 128), (8, 512), (4, 1024)):
        f = Forms(tf, (1, h, h, c))
        with f.graph.as_default():
            ws = [(f.weight((1, 1, c, 32), 0.05), f.weight((c,), variable=False)) for _ in range(COPIES)]
            for form in ("AddV2", "BiasAdd"):
                y, outs = f.x, []
                for w, b in ws:
                    z = y + tf.reshape(b, [1, 1, 1, c]) if form == "AddV2" else tf.nn.bias_add(y, b)
                    outs.append(tf.nn.conv2d(tf.nn.relu(z), w, 1, "SAME"))
                    y = tf.concat([y[..., 32:], outs[-1]], -1)        # DenseNet: the new features join the input
                f.forms[form] = tf.math.add_n(outs)
        rows += compare(tf, f"bias [1,1,1,C] + Relu + conv1x1, {h}x{h}x{c}", f)
    return rows


def small_m(tf):
    rows = []
    for m, k, n in ((4, 768, 3072), (16, 384, 1536), (64, 192, 768), (17, 64, 256)):
        f = Forms(tf, (m, k))
        with f.graph.as_default():
            values = [(0.05 * f.rng.standard_normal((k, n))).astype(np.float32) for _ in range(4)]
            ws = [f.weight((k, n), variable=True, value=v) for v in values]
            wts = [f.weight((n, k), variable=True, value=np.ascontiguousarray(v.T)) for v in values]
            f.sum_forms({
                "MatMul": [tf.linalg.matmul(f.x, w) for w in ws],
                "BatchMatMulV2": [tf.raw_ops.BatchMatMulV2(x=f.x[None], y=w)[0] for w in ws],
                "Einsum": [tf.einsum("mk,kn->mn", f.x, w) for w in ws],
                "MatMul(transpose_b)": [tf.linalg.matmul(f.x, w, transpose_b=True) for w in wts],
            }, 0)
        rows += compare(tf, f"[{m}, {k}] x variable [{k}, {n}]", f)
    return rows


def batch_matmul_dense(tf):
    rows = []
    for m in (16, 64):
        for k in (64, 256, 1024):
            for n in (256, 1024, 4096):
                if k * n > 4 * 2 ** 20:
                    continue
                f = Forms(tf, (1, m, k), dynamic=2)
                with f.graph.as_default():
                    ws = [f.weight((k, n), 0.05, variable=True) for _ in range(4)]
                    lead = tf.shape(f.x)[:2]      # one Shape for every layer, as the emitter builds ReshapeS's target
                    f.sum_forms({"BatchMatMulV2": [tf.linalg.matmul(f.x, w) for w in ws],
                                 "Dense": [tf.reshape(tf.linalg.matmul(tf.reshape(f.x, [-1, k]), w),
                                                      tf.concat([lead, [n]], 0)) for w in ws]}, 1)
                rows += compare(tf, f"[1, {m}, {k}] x variable [{k}, {n}]", f)
    return rows


def einsum_dense(tf):
    rows = []
    for t, c, heads in ((16, 64, 4), (32, 256, 8), (128, 768, 12)):
        hd = c // heads
        f = Forms(tf, (1, t, c), dynamic=2)
        with f.graph.as_default():
            # each weight twice, the same values: as the Einsum reads it, and as a [C, N] matrix (what a rewrite
            # would store, reshaped once when written)
            values = [((0.05 * f.rng.standard_normal((c, 3 * heads, hd))).astype(np.float32),
                       (0.1 * f.rng.standard_normal((3 * heads, hd))).astype(np.float32),
                       (0.05 * f.rng.standard_normal((heads, hd, c))).astype(np.float32),
                       (0.1 * f.rng.standard_normal(c)).astype(np.float32)) for _ in range(COPIES)]
            qkv = {"Einsum": [(f.weight(None, value=wq), f.weight(None, value=bq), f.weight(None, value=wo),
                               f.weight(None, value=bo)) for wq, bq, wo, bo in values],
                   "MatMul": [(f.weight(None, value=wq.reshape(c, -1)), f.weight(None, value=bq.reshape(-1)),
                               f.weight(None, value=wo.reshape(c, c)), f.weight(None, value=bo))
                              for wq, bq, wo, bo in values]}
            lead = tf.shape(f.x)[:2]      # one Shape for every layer, as passes/shapes.py leaves a model's
            for form in ("Einsum", "MatMul"):
                y = f.x
                for wq, bq, wo, bo in qkv[form]:
                    if form == "Einsum":       # Keras' EinsumDense: the merged Q/K/V projection, the output one
                        p = tf.einsum("abc,cde->abde", y, wq) + bq
                        q, k, v = tf.split(p, 3, axis=2)
                        o = tf.einsum("abcd,cde->abe", q * k + v, wo) + bo
                    else:                      # Keras' Dense on [batch, seq, C]: Reshape, MatMul, Reshape to Shape
                        p = tf.nn.bias_add(tf.linalg.matmul(tf.reshape(y, [-1, c]), wq), bq)
                        q, k, v = tf.split(tf.reshape(p, tf.concat([lead, [3 * heads, hd]], 0)), 3, axis=2)
                        a = tf.reshape(q * k + v, [-1, c])
                        o = tf.reshape(tf.nn.bias_add(tf.linalg.matmul(a, wo), bo),
                                       tf.concat([lead, [c]], 0))
                    y = y + o
                f.forms[form] = y
        rows += compare(tf, f"EinsumDense projections [1, {t}, {c}], {heads} heads", f)
    return rows


def position_gather(tf):
    rows = []
    for vocab, d in ((128, 64), (1024, 256)):
        f = Forms(tf, (1, 16), dynamic=2, dtype=tf.int32)
        with f.graph.as_default():
            tables = [f.weight((vocab, d), variable=True) for _ in range(COPIES)]
            n = tf.shape(f.x)[1]
            for form in ("GatherV2", "Slice"):
                outs = []
                for t in tables:
                    if form == "GatherV2":
                        pos = tf.range(n)
                        pos = tf.where(pos < 0, pos + vocab, pos)     # Keras 3's take: negative ids wrap
                        outs.append(tf.gather(t, pos))
                    else:
                        outs.append(tf.slice(t, [0, 0], tf.stack([n, -1])))
                f.forms[form] = tf.math.add_n(outs)
        rows += compare(tf, f"positions of a [{vocab}, {d}] table, 16 tokens", f)
    return rows


def conv1d(tf):
    rows = []
    for t, c, k in ((32, 32, 3), (128, 64, 3), (256, 128, 5), (64, 256, 3)):
        f = Forms(tf, (1, t, c), dynamic=2)
        with f.graph.as_default():
            layers = []
            for _ in range(COPIES):
                w = (0.1 * f.rng.standard_normal((1, k, c, c))).astype(np.float32)
                scale = (1 + 0.1 * f.rng.standard_normal((c,))).astype(np.float32)
                layers.append((f.weight(None, value=w), f.weight(None, value=scale), f.weight((c,)),
                               f.weight(None, value=w * scale)))
            for form in ("keras", "inside", "4d"):
                y = tf.expand_dims(f.x, 1) if form == "4d" else f.x
                for w, scale, b, folded in layers:
                    if form == "keras":
                        z = tf.squeeze(tf.nn.conv2d(tf.expand_dims(y, 1), w, 1, "SAME"), [1])
                        y = tf.nn.relu(tf.nn.bias_add(z * scale, b))
                    elif form == "inside":
                        z = tf.nn.bias_add(tf.nn.conv2d(tf.expand_dims(y, 1), folded, 1, "SAME"), b)
                        y = tf.squeeze(tf.nn.relu(z), [1])
                    else:
                        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(y, folded, 1, "SAME"), b))
                f.forms[form] = tf.squeeze(y, [1]) if form == "4d" else y
        rows += compare(tf, f"Conv1D x {COPIES} [1, {t}, {c}], kernel {k}, + batch norm + ReLU", f)
    return rows


def dilated(tf):
    rows = []
    for t, c in ((64, 32), (128, 64), (256, 64)):
        f = Forms(tf, (1, t, c), dynamic=2)
        with f.graph.as_default():
            layers = []
            for i in range(COPIES):
                w = (0.1 * f.rng.standard_normal((3, c, c))).astype(np.float32)
                layers.append((f.weight(None, value=w), f.weight(None, value=w[None]), f.weight((c,)), 2 ** (i % 4)))
            for form in ("SpaceToBatchND", "dilated Conv2D"):
                y = f.x
                for w, w4, b, rate in layers:
                    z = tf.pad(y, [[0, 0], [2 * rate, 0], [0, 0]])          # Keras' causal padding
                    if form == "SpaceToBatchND":
                        z = tf.nn.convolution(z, w, padding="VALID", dilations=[rate])
                    else:
                        z = tf.squeeze(tf.raw_ops.Conv2D(input=tf.expand_dims(z, 1), filter=w4, strides=[1, 1, 1, 1],
                                                         padding="VALID", dilations=[1, 1, rate, 1]), [1])
                    y = tf.nn.relu(tf.nn.bias_add(z, b)) + y
                f.forms[form] = y
        rows += compare(tf, f"causal dilated Conv1D x {COPIES} [1, {t}, {c}], rates 1-8", f)
    return rows


def attention_scores(tf):
    rows = []
    for t, heads, hd in ((8, 4, 16), (16, 4, 16), (64, 8, 32), (128, 12, 64), (256, 12, 64)):
        f = Forms(tf, (1, t, heads * hd), dynamic=2)
        with f.graph.as_default():
            shape = tf.concat([tf.shape(f.x)[:2], [heads, hd]], 0)
            for form in ("Keras", "E16/E17", "Einsum"):
                sums = []
                for i in range(COPIES):
                    q, k = tf.reshape(f.x * (1.0 + 0.01 * i), shape), tf.reshape(f.x * 0.99, shape)
                    if form == "Keras":
                        s = tf.transpose(tf.linalg.matmul(tf.transpose(k, [0, 2, 1, 3]), tf.transpose(q, [0, 2, 3, 1])),
                                         [0, 1, 3, 2])
                    elif form == "E16/E17":
                        s = tf.linalg.matmul(tf.transpose(q, [0, 2, 1, 3]), tf.transpose(k, [0, 2, 1, 3]),
                                             adjoint_b=True)
                    else:
                        s = tf.einsum("aecd,abcd->acbe", k, q)
                    sums.append(tf.nn.softmax(s))
                f.sum_forms({form: sums}, [1, 2])
        rows += compare(tf, f"attention scores [1, {t}, {heads} x {hd}]", f)
    return rows


def grouped_conv(tf):
    rows = []
    # (side, channels, groups): ResNeXt-50 32x4d's four stages at 224 and at 64 pixels, RegNetY-800MF-like stages
    for side, c, groups in ((56, 128, 32), (28, 256, 32), (14, 512, 32), (7, 1024, 32), (16, 128, 32), (8, 256, 32),
                            (4, 512, 32), (2, 1024, 32), (28, 64, 8), (8, 104, 13)):
        f = Forms(tf, (1, side, side, c))
        with f.graph.as_default():
            layers = [(f.weight((3, 3, c // groups, c)), f.weight((c,))) for _ in range(COPIES)]

            @tf.function(jit_compile=True)
            def xla(y, w):
                return tf.nn.conv2d(y, w, 1, "SAME")

            for form in ("XLA call", "Conv2D", "split"):
                y = f.x
                for w, b in layers:
                    if form == "XLA call":
                        z = xla(y, w)
                    elif form == "Conv2D":
                        z = tf.nn.conv2d(y, w, 1, "SAME")
                    else:
                        z = tf.concat([tf.nn.conv2d(a, k, 1, "SAME") for a, k in
                                       zip(tf.split(y, groups, axis=3), tf.split(w, groups, axis=3))], 3)
                    y = tf.nn.relu(tf.nn.bias_add(z, b))
                f.forms[form] = y
        rows += compare(tf, f"grouped 3x3 conv x {COPIES} [1, {side}, {side}, {c}], {groups} groups", f)
    return rows


def main(argv):
    del argv
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    unknown = set(FLAGS.experiments) - set(EXPERIMENTS)
    if unknown:
        raise app.UsageError(f"unknown experiments: {', '.join(sorted(unknown))} (any of {', '.join(EXPERIMENTS)})")
    print("| pattern | reference / candidate | reference ms | candidate ms | ratio [95 % interval] "
          "| candidate's kernels | max rel. difference |")
    print("|---|---|---|---|---|---|---|")
    for name in FLAGS.experiments:
        for row in globals()[name](tf):
            print(row, flush=True)


if __name__ == "__main__":
    app.run(main)
