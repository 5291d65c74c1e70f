"""The e-graph pass: GraphDef -> egglog terms -> (saturate) -> export -> choose -> GraphDef.

Saturation and rules arrive with the rule-set issue; with no rules the e-graph holds exactly the input graph and the
chosen e-nodes are the original ones, so the pass reproduces its (canonical) input.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from tensat_tf.egraph import emit as emit_mod
from tensat_tf.egraph import export as export_mod
from tensat_tf.egraph import ingest as ingest_mod
from tensat_tf.egraph import language
from tensat_tf.item import GrapplerItem

NAME = name = "tensat"


@dataclasses.dataclass
class TensatStats:
    typed_nodes: int = 0
    opaque_nodes: int = 0
    enodes: int = 0
    eclasses: int = 0
    iterations: int = 0
    stop_reason: str = "no_rules"
    extraction_method: str = "original"
    extraction_status: str = "optimal"
    timing_s: dict = dataclasses.field(default_factory=dict)


class TensatPass:
    name = NAME

    def __init__(self):
        self.stats: Optional[TensatStats] = None

    def optimize(self, graph_def, item: GrapplerItem):
        stats = TensatStats()
        t = time.perf_counter()

        def lap(stage):
            nonlocal t
            now = time.perf_counter()
            stats.timing_s[stage] = round(now - t, 4)
            t = now

        ing = ingest_mod.ingest(graph_def, item)
        eg = language.new_egraph()
        ingest_mod.load(eg, ing)
        lap("ingest")
        exp = export_mod.export(eg, ing.roots)
        lap("export")
        choice = emit_mod.original_choice(ing, exp)
        lap("extract")
        out = emit_mod.emit(ing, exp, choice)
        lap("emit")
        stats.typed_nodes, stats.opaque_nodes = len(ing.typed), len(ing.opaque)
        stats.enodes, stats.eclasses = exp.egraph.num_nodes, exp.egraph.num_classes
        self.stats = stats
        return out


def optimize(graph_def, item: GrapplerItem):
    return TensatPass().optimize(graph_def, item)
