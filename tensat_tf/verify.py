"""Numerical verification: the same seeded random (or given) inputs through the original and the new signature.

Run at batch 1 and a larger batch (unknown leading dims), per output key: max abs and max relative difference, where
the relative difference is max|a-b| / max|a| (element-wise ratios explode on near-zero outputs). Integer and bool
outputs must match exactly.

Integer inputs are 0 or 1, except that an input whose values index tables (token ids into an embedding) also gets
values up to the smallest of those tables' rows (tensat_tf/index_range.py), where the original accepts them
(check_original), so that a rewrite that broke any row of the table fails.

Other sizes: every other unknown dim (a sequence, an image side) is unknown_dim long in those inputs, and every
input's unknown leading dim is the same batch size, so a rewrite that held only at that length, or that took one
unknown dim for another (a cross attention's query and memory lengths, an image's height and width, two towers'
batches), would pass them. A signature with such dims is also run once more at the larger batch with each of them at
its own size (unknown_dim + 1, + 2, ...; each input with an unknown leading dim at its own batch size, the larger
batch + 0, + 1, ...). Where the original refuses that, the same batch for all (one query, one memory), then one length
per input, then one length, unknown_dim + 1, for all (a mask must match its tokens), each first with the batches
apart. It is compared at LENGTHS_SLACK times the tolerance the same output got at the standard inputs (the noise
floor's baselines are recorded for those inputs only). Where the original refuses every variant, nothing more is
checked.

Tolerance: rtol (1e-5 for float32; unless the user sets it, the rtol of the least precise float type the graph
computes in, where that is looser: precision_rtol), or NOISE_FACTOR times the noise floor when that is larger. The
noise floor is the
larger distance from the original signature of two baselines (baselines()): the frozen graph with every float weight
moved by one rounding step (rounding_twin: the model's own float32 sensitivity, which sound weight folds run into),
and TF running the frozen graph itself: freezing turns the smaller variables into constants that TF's runtime then
folds in another order, which alone moves a deep network's outputs (MobileNetV2: 1.7e-5 relative, measured). Both
feed the weights that the output keeps as variables (tensat_tf/io/weights.py), as a served call reads them. Our
output cannot be held to a tighter bound than TF's own freezing; a wrong rewrite is orders of magnitude above
either.

When the *original* cannot run on these inputs (a kernel this CPU lacks, such as "Fused conv implementation does not
support grouped convolutions for now" on CPUs without AVX-512, or an op that raises on random inputs), nothing can
be verified: errors.OriginalFails names the op and TF's reason. convert checks this right after loading
(check_original), before any optimization work. A failure of the converted signature is a verification failure.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from tensat_tf import errors, index_range
from tensat_tf.io import weights
from tensat_tf.io.load import TensorSpec, every_node
from tensat_tf.options import MIN_VARIABLE_ELEMENTS, UNKNOWN_DIM

NOISE_FACTOR = 10.0
LENGTHS_SLACK = 2.0
ROUNDING_SEED = 12345
DEFAULT_RTOL = {tf.float16: 1e-2, tf.bfloat16: 2e-2, tf.float32: 1e-5, tf.float64: 1e-9}


@dataclasses.dataclass
class Verification:
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    per_output: dict            # "signature/key@batch" -> {max_abs_diff, max_rel_diff, passed}
    batch_sizes: tuple[int, ...]


def random_inputs(specs: Sequence[TensorSpec], batch: int, seed: int, unknown_dim: int = UNKNOWN_DIM,
                  int_high: int = 2, lengths: Optional[dict] = None,
                  highs: Optional[dict] = None) -> dict[str, tf.Tensor]:
    """Seeded random feeds; an unknown leading dim is `batch`, every other unknown dim unknown_dim, or
    lengths[(input key, dim index)] where given (index 0 included). Integers are below int_high; for an input in
    `highs` (tensat_tf/index_range.py: the rows of the tables it indexes), half of them, at random places, are below
    its bound instead (the other half keeps the small ids a padding mask or a two-row table tests)."""
    rng = np.random.RandomState(seed)
    lengths = lengths or {}
    feeds = {}
    for s in specs:
        shape = [] if s.shape is None else [
            lengths.get((s.key, i), batch if i == 0 else unknown_dim) if d < 0 else d for i, d in enumerate(s.shape)]
        if s.dtype.is_floating:
            arr = rng.standard_normal(shape).astype(s.dtype.as_numpy_dtype)
        elif s.dtype.is_bool:
            arr = rng.randint(0, 2, shape).astype(bool)
        elif s.dtype.is_integer:
            arr = rng.randint(0, int_high, shape)
            if highs and highs.get(s.key, int_high) != int_high:
                wide, pick = rng.randint(0, highs[s.key], shape), rng.randint(0, 2, shape).astype(bool)
                arr = np.where(pick, wide, np.minimum(arr, highs[s.key] - 1))
            arr = arr.astype(s.dtype.as_numpy_dtype)
        else:
            raise ValueError(f"cannot make random values for input {s.key} of type {s.dtype.name}")
        feeds[s.key] = tf.constant(arr)
    return feeds


def _feeds_key(feeds: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(feeds):
        a = np.asarray(feeds[k])
        h.update(f"{k}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def recorded(fn, feeds_list: Sequence[dict]):
    """`fn` run now on each of `feeds_list`, as a function that returns those outputs again for the same feeds (and
    raises KeyError for others). convert runs the noise floor's baselines right after loading, keeps their outputs
    and releases them (and their copy of the weights) rather than holding them through verification."""
    table = {_feeds_key(f): {k: v.numpy() for k, v in fn(**f).items()} for f in feeds_list}

    def call(**feeds):
        return {k: tf.constant(v) for k, v in table[_feeds_key(feeds)].items()}
    return call


def verification_inputs(specs: Sequence[TensorSpec], batch_sizes: Sequence[int], seed: int,
                        unknown_dim: int = UNKNOWN_DIM, highs: Optional[dict] = None) -> list[tuple[str, dict]]:
    """(tag, feeds) per batch size: the inputs verify() draws. The tag is the batch size; where no input has an
    unknown batch (a signature exported for batch 1), every draw has the inputs' own, so the tags say which draw it is
    ("1#2": batch 1, the second draw), not a batch size that never ran."""
    fixed = next((s.shape[0] for s in specs if s.shape), None)
    if fixed is None or any(s.shape is None or (s.shape and s.shape[0] < 0) for s in specs):
        return [(str(b), random_inputs(specs, b, seed + b, unknown_dim, highs=highs)) for b in batch_sizes]
    return [(f"{fixed}#{k + 1}", random_inputs(specs, b, seed + b, unknown_dim, highs=highs))
            for k, b in enumerate(batch_sizes)]


def precision_rtol(graph_def) -> float:
    """DEFAULT_RTOL of the least precise float type any node of the graph (its function library included) has as a
    type attribute. Keras' mixed precision keeps float32 variables and outputs and computes in bfloat16 or float16
    between them: every intermediate is rounded to 8 or 11 bits, which neither float32's tolerance nor the rounding
    twin (one float32 step of each weight, lost again in the cast to bfloat16) accounts for. A mixed_bfloat16
    transformer's output moved by 4.6e-3 (relative) under sound rewrites, with a noise floor of 2e-7 (BENCHMARKS.md)."""
    types: set = set()
    for node in every_node(graph_def):
        for a in node.attr.values():
            if a.HasField("type"):
                types.add(a.type)
            elif a.HasField("list"):
                types.update(a.list.type)
    rtols = [DEFAULT_RTOL[d] for d in (tf.as_dtype(t) for t in types if t) if d in DEFAULT_RTOL]
    return max(rtols, default=DEFAULT_RTOL[tf.float32])


