"""The saturation driver: runs the rules one iteration at a time under budgets, because egglog 13.2 has none.

Each iteration:
  1. picks the active rules: not banned, and multi-pattern rules only in the first `k_multi` iterations (TENSAT: their
     matches grow as a cross product, doubly exponentially over iterations);
  2. `push`es, runs one iteration of the active rules as one combined ruleset (search all, then apply all, as egg
     does), then saturates the analysis (shapes, IsConst) so the next iteration's guards see the new terms;
  3. if the e-graph now exceeds the node limit, `pop`s (the iteration never happened), bans the rule with the most
     matches in it and retries without it; if egglog raised (a rule derived a shape that contradicts TF's, which the
     `shape` function refuses to merge), pops and bans the rules that raise when run alone;
  4. stops with a typed reason: saturated, iteration limit, node limit (nothing left to run under the limit), or time
     limit. The time limit is checked before an iteration starts, against the previous iteration's duration scaled by
     its growth, because an egglog run cannot be interrupted.

E-nodes are counted over the term constructors only (the analysis tables are excluded), which is what the exported
e-graph and the ILP see.
"""
from __future__ import annotations

import dataclasses
import enum
import time
from typing import Optional

from egglog import bindings

from tensat_tf import ops
from tensat_tf.egraph import language as L
from tensat_tf.rules import RuleSet, compile_rule, ruleset_name

TERM_FUNCTIONS = frozenset([s.term for s in ops.TABLE.values()] + list(ops.STRUCTURAL))


class StopReason(str, enum.Enum):
    NO_RULES = "no_rules"
    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration_limit"
    NODE_LIMIT = "node_limit"
    TIME_LIMIT = "time_limit"


@dataclasses.dataclass(frozen=True)
class Budget:
    iterations: int = 15
    node_limit: int = 50_000
    seconds: Optional[float] = None
    k_multi: int = 1


@dataclasses.dataclass
class IterationStats:
    index: int
    enodes: int
    seconds: float
    matches: dict                       # rule name -> matches this iteration
    banned: list = dataclasses.field(default_factory=list)    # rules banned while trying this iteration
    rolled_back: int = 0                # attempts undone by pop


@dataclasses.dataclass
class SaturationResult:
    stop_reason: StopReason
    iterations: list
    enodes_before: int
    enodes: int
    banned: list
    seconds: float

    def to_json(self) -> dict:
        return {
            "stop_reason": self.stop_reason.value, "iterations": len(self.iterations),
            "enodes_before": self.enodes_before, "enodes_after_saturation": self.enodes, "banned": self.banned,
            "seconds": round(self.seconds, 4),
            "per_iteration": [dataclasses.asdict(i) for i in self.iterations],
        }


def _run(eg, text: str):
    return eg.run_program(*eg.parse_program(text))


def _function_sizes(eg) -> dict[str, int]:
    (out,) = _run(eg, "(print-size)")
    return dict(out.sizes)


def _enodes(sizes: dict[str, int]) -> int:
    return sum(n for name, n in sizes.items() if name in TERM_FUNCTIONS)


def _heads(e, out: set) -> set:
    if isinstance(e, list) and e:
        if isinstance(e[0], str) and e[0] in TERM_FUNCTIONS:
            out.add(e[0])
        for x in e[1:]:
            _heads(x, out)
    return out


