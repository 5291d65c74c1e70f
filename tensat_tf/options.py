"""The options of a conversion as plain data: `Options` (convert), `EngineOptions` (the e-graph pass) and `Budget`
(saturation). No TensorFlow or egglog here: the CLI builds and checks them before any work, and `batch` hands them to
its worker processes as JSON-ready dicts (to_json / from_json).

check() raises the error the CLI reports (tensat_tf/errors.py) for a value that cannot work; the messages name the
command-line flag, since that is where a user sets it.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Sequence

from tensat_tf import errors


@dataclasses.dataclass(frozen=True)
class Budget:
    iterations: int = 15
    node_limit: int = 50_000                    # absolute cap on e-nodes
    seconds: Optional[float] = None             # absolute cap on wall-clock seconds
    k_multi: int = 1
    match_limit: Optional[int] = 1_000          # backoff scheduler (egg's defaults); None: no backoff
    ban_length: int = 5
    nodes_per_enode: Optional[float] = 20.0     # node limit = max(min_nodes, this x e-nodes of the input), capped
    min_nodes: int = 2_000
    # The work budget, which decides (the same way on every machine): the e-nodes the iterations search, summed (an
    # iteration searches the e-graph it starts from, once per attempt). = max(min_work, this x e-nodes of the
    # input), capped at `work`. On this VM an iteration takes 0.1-0.3 ms per e-node it searches (BENCHMARKS.md); the
    # 15 real exports search at most 26x their input's e-nodes (MobileNetV3-Small), the zoo 39x (nasrnn_taso).
    work: Optional[int] = 2_000_000
    work_per_enode: Optional[float] = 40.0
    min_work: int = 20_000
    # The time budget, the backstop (the clock: a stop on it depends on the machine): = max(min_seconds, this x
    # e-nodes of the input), capped at `seconds`; about 1.5 times what the work budget takes here at most.
    seconds_per_enode: Optional[float] = 0.015
    min_seconds: float = 6.0
    # with a probe: stop after this many iterations without a better cost. 1: on the 15 real exports and 9 zoo models
    # no probe ever improved after one that did not (BENCHMARKS.md), and a second stale iteration cost up to 1.7 s
    patience: Optional[int] = 1

    def limits(self, enodes: int) -> tuple[int, Optional[float], Optional[int]]:
        """(node limit, seconds, work) for an input of `enodes` e-nodes."""
        nodes = self.node_limit
        if self.nodes_per_enode is not None:
            nodes = min(nodes, max(self.min_nodes, int(self.nodes_per_enode * enodes)))
        secs = self.seconds
        if self.seconds_per_enode is not None:
            scaled = max(self.min_seconds, self.seconds_per_enode * enodes)
            secs = scaled if secs is None else min(secs, scaled)
        work = self.work
        if self.work_per_enode is not None:
            scaled_work = max(self.min_work, int(self.work_per_enode * enodes))
            work = scaled_work if work is None else min(work, scaled_work)
        return nodes, secs, work


METHODS, SOLVERS, COST_MODELS = ("ilp", "greedy"), ("auto", "cbc", "highs"), ("analytic", "measured")
# The default work limit of one extraction (EngineOptions.ilp_work), in the units of tensat_tf/extract/solvers.py.
# A limit check costs 3-95 ms on this VM (BENCHMARKS.md): every e-graph measured is proven within 60 except the zoo's
# nasnet_a, whose final ILP needs 1,147 (2.4 s; at 400 it stopped 4.3 % from its bound, with the same choice), so
# 2,000 leaves room; a search that needs more is cut by the wall clock (ilp_seconds) first where checks are slow.
# Declared here (options import nothing heavy) and used as extract.ilp's default.
WORK = 2000
# Constants of at least this many elements are saved as variables, the rest stay constants in the graph (the default
# of EngineOptions.min_variable_elements; tensat_tf/io/weights.py).
MIN_VARIABLE_ELEMENTS = 1024
# An unknown dimension other than the batch (a sequence length) is this long wherever a size is needed, unless the
# user sets EngineOptions.unknown_dim (--unknown_dim): the random inputs of verification and of profiling
# (tensat_tf/verify.py), and the cost model's prices (tensat_tf/cost/analytic.py), so that what is predicted is what
# is measured.
UNKNOWN_DIM = 8


# A probe's cost counts as better only when it is this fraction below the best so far (egraph/saturate.py; also the
# pass's extraction gap, EngineOptions.rel_gap): ConvNeXt-Tiny's probe fell by 0.03 % per iteration for three
# iterations (2.4 s) that the final ILP, then stopping within 1 % of its bound, could not even tell apart. At 0.1 %
# (until 2026-12-05) a step no measurement here can see (an A/A run spreads 1-2 %) still bought an iteration and a
# probe: a 12-layer Keras encoder's fourth probe found 0.12 % and ran a fifth iteration and probe (2.2 s of an 8.6 s
# pass) for nothing; MobileNetV3-Small's third found 0.11 %, NASNet-Mobile's 0.19 % (BENCHMARKS.md).
PROBE_MIN_GAIN = 3e-3


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    enable_rules: Optional[Sequence[str]] = None       # names or families; None: rules.DEFAULT_FAMILIES
    disable_rules: Sequence[str] = ()
    rules_files: Sequence[str] = ()
    budget: Budget = Budget()
    method: str = "ilp"                                # ilp | greedy
    # extraction's limits: `ilp_work` units of solver work decide where an unproven search stops, the same on every
    # machine (tensat_tf/extract/solvers.py); `ilp_seconds` of wall clock is the backstop (a search it stops may
    # answer otherwise on another machine: the report's `clocked`)
    ilp_seconds: float = 10.0
    ilp_work: int = WORK
    # saturation stops when an extraction of the e-graph after each iteration, limited to `probe_work` and
    # `probe_seconds` as above, has not improved for budget.patience iterations (see egraph/saturate.py); 0 seconds:
    # no probe. Under a 1 s clock (before the work limit) a probe stopped short of its proof reported a worse cost
    # than the e-graph holds on 4 of the 15 real exports, ending saturation early and on the machine's speed; with
    # these limits each of those probes is proven, in at most 21 work units and 1.1 s (BENCHMARKS.md)
    probe_seconds: float = 5.0
    probe_work: int = 60
    # the pass's extractions (its probes and the last) stop once proven within this relative gap of a lower bound:
    # PROBE_MIN_GAIN, the smallest step a probe is asked to see. At the extractor's 1 % (extract/ilp.py REL_GAP) a
    # probe could report a choice up to 1 % above what its e-graph holds and end saturation an iteration early, and a
    # greedy choice the path bound proved within 1 % was kept as it was: a 12-layer Keras encoder's 1.4235 where its
    # e-graph holds 1.4120, a 2-layer GPT's 0.3156 for 0.3137 (BENCHMARKS.md)
    rel_gap: float = PROBE_MIN_GAIN
    # the pass changes the graph only for a whole call predicted at least this much faster (cost/analytic.py
    # predicted_gain: the call's fixed cost and the opaque ops' work count): PROBE_MIN_GAIN, the step saturation needs
    # to go on. Below it the change is inside the extraction's own gap and nothing here can measure it, while the
    # rewrite's risk is real: in a sweep of Keras models a bidirectional GRU / LSTM's input projections merged
    # (predicted 1.0029x) ran 0.983-0.990x, a UNet's ten convolution biases as BiasAdds (1.0013x) 0.996x
    # (BENCHMARKS.md, "A gain too small to take"). Not applied with original_cost_factor > 1, whose prices are not
    # the model's
    min_gain: float = PROBE_MIN_GAIN
    solver: str = "auto"
    cost_model: str = "analytic"                       # analytic | measured
    # the device the cost model prices for: 'auto' (the CPU profile of the TF runtime converting, with oneDNN's ops
    # or without: cost/devices.py runtime_cpu) or a name in cost/devices.py DEVICES
    device: str = "auto"
    batch_size: int = 1
    # the length of every other unknown dim (a sequence length) where a size is needed: pricing here, and in a
    # conversion also verification's and profiling's inputs (UNKNOWN_DIM)
    unknown_dim: int = UNKNOWN_DIM
    # constants of this many elements or more are saved as variables (tensat_tf/io/weights.py): the pass prices a
    # served call's reads of them (cost/analytic.py variable_weights_ms) and checks Grappler on them as reads
    min_variable_elements: int = MIN_VARIABLE_ELEMENTS
    # > 1 multiplies the cost of every original e-node, so extraction takes rewritten forms wherever the e-graph has
    # them: a soundness check of the rules on a real model (verification must still pass), not an optimization
    original_cost_factor: float = 1.0

    def check(self) -> "EngineOptions":
        """Raise errors.BadInput (errors.UnknownName for a rule name) unless these options can run; -> self."""
        b = self.budget
        for name, value in (("iterations", b.iterations), ("node_limit", b.node_limit),
                            ("saturation_work", 1 if b.work is None else b.work),
                            ("batch_size", self.batch_size), ("unknown_dim", self.unknown_dim),
                            ("min_variable_elements", self.min_variable_elements),
                            ("ban_length", b.ban_length),
                            ("patience", 1 if b.patience is None else b.patience)):
            if value < 1:
                raise errors.BadInput(f"--{name} must be >= 1")
        if (b.match_limit is not None and b.match_limit < 0) or self.probe_seconds < 0:
            raise errors.BadInput("--match_limit and --probe_seconds must be >= 0")
        if (b.seconds is not None and b.seconds <= 0) or self.ilp_seconds <= 0:
            raise errors.BadInput("--saturation_seconds and --ilp_seconds must be > 0")
        if self.ilp_work < 1 or self.probe_work < 1:
            raise errors.BadInput("--ilp_work and --probe_work must be >= 1")
        if not 0 <= self.rel_gap < 1:
            raise errors.BadInput("--rel_gap must be >= 0 and < 1")
        if not 0 <= self.min_gain < 1:
            raise errors.BadInput("--min_gain must be >= 0 and < 1")
        from tensat_tf.cost import devices           # no TF import: runtime_cpu imports it only when called
        for name, value, allowed in (("method", self.method, METHODS), ("solver", self.solver, SOLVERS),
                                     ("cost_model", self.cost_model, COST_MODELS),
                                     ("device", self.device, (devices.AUTO, *sorted(devices.DEVICES)))):
            if value not in allowed:
                raise errors.BadInput(f"--{name} must be one of {', '.join(allowed)}: {value!r}")
        from tensat_tf import rules as rules_mod     # the rule files are read here: imports neither TF nor egglog
        try:
            rules_mod.select(self.enable_rules, self.disable_rules, self.rules_files)
        except rules_mod.UnknownRule as e:
            raise errors.UnknownName(str(e)) from None
        except (OSError, rules_mod.RuleSyntaxError) as e:
            raise errors.BadInput(f"--rules_file: {e}") from None
        return self


@dataclasses.dataclass(frozen=True)
class Options:
    signatures: Optional[Sequence[str]] = None
    overwrite: bool = False
    canonicalize: bool = True
    fold_shapes: bool = True            # passes/shapes.py: shape plumbing the symbolic shapes determine -> constants
    grouped_conv: bool = True           # passes/grouped_conv.py: XLA-called grouped convs -> native TF ops
    remapper_guard: bool = True         # passes/remapper_guard.py: activations TF's remapper fails on, in equal forms
    verify_batch_sizes: Sequence[int] = (1, 4)
    seed: int = 0
    rtol: Optional[float] = None
    tags: Sequence[str] = ("serve",)
    allow_ops: Sequence[str] = ()       # ops with effects outside the graph to accept anyway (tensat_tf/io/scan.py)
    # a pass that fails (raises, or writes a graph the pipeline's invariant check refuses) stops the conversion with
    # errors.InternalError instead of keeping its input graph: for CI jobs that must notice the optimizer failing
    strict: bool = False
    engine: EngineOptions = EngineOptions()
    # serve each written signature once in a fresh process with TF's error log on (tensat_tf/served_check.py) and
    # publish the original graph of any whose call makes a Grappler optimizer fail where the original graph does not
    served_check: bool = False
    profile: bool = False               # time original vs optimized; publish the original graph when not faster
    profile_batch_sizes: Optional[Sequence[int]] = None     # None: 1 and verify_batch_sizes
    profile_threads: Sequence[int] = (1, 0)     # 1: one intra-op + one inter-op thread; 0: TF's default pools
    profile_seconds: float = 8.0        # measuring time per signature (tensat_tf/latency.py decide)
    profile_margin: float = 0.02        # "faster" needs the interval's low end above 1 + margin (speedup.py)
    # deployment extras (tensat_tf/serving.py, tensat_tf/onnx_export.py), written and checked before publishing
    warmup: bool = False                # assets.extra/tf_serving_warmup_requests, replayed through the TF1 loader
    warmup_model_name: Optional[str] = None     # model_spec.name of the warm-up requests; None: warmup_name()
    emit_onnx: bool = False             # OUTPUT_DIR.onnx beside the output, checked with onnxruntime
    onnx_signature: Optional[str] = None
    # called with the name of each stage as it starts; not data: to_json leaves it out, a worker has none
    progress: Optional[Callable[[str], None]] = dataclasses.field(default=None, compare=False)

    def warmup_name(self, output_dir: str) -> str:
        """model_spec.name of the warm-up requests: warmup_model_name, else the output folder's name."""
        return self.warmup_model_name or os.path.basename(os.path.abspath(output_dir).rstrip("/")) or "model"

    def check(self) -> "Options":
        """Raise the CLI's error (errors.BadInput, errors.UnknownName) unless these options can run; -> self."""
        self.engine.check()
        threads, batch_sizes = self.profile_threads, self.profile_batch_sizes
        if not threads or min(threads) < 0 or (batch_sizes and min(batch_sizes) < 1):
            raise errors.BadInput("--profile_threads needs at least one setting, and batch sizes must be positive")
        if self.profile_seconds <= 0 or self.profile_margin < 0:
            raise errors.BadInput("--profile_seconds must be positive and --profile_margin not negative")
        return self

    def to_json(self) -> dict:
        """Everything but `progress`, as JSON types (sequences become lists); from_json reads it back."""
        return _plain({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "progress"})

    @classmethod
    def from_json(cls, data: dict) -> "Options":
        data = {k: _tuples(v) for k, v in data.items()}
        engine = dict(data.pop("engine", {}))
        engine["budget"] = Budget(**engine.pop("budget", {}))
        if "min_variable_elements" in data:     # written before it became an engine option (the pass prices it)
            engine.setdefault("min_variable_elements", data.pop("min_variable_elements"))
        return cls(engine=EngineOptions(**engine), **data)


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _tuples(value):
    """JSON lists back into the tuples the dataclasses hold (a list field would also make them unhashable)."""
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