def other_lengths(specs: Sequence[TensorSpec], unknown_dim: int = UNKNOWN_DIM, batch: int = 4) -> list[dict]:
    """The `lengths` of random_inputs to try, in order, for the check at other sizes (module docstring): every
    unknown dim but a leading one at its own length, then one length per input, then one length for all (inputs
    that must agree: BERT's token ids, segment ids and mask); each first with every unknown leading dim at its own
    batch size where two inputs or more have one (a dual encoder's towers), then with `batch` for all (what a
    cross attention's query and memory must share). [] when there is nothing to vary."""
    ordered = [s for s in sorted(specs, key=lambda s: s.key) if s.shape is not None]
    dims = [(s.key, i) for s in ordered for i, d in enumerate(s.shape) if i > 0 and d < 0]
    leading = [(s.key, 0) for s in ordered if s.shape and s.shape[0] < 0]
    apart = {kd: batch + j for j, kd in enumerate(leading)} if len(leading) > 1 else {}
    keys = sorted({k for k, _ in dims})
    out: list[dict] = []
    for v in ({kd: unknown_dim + 1 + j for j, kd in enumerate(dims)},
              {(k, i): unknown_dim + 1 + keys.index(k) for k, i in dims},
              {kd: unknown_dim + 1 for kd in dims}):
        for w in ({**apart, **v}, v):
            if w and w not in out:
                out.append(w)
    return out