class Saturator:
    """Rules are compiled into the e-graph lazily, the first time they can match: a rule whose left side names a
    constructor with no e-node (Conv2D rules on BERT) cannot match, and with ~160 rules the per-rule cost of egglog's
    search dominates small graphs. The check is redone every iteration, since right sides add constructors."""

    def __init__(self, eg, ruleset: RuleSet, budget: Budget, progress=None):
        self.eg, self.rs, self.budget = eg, ruleset, budget
        self.progress = progress or (lambda text: None)
        self.counter = 0
        self.loaded: set[str] = set()
        self.heads = {r.name: frozenset(set().union(*(_heads(src, set()) for src in r.sources))) for r in ruleset.rules}

    def _load(self, names: list[str]) -> None:
        todo = [n for n in names if n not in self.loaded]
        if todo:
            _run(self.eg, "\n".join(compile_rule(self.rs.by_name(n)) for n in todo))
            self.loaded.update(todo)

    def _combined(self, names: list[str]) -> str:
        self.counter += 1
        name = f"iter_{self.counter}_"
        _run(self.eg, f"(unstable-combined-ruleset {name} {' '.join(ruleset_name(n) for n in names)})")
        return name

    def _one(self, names: list[str]) -> tuple[dict, bool]:
        """One iteration of `names` plus the analysis. -> (matches per rule, whether the e-graph changed: new e-nodes
        or unions). May raise (egglog errors)."""
        combined = self._combined(names)
        outs = _run(self.eg, f"(run-schedule (run {combined}))")
        matches: dict = {}
        updated = False
        for o in outs:
            if isinstance(o, bindings.RunScheduleOutput):
                updated = updated or bool(o.report.updated)
                for k, v in o.report.num_matches_per_rule.items():
                    matches[k] = matches.get(k, 0) + int(v)
        L.run_shapes(self.eg)
        return matches, updated

    def _culprits(self, names: list[str]) -> list[str]:
        """Rules that raise when run alone (each in its own push/pop)."""
        bad = []
        for n in names:
            _run(self.eg, "(push)")
            try:
                self._one([n])
            except Exception:  # noqa: BLE001 - egglog errors surface as generic exceptions
                bad.append(n)
            finally:
                _run(self.eg, "(pop)")
        return bad or list(names)

    def run(self) -> SaturationResult:
        b = self.budget
        t0 = time.perf_counter()
        sizes = _function_sizes(self.eg)
        size0 = size = _enodes(sizes)
        banned: list[str] = []
        iters: list[IterationStats] = []
        if not self.rs.rules:
            return SaturationResult(StopReason.NO_RULES, iters, size0, size, banned, 0.0)
        last_secs, growth = 0.0, 1.0
        reason = StopReason.ITERATION_LIMIT
        for k in range(b.iterations):
            present = {name for name, n in sizes.items() if n > 0}
            active = [r.name for r in self.rs.rules if r.name not in banned and (not r.multi or k < b.k_multi)
                      and self.heads[r.name] <= present]
            if not active:
                reason = StopReason.SATURATED if not banned else StopReason.NODE_LIMIT
                break
            if b.seconds is not None and time.perf_counter() - t0 + last_secs * growth > b.seconds:
                reason = StopReason.TIME_LIMIT
                break
            stats = IterationStats(k + 1, size, 0.0, {})
            ti = time.perf_counter()
            self._load(active)
            while active:
                _run(self.eg, "(push)")
                try:
                    matches, updated = self._one(active)
                except Exception:  # noqa: BLE001
                    _run(self.eg, "(pop)")
                    stats.rolled_back += 1
                    for n in self._culprits(active):
                        banned.append(n)
                        stats.banned.append(n)
                    active = [n for n in active if n not in banned]
                    continue
                sizes = _function_sizes(self.eg)
                new_size = _enodes(sizes)
                if new_size > b.node_limit:
                    _run(self.eg, "(pop)")
                    stats.rolled_back += 1
                    worst = max(sorted(matches), key=lambda n: matches[n]) if matches else active[0]
                    banned.append(worst)
                    stats.banned.append(worst)
                    active = [n for n in active if n != worst]
                    continue
                break
            else:
                matches, new_size, updated = {}, size, False
            stats.seconds = round(time.perf_counter() - ti, 4)
            stats.enodes = new_size
            stats.matches = {n: c for n, c in sorted(matches.items()) if c}
            iters.append(stats)
            self.progress(f"saturation iteration {stats.index}: {new_size} e-nodes, {len(stats.matches)} rules "
                          f"matched" + (f", banned {', '.join(stats.banned)}" if stats.banned else ""))
            last_secs, growth = stats.seconds, max(1.0, new_size / max(size, 1))
            if not active:
                reason = StopReason.NODE_LIMIT
                break
            if not updated and not stats.rolled_back:
                reason = StopReason.SATURATED
                size = new_size
                break
            size = new_size
        return SaturationResult(reason, iters, size0, size, banned, time.perf_counter() - t0)


def saturate(eg, ruleset: RuleSet, budget: Budget = Budget(), progress=None) -> SaturationResult:
    """progress: optional callable taking one line of text per iteration."""
    return Saturator(eg, ruleset, budget, progress).run()
