"""The e-graph pass: GraphDef -> egglog terms -> saturate -> export -> cycle filter -> cost -> extract -> GraphDef.

Grappler's contract: `TensatPass(options).optimize(graph_def, item) -> graph_def`; feeds, fetches and preserved
nodes stay (they are opaque roots of the e-graph). The pass never returns something worse than its input by its own
cost model: when the extracted graph's predicted cost is not below the original's, when the whole call is not
predicted at least EngineOptions.min_gain faster, or extraction finds nothing, it returns the input graph unchanged
(and says why in its stats).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections import Counter
from typing import Optional

from tensat_tf import cost as cost_mod
from tensat_tf import grappler
from tensat_tf import rules as rules_mod
from tensat_tf import terms
from tensat_tf.cost import opaque as opaque_mod
from tensat_tf.cost.analytic import predicted_gain
from tensat_tf.cost import sizes as sizes_mod
from tensat_tf.egraph import cycles
from tensat_tf.egraph import emit as emit_mod
from tensat_tf.egraph import ingest as ingest_mod
from tensat_tf.egraph import language
from tensat_tf.egraph.data import EGraphData
from tensat_tf.egraph.saturate import StopReason, saturate
from tensat_tf.extract import NoExtraction, dag, extract
from tensat_tf.item import GrapplerItem
from tensat_tf.options import EngineOptions
from tensat_tf.passes import remapper_guard
from tensat_tf.stopwatch import Stopwatch
from tensat_tf.rules.syntax import is_var

NAME = "tensat"


@dataclasses.dataclass
class TensatStats:
    typed_nodes: int = 0
    opaque_nodes: int = 0
    enodes: int = 0
    eclasses: int = 0
    iterations: int = 0
    stop_reason: str = "no_rules"
    saturation: dict = dataclasses.field(default_factory=dict)
    blacklisted: int = 0
    extraction: dict = dataclasses.field(default_factory=dict)
    rules_applied: dict = dataclasses.field(default_factory=dict)
    kept_input: str = ""                               # why the input graph was returned unchanged ("" if not)
    remapper_guarded: bool = False                     # the output passed the Grappler check in the guard's form
    timing_s: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        """The report's view of one signature's e-graph work (convert's JSON report, tensat_tf/convert.py)."""
        return {
            "egraph": {"enodes": self.enodes, "eclasses": self.eclasses, "iterations": self.iterations,
                       "stop_reason": self.stop_reason, "typed_nodes": self.typed_nodes,
                       "opaque_nodes": self.opaque_nodes, "cycle_blacklisted": self.blacklisted,
                       "saturation": self.saturation, "timing_s": self.timing_s},
            "extraction": dict(self.extraction, kept_input=self.kept_input, remapper_guarded=self.remapper_guarded),
            "rules_applied": self.rules_applied,
        }


def _matches(g: EGraphData, choice: dict, pattern, c: int, depth: int = 4) -> bool:
    """Does the chosen sub-graph at class c have the shape of a rule's right side (heads and plain literals)?"""
    if is_var(pattern) or depth == 0:
        return True
    if not isinstance(pattern, list):
        return False
    n = g.nodes[choice[c]] if c in choice else None
    if n is None or n.op != pattern[0]:
        return False
    sorts = terms.arg_sorts(pattern[0]) or []
    lits = iter(n.payload or ())
    kids = iter(n.children)
    for arg, sort in zip(pattern[1:], sorts):
        if terms.is_term_sort(sort):
            if not _matches(g, choice, arg, next(kids), depth - 1):
                return False
        else:
            value = next(lits, None)
            if isinstance(arg, int) and arg != value:
                return False
    return True


def rules_applied(g: EGraphData, exp, choice: dict, original: dict, ruleset) -> dict:
    """rule name -> number of chosen classes whose chosen e-node is not the original one and which the rule rewrote
    into; when several rules rewrote into a class, the first (in rule order) whose right side has the shape of the
    chosen sub-graph gets it."""
    order = {r.name: k for k, r in enumerate(ruleset.rules)}
    counts: Counter = Counter()
    for c, i in sorted(choice.items()):
        if original.get(c) == i or c not in exp.made:
            continue
        names = sorted(exp.made[c], key=lambda n: (order.get(n, len(order)), n))
        fitting = [n for n in names if n in order
                   and any(_matches(g, choice, t, c) for t in ruleset.by_name(n).targets)]
        counts[(fitting or names)[0]] += 1
    return dict(sorted(counts.items()))


def _spared(g: EGraphData, orig_ids: set) -> set:
    """What the cycle filter blacklists last: the original e-nodes and every argument-list cell (TCons/TNil). A
    cell is the only e-node of its class (no rule rewrites argument lists), so blacklisting one makes its opaque
    node, and whatever reads it, unextractable: merging two Relus (M08) put such a cell on a cycle on
    MobileNetV3-Small and no extraction was left."""
    return orig_ids | {i for i, n in enumerate(g.nodes) if n.op in ("TCons", "TNil")}


@contextlib.contextmanager
def _older_objects_frozen():
    """Python's cyclic GC left out of the objects that existed before the pass (TensorFlow's alone are ~600,000):
    each full collection the pass triggers would walk them all, 0.2-1 s of NASNet-Mobile's pass. The pass's own
    objects are collected as usual; nothing changes when a caller has frozen objects itself."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclasses.dataclass
class _Prepared:
    """An exported e-graph made ready for extraction, and the probe's extraction of it (None: not probed, or the
    probe found no acyclic choice)."""
    exp: object                        # sizes.exported
    original: dict                     # emit.original_nodes: the input's own e-nodes
    blacklist: frozenset               # the cycle filter's
    priced: EGraphData                 # what extraction solves: exp.egraph priced, with the blacklist
    probed: Optional[object] = None    # extract.Extraction


class TensatPass:
    name = NAME

    def __init__(self, options: EngineOptions = EngineOptions(), progress=None, remapper_guard: bool = True):
        """progress: optional callable taking one line of text (saturation iterations, extraction), for displays.
        remapper_guard: whether an output TF's Grappler fails on may pass in passes/remapper_guard.py's form
        (convert's Options.remapper_guard: with it off, such an output is dropped for the input where the input
        passes the check)."""
        self.options = options
        self.remapper_guard = remapper_guard
        self.progress = progress or (lambda text: None)
        self.stats: Optional[TensatStats] = None
        self.ruleset = rules_mod.select(options.enable_rules, options.disable_rules, options.rules_files)
        self._probes: dict[int, _Prepared] = {}            # iterations done -> what the probe prepared, extracted

    def _priced(self, exp, model, orig_ids: set, blacklist) -> EGraphData:
        """The exported e-graph with the cost model's prices (original e-nodes scaled by original_cost_factor) and
        the cycle blacklist: what extraction solves, in the probe and at the end."""
        g, factor = exp.egraph, self.options.original_cost_factor
        costs, fused = model.priced(exp)
        if factor != 1.0:
            costs = [c * factor + 1e-3 if i in orig_ids else c for i, c in enumerate(costs)]
        return g.with_costs(costs, fused, blacklist)

    def _prepared(self, ing, exp, model) -> "_Prepared":
        """What extraction needs of an exported e-graph (the same in the probe and at the end)."""
        original = emit_mod.original_nodes(ing, exp)
        orig_ids = set(original.values())
        black = cycles.cycle_blacklist(exp.egraph, _spared(exp.egraph, orig_ids))
        return _Prepared(exp, original, black, self._priced(exp, model, orig_ids, black))

    def _probe(self, ing, model):
        """The saturation probe: the DAG cost the extractor finds in the e-graph as it is now (the same export, cycle
        filter and costs as below, with the ILP limited to probe_work and probe_seconds). What it prepared and
        extracted is kept by iteration: saturation often leaves an e-graph a probe saw (when it stops for no gain,
        rolled back to the best probe's; after a probed iteration and others that changed nothing), and preparing it
        again (export, cycle filter, prices: 0.4 s of Inception-ResNet-v2's pass, BENCHMARKS.md) would give the
        same."""
        o = self.options

        def probe(eg, iteration: int):
            prep = self._prepared(ing, sizes_mod.exported(eg, ing), model)
            try:
                prep.probed = extract(prep.priced, o.method, o.probe_seconds, o.solver, rel_gap=o.rel_gap,
                                      work=o.probe_work, whole_first=self._whole_first())
            except NoExtraction:
                pass
            self._probes[iteration] = prep
            return None if prep.probed is None else prep.probed.dag_cost
        return probe

    def _whole_first(self) -> Optional[int]:
        """The work an extraction gives its whole e-graph before the parts: none once a probe of this pass had to
        split (the whole ILP did not prove that e-graph within its first work, and the next ones grow from it);
        otherwise the default (tensat_tf/extract/__init__.py WHOLE_FIRST_WORK)."""
        return 0 if any(p.probed is not None and p.probed.parts for p in self._probes.values()) else None

    def optimize(self, graph_def, item: GrapplerItem):
        with _older_objects_frozen():
            try:
                return self._optimize(graph_def, item)
            except BaseException as e:          # egglog's panics are BaseExceptions (tensat_tf/egraph/session.py)
                # the pipeline keeps the input and reports the error; the report's e-graph section says so too,
                # instead of the defaults of a pass that never ran ("no_rules", 0 typed nodes)
                self.stats.stop_reason = StopReason.ERROR.value
                self.stats.kept_input = f"the pass failed: {type(e).__name__}: {e}"
                raise

    def rejected(self, reason: str) -> None:
        """The pipeline did not take this pass's output (its invariant check failed: passes/pipeline.py): the report
        says the pass failed and its input was kept, not what the dropped output would have done."""
        self.stats.stop_reason = StopReason.ERROR.value
        self.stats.kept_input = f"the pass's output was rejected: {reason}"
        self.stats.rules_applied = {}
        self.stats.remapper_guarded = False
        if self.stats.extraction.get("cost_before") is not None:
            self.stats.extraction["cost_after"] = self.stats.extraction["cost_before"]

    def _optimize(self, graph_def, item: GrapplerItem):
        o = self.options
        stats = self.stats = TensatStats()
        self._probes = {}
        watch = Stopwatch()
        stats.timing_s = watch.seconds
        lap = watch.lap
        ing = ingest_mod.ingest(graph_def, item)
        eg = language.new_egraph()
        ingest_mod.load(eg, ing)
        stats.typed_nodes, stats.opaque_nodes = len(ing.typed), len(ing.opaque)
        lap("ingest")
        model = cost_mod.get_model(o.cost_model, batch_size=o.batch_size, device=o.device, unknown_dim=o.unknown_dim,
                                   min_variable_elements=o.min_variable_elements)
        sat = saturate(eg, self.ruleset, o.budget, progress=self.progress,
                       probe=self._probe(ing, model) if o.probe_seconds > 0 else None)
        stats.saturation = sat.to_json()
        for it in stats.saturation["per_iteration"]:
            # a probe stopped short of its proof may report a worse cost than the e-graph holds, and so end saturation
            # early; on the machine's speed if the clock stopped it (tensat_tf/report.py probes_cut_short)
            prep = self._probes.get(it["index"])
            if prep is not None:
                it["probe_status"] = prep.probed.status if prep.probed is not None else "no acyclic extraction"
                if prep.probed is not None and prep.probed.clocked:
                    it["probe_clocked"] = True
        stats.iterations, stats.stop_reason = len(sat.iterations), sat.stop_reason.value
        lap("saturate")
        prep = self._probes.get(sat.final_iteration)
        if prep is None:
            prep = self._prepared(ing, sizes_mod.exported(eg, ing), model)
        del eg
        exp, g = prep.exp, prep.priced
        stats.enodes, stats.eclasses = g.num_nodes, g.num_classes
        stats.blacklisted = len(prep.blacklist)
        orig_choice = emit_mod.original_choice(ing, exp, prep.original)
        lap("prepare")
        cost_before = dag.dag_cost(g, orig_choice)
        ex = {"method": o.method, "device": model.device.name, "cost_before": round(cost_before, 6)}
        kept = opaque_mod.estimate(ing, model.device, o.batch_size, o.unknown_dim)
        ex.update(opaque_ms=round(kept.ms, 6), opaque_unpriced=kept.unpriced)
        if sat.stop_reason in (StopReason.NO_RULES, StopReason.ERROR):
            ex.update(method="original", status="optimal", cost_after=ex["cost_before"])
            stats.extraction = ex
            # an egglog error not caused by one rule: the e-graph is not trusted (see egraph/saturate.py)
            stats.kept_input = "no rules" if sat.stop_reason == StopReason.NO_RULES else f"egglog error: {sat.error}"
            return graph_def
        self.progress(f"extracting from {g.num_nodes} e-nodes ({o.method}, at most {o.ilp_work} work units and "
                      f"{o.ilp_seconds:g} s)")
        try:
            # a probe's proven extraction of this e-graph is what extracting it again under the longer limit would
            # prove: a choice within the same relative gap of a bound
            res = prep.probed if prep.probed is not None and prep.probed.status == "optimal" else None
            ex["from_probe"] = res is not None
            if res is None:
                res = extract(g, o.method, o.ilp_seconds, o.solver, rel_gap=o.rel_gap, work=o.ilp_work,
                              whole_first=self._whole_first(), previous=prep.probed)
        except NoExtraction as e:
            ex.update(status="fallback", cost_after=ex["cost_before"], error=str(e))
            stats.extraction = ex
            stats.kept_input = "no acyclic extraction"
            return graph_def
        ex.update(status=res.status, cost_after=round(res.dag_cost, 6), greedy_cost=res.greedy_dag_cost,
                  gap=res.gap, bound=res.bound, solver=res.solver, seconds=round(res.seconds, 4), acyclic=res.acyclic,
                  work=res.work, clocked=res.clocked, parts=res.parts)
        stats.extraction = ex
        lap("extract")
        if not res.dag_cost < cost_before:
            stats.kept_input = "extracted graph is not predicted faster"
            ex["cost_after"] = ex["cost_before"]
            return graph_def
        gain = predicted_gain(cost_before, res.dag_cost, model.device, opaque_ms=kept.ms)
        # the whole call's predicted speed-up (its fixed cost and the opaque ops' work on both sides), which is what
        # BENCHMARKS.md holds against measured latency; cost_before / cost_after alone overstates it
        ex["predicted_gain"] = round(gain, 6)
        if gain < 1 + o.min_gain and o.original_cost_factor == 1:
            stats.kept_input = (f"extracted graph is predicted only {gain:.4f}x as fast "
                                f"(under --min_gain={o.min_gain:g})")
            ex["cost_after"] = ex["cost_before"]
            return graph_def
        stats.rules_applied = rules_applied(g, exp, res.choice, prep.original, self.ruleset)
        out = emit_mod.emit(ing, exp, res.choice)
        lap("emit")
        failed = grappler.runtime_error(out, item, o.min_variable_elements)
        if failed is not None and self.remapper_guard and (guarded := remapper_guard.optimize(out, item)) is not out \
                and grappler.runtime_error(guarded, item, o.min_variable_elements) is None:
            # the remapper's failure on a residual Add read by an activation and by another node: the guard's equal
            # form of the activation (passes/remapper_guard.py, run after this pass by default) avoids it. F39 made
            # Xception's whole residual chain such sums: its MatMuls give the chain static H and W, and Grappler
            # fuses a conv + bias + Add only where both shapes are known equal. The prices stay the extraction's: the
            # guard's activation runs unfused either way (its Add has two readers).
            out, failed = guarded, None
            stats.remapper_guarded = True
        lap("grappler_check")
        if failed is not None and grappler.runtime_error(graph_def, item, o.min_variable_elements) is None:
            # TF would run the rewritten graph without that optimizer's fusions: keep what it runs well
            stats.kept_input = f"TF's Grappler fails on the rewritten graph: {failed}"
            stats.rules_applied = {}
            return graph_def
        return out