def compare(ref: np.ndarray, got: np.ndarray, dtype: tf.DType, tol: float) -> tuple[float, float, bool]:
    if ref.shape != got.shape:
        return float("inf"), float("inf"), False
    if not dtype.is_floating:
        same = bool(np.array_equal(ref, got))
        return (0.0, 0.0, True) if same else (float("inf"), float("inf"), False)
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    # NaN where the original has NaN, and each infinity of the same sign: a masked softmax's fully masked row is
    # NaN, and a rewrite that turns -inf into NaN or +inf is wrong however the finite values compare
    if not (np.array_equal(np.isnan(ref64), np.isnan(got64))
            and np.array_equal(np.where(np.isinf(ref64), ref64, 0.0), np.where(np.isinf(got64), got64, 0.0))):
        return float("inf"), float("inf"), False
    finite = np.isfinite(ref64)
    diff = np.abs(ref64[finite] - got64[finite])
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref64[finite]).max()) if diff.size else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    return max_abs, max_rel, max_rel <= tol


_NODE = re.compile(r"\{\{node ([^}]+)\}\}")
_NOISE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "File ", "[[{{node")


def op_error_reason(e: tf.errors.OpError, fn) -> str:
    """'op TYPE (node NAME): TF's first meaningful line' from a TF runtime error of fn."""
    message = e.message or str(e)
    nodes = _NODE.findall(message)
    node = nodes[-1] if nodes else None
    lines = [ln.strip() for ln in message.splitlines()]
    text = next((ln for ln in lines if ln and not ln.startswith(_NOISE)), lines[0] if lines else "")
    text = _NODE.sub("", text).replace("[[]]", "").strip()
    if len(text) > 240:
        text = text[:240] + "..."
    op = None
    if node is not None:
        try:
            gd = fn.graph.as_graph_def()
            for n in every_node(gd):
                if n.name == node:
                    op = n.op
                    break
        except Exception:  # noqa: BLE001 - naming the op is a courtesy; the reason alone is still one clear line
            op = None
    where = (f"op {op} (node {node})" if op else f"node {node}") if node else "an op"
    return f"{where}: {type(e).__name__}: {text}"


def run_original(fn, sig_name: str, tag: str, feeds: dict, hint: str = "") -> dict:
    """fn(**feeds) for the original signature; errors.OriginalFails (one line, `hint` at its end) when TF cannot run
    it."""
    try:
        return fn(**feeds)
    except tf.errors.OpError as e:
        raise errors.OriginalFails(
            f"the original model fails in TensorFlow itself on the verification inputs (signature {sig_name}, "
            f"batch {tag}), so nothing can be verified: {op_error_reason(e, fn)}{hint}") from None


class _Fed:
    """A frozen graph run with its weights fed to placeholders (tensat_tf/io/weights.py), as a served call reads
    them: the weights are one array each, not constants that TF copies into every form of the function it builds."""

    def __init__(self, graph_def, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], min_elements: int):
        self.graph, self.values = weights.as_placeholders(graph_def, min_elements)
        self.inputs, self.outputs = inputs, outputs

    def round_once(self, seed: int) -> None:
        """Every float constant and weight of two or more elements times 1 +- eps (random sign, seeded, in node
        order), in place."""
        rng = np.random.RandomState(seed)
        for node in self.graph.node:
            arr = self.values.get(node.name)
            if arr is not None:
                arr = np.asarray(arr)
            elif node.op == "Const":
                arr = tf.make_ndarray(node.attr["value"].tensor)
            if arr is None or arr.dtype not in (np.float16, np.float32, np.float64) or arr.size < 2:
                continue                  # scalars are attributes in all but name (epsilons, exponents)
            eps = np.finfo(arr.dtype).eps
            moved = (arr * (1 + eps * rng.choice(np.array([-1.0, 1.0]), size=arr.shape))).astype(arr.dtype)
            if node.name in self.values:
                self.values[node.name] = moved
            else:
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(moved))

    def function(self):
        """The graph as a function of keyword inputs -> {key: tensor}, the current weights fed."""
        graph, names, k = self.graph, list(self.values), len(self.inputs)
        for n in names:                   # as tensors once, one at a time (each array released as it is converted)
            self.values[n] = tf.constant(self.values[n])
        values = [self.values[n] for n in names]

        def _import(*args):
            # imported with its inputs and weights mapped to the function's arguments, rather than imported whole
            # and pruned: wrap_function's prune copies the graph op by op in Python (1.8 of ResNet50V2's 3.4 s)
            feeds = {s.tensor: a for s, a in zip(self.inputs, args[:k])}
            feeds.update({f"{n}:0": a for n, a in zip(names, args[k:])})
            return tf.graph_util.import_graph_def(graph, input_map=feeds, name="frozen",
                                                  return_elements=[s.tensor for s in self.outputs])
        fn = tf.compat.v1.wrap_function(
            _import, [s.to_tf() for s in self.inputs] + [tf.TensorSpec(v.shape, v.dtype) for v in values])

        def call(**feeds):
            outs = fn(*[feeds[s.key] for s in self.inputs], *values)
            return dict(zip([s.key for s in self.outputs], outs))
        return call


def rounding_twin(graph_def, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], seed: int = ROUNDING_SEED,
                  min_elements: int = MIN_VARIABLE_ELEMENTS):
    """The frozen graph with every float weight moved by one rounding step (each element times 1 +- eps, random sign,
    seeded), its weights fed as a served call reads them: a function of keyword inputs -> {key: tensor}.

    Why: sound weight rewrites change rounding. Folding a BatchNorm scale into a conv filter (rules/tf_fold.rules F02)
    rounds every filter element once more, which a deep random-weight network amplifies far beyond TF's own
    freezing noise (zoo:resnet50, 53 folds: 3.3e-4 relative, against 6.9e-6 for freezing). How far one rounding of
    every weight moves the outputs is the model's own float32 sensitivity, measured, not assumed; a wrong rewrite is
    orders of magnitude above it."""
    fed = _Fed(graph_def, inputs, outputs, min_elements)
    fed.round_once(seed)
    return fed.function()


def baselines(graph_def, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], feeds_list: Sequence[dict],
              min_elements: int = MIN_VARIABLE_ELEMENTS, seed: int = ROUNDING_SEED):
    """The noise floor's two baselines of a frozen graph, run now on `feeds_list` and returned as recorded()
    functions: TF running the frozen graph as served (its weights fed; its smaller constants folded by TF's runtime
    in its own order), and its rounding twin. One copy of the weights is held at a time, rounded in place between
    the two."""
    fed = _Fed(graph_def, inputs, outputs, min_elements)
    frozen = recorded(fed.function(), feeds_list)
    fed.round_once(seed)
    return frozen, recorded(fed.function(), feeds_list)


def check_original(model, batch_sizes: Sequence[int] = (1, 4), seed: int = 0,
                   unknown_dim: int = UNKNOWN_DIM) -> dict[str, dict]:
    """Run every original signature of a LoadedModel on verification's inputs (before any optimization work), the
    first of them twice: an output that two calls on the same inputs do not give alike (a random op: a VAE's sample,
    noise) cannot be compared with any conversion, so the signature is refused (errors.UnsupportedSignature) rather
    than verified against a noise floor as large as the output. Signatures that share one frozen graph (load shares
    it where they compute the same thing) are run once. -> {signature: the `highs` of its integer inputs}
    (tensat_tf/index_range.py), {} for a signature whose original refuses them (it is then run on {0, 1})."""
    by_graph: dict = {}     # id(frozen graph) -> its highs: load shares one between signatures computing the same
    out = {}
    for name, sig in sorted(model.signatures.items()):
        if id(sig.graph_def) not in by_graph:       # Keras 3's serve and serving_default: checked once
            by_graph[id(sig.graph_def)] = _checked_highs(name, sig, batch_sizes, seed, unknown_dim)
        out[name] = by_graph[id(sig.graph_def)]
    return out


def _checked_highs(name: str, sig, batch_sizes: Sequence[int], seed: int, unknown_dim: int) -> dict:
    """check_original of one signature: its highs where the original accepts them, else {} (then checked on {0, 1})."""
    highs = index_range.highs(sig.graph_def, sig.inputs)
    if highs:
        try:
            _check_signature(name, sig, batch_sizes, seed, unknown_dim, highs)
            return highs
        except errors.OriginalFails:
            pass
    _check_signature(name, sig, batch_sizes, seed, unknown_dim, {})
    return {}


def _check_signature(name: str, sig, batch_sizes: Sequence[int], seed: int, unknown_dim: int, highs: dict) -> None:
    # an image model with dynamic height and width may need more than unknown_dim pixels (DenseNet: 32), a text model
    # with a position table of fixed length fewer tokens (keras_hub's Whisper decoder at 64 positions)
    hint = (f" (every unknown dim but the batch was {unknown_dim} long; --unknown_dim sets that length: larger for a "
            f"model that needs longer inputs, smaller for one that takes at most so many, such as a fixed position "
            f"table)") if any(d < 0 for s in sig.inputs if s.shape for d in s.shape[1:]) else ""
    for i, (tag, feeds) in enumerate(verification_inputs(sig.inputs, batch_sizes, seed, unknown_dim, highs)):
        got = run_original(sig.function, name, tag, feeds, hint)
        if i == 0:
            again = run_original(sig.function, name, tag, feeds, hint)
            for spec in sig.outputs:
                a, b = got[spec.key].numpy(), again[spec.key].numpy()
                _, max_rel, alike = compare(a, b, spec.dtype, DEFAULT_RTOL.get(spec.dtype, 1e-5))
                if not alike:
                    raise errors.UnsupportedSignature(
                        f"signature '{name}': output '{spec.key}' is not deterministic (two calls on the same "
                        f"inputs differ by {max_rel:.2g} relative{_random_ops(sig.graph_def)}), so no conversion "
                        f"of it can be verified; select the other signatures with --signatures")


def _random_ops(graph_def) -> str:
    ops = sorted({n.op for n in every_node(graph_def) if "Random" in n.op or n.op == "Multinomial"})
    return f"; random ops: {', '.join(ops)}" if ops else ""


def verify(pairs, batch_sizes: Sequence[int] = (1, 4), seed: int = 0, rtol: Optional[float] = None,
           given: Optional[dict] = None, unknown_dim: int = UNKNOWN_DIM,
           precision: Optional[dict] = None, highs: Optional[dict] = None) -> Verification:
    """pairs: [(signature name, input specs, output specs, reference fn, candidate fn, baseline fns)]: the noise
    floor is the largest distance of a baseline (None, one function or a tuple of them) from the reference. Inputs:
    random_inputs at each batch size, every other unknown dim unknown_dim long; then, for a signature with such
    dims and no given inputs, once at the largest batch size with them at other sizes (module docstring).
    precision: signature -> precision_rtol of its graph, the float outputs' tolerance where looser than their own
    type's (when `rtol` is not given). highs: signature -> the `highs` of random_inputs (check_original's)."""
    per: dict = {}

    def record(key: str, a: np.ndarray, b: np.ndarray, dtype: tf.DType, tol: float, noise: float, **extra) -> None:
        max_abs, max_rel, passed = compare(a, b, dtype, tol)
        per[key] = {"max_abs_diff": max_abs, "max_rel_diff": max_rel, "passed": passed, "noise_floor": noise,
                    "tolerance": tol, **extra}

    for sig, in_specs, out_specs, ref_fn, new_fn, base_fn in pairs:
        floor = (precision or {}).get(sig, 0.0)
        sig_highs = (highs or {}).get(sig)
        tols: dict = {}                         # output key -> the largest tolerance it got at the standard lengths
        feeds_list = [(f"given", given[sig])] if given and sig in given else verification_inputs(
            in_specs, batch_sizes, seed, unknown_dim, sig_highs)
        for tag, feeds in feeds_list:
            ref = run_original(ref_fn, sig, tag, feeds)
            try:
                got = new_fn(**feeds)
            except tf.errors.OpError as e:
                raise errors.VerificationFailed(
                    f"the converted signature {sig} fails at batch {tag} where the original runs: "
                    f"{op_error_reason(e, new_fn)}; nothing was written") from None
            bases = [f(**feeds) for f in (() if base_fn is None else base_fn if isinstance(base_fn, tuple)
                                          else (base_fn,))]
            for spec in out_specs:
                a, b = ref[spec.key].numpy(), got[spec.key].numpy()
                tol = rtol if rtol is not None else max(DEFAULT_RTOL.get(spec.dtype, 1e-5),
                                                        floor if spec.dtype.is_floating else 0.0)
                noise = 0.0
                if spec.dtype.is_floating:
                    for base in bases:
                        noise = max(noise, compare(a, base[spec.key].numpy(), spec.dtype, tol)[1])
                    tol = max(tol, NOISE_FACTOR * noise)
                record(f"{sig}/{spec.key}@{tag}", a, b, spec.dtype, tol, noise)
                tols[spec.key] = max(tols.get(spec.key, 0.0), tol)
        if given and sig in given:
            continue
        # the label of the largest batch's draw ("4", or "1#2" where the batch is fixed at 1)
        big_tag = feeds_list[max(range(len(batch_sizes)), key=lambda k: batch_sizes[k])][0]
        for lengths in other_lengths(in_specs, unknown_dim, max(batch_sizes)):
            feeds = random_inputs(in_specs, max(batch_sizes), seed + 1000, unknown_dim, lengths=lengths,
                                  highs=sig_highs)
            try:
                ref = ref_fn(**feeds)
            except (tf.errors.OpError, ValueError):
                continue                        # the original refuses these lengths: try the next, or check none
            try:
                got = new_fn(**feeds)
            except tf.errors.OpError as e:
                raise errors.VerificationFailed(
                    f"the converted signature {sig} fails where the original runs, with its unknown dims at other "
                    f"sizes ({_lengths_text(lengths)}): {op_error_reason(e, new_fn)}; nothing was written") from None
            for spec in out_specs:
                record(f"{sig}/{spec.key}@{big_tag}+lengths", ref[spec.key].numpy(), got[spec.key].numpy(),
                       spec.dtype, LENGTHS_SLACK * tols[spec.key], 0.0, lengths=_lengths_text(lengths))
            break
    ok = all(v["passed"] for v in per.values())
    worst_abs = max((v["max_abs_diff"] for v in per.values()), default=0.0)
    worst_rel = max((v["max_rel_diff"] for v in per.values()), default=0.0)
    return Verification(ok, worst_abs, worst_rel, per, tuple(batch_sizes))


def _lengths_text(lengths: dict) -> str:
    return ", ".join(f"{k}[{i}]={n}" for (k, i), n in sorted(lengths.items()))
