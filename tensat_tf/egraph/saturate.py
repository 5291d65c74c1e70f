"""The saturation driver: runs the rules one iteration at a time under budgets, because egglog 13.2 has none.

Each iteration:
  1. picks the active rules: not banned, and multi-pattern rules only in the first `k_multi` iterations (TENSAT: their
     matches grow as a cross product, doubly exponentially over iterations);
  2. `push`es, runs one iteration of the active rules as one combined ruleset (search all, then apply all, as egg
     does), then saturates the analysis (shapes, IsConst) so the next iteration's guards see the new terms, then runs
     the eager rules (rules/syntax.py `:schedule eager`: moves that pay only once a chain of them is done) to their
     fixpoint, each round followed by the analysis; they are never backed off or banned;
  3. backoff (egg's BackoffScheduler, which egglog 13.2 has only inside one run-schedule, so it cannot persist across
     our push/pop iterations): a rule whose matches exceed `match_limit << times_banned` is banned for
     `ban_length << times_banned` iterations and its matches are not applied: the iteration is `pop`ped and rerun
     without it (the other rules' matches are the same, since every rule searches the same e-graph); a multi rule,
     whose matches grow as a product, is counted before the iteration instead (its query alone, with no action) and
     banned before anything is applied. This is what keeps associativity/commutativity (TENSAT's S024/S028/S057 on
     LayerNorm's Mul/AddV2 chains) from filling the e-graph while the rules that fire a few times (the Q/K/V merges)
     keep running;
  4. if the e-graph now exceeds the node limit, `pop`s (the iteration never happened), bans the rule with the most
     matches in it for good and retries without it; if egglog raised (a rule derived a shape that contradicts TF's,
     which the `shape` function refuses to merge), pops and bans the rules that raise when run alone for good; if
     none does, or the analysis raises with no rule run, stops with an error (the e-graph is the previous
     iteration's, but the cause is not a rule's: the pass keeps its input graph);
  5. with a probe (the pass gives one: export + extraction of the current e-graph), stops when the best cost has not
     improved for `patience` iterations, and rolls the e-graph back to the iteration of the best cost: on the
     transformer exports every gain (the Q/K/V merges) is in the first iterations, and what associativity/
     commutativity add later only makes the ILP slower (and, under its time limit, often worse). The probe starts after
     iteration 2 (the baseline), so a model that saturates in two iterations (ResNet) pays nothing for it; its
     time counts neither against the time budget nor in the forecast of the next iteration: it is bounded on its own
     (the pass's probe_work and probe_seconds), and a budget it spent would stop saturation on the machine's speed;
  6. stops with a typed reason: saturated (nothing changed and no rule is backed off: as in egg, when only backed-off
     rules are left, their bans are shortened so the earliest one ends now), iteration limit, node limit (nothing
     left to run under the limit), work limit, time limit, no gain, or error. The work limit counts the e-nodes the
     iterations search (each searches the e-graph it starts from, so the next one's work is known before it starts):
     it decides the same way on every machine. The time limit is the backstop: checked before an iteration starts,
     against the previous iteration's duration scaled by its growth, because an egglog run cannot be interrupted; a
     stop on it depends on the machine's speed.

The node limit, the work budget and the time budget scale with the input (`Budget.limits`): a 300-e-node encoder has
nothing to gain from 50,000 e-nodes that the ILP then cannot solve in its time limit.

E-nodes are counted over the term constructors only (the analysis tables are excluded), which is what the exported
e-graph and the ILP see.
"""
from __future__ import annotations

import dataclasses
import enum
import time
from typing import Optional

from tensat_tf import terms
from tensat_tf.egraph.session import EgglogError, RunReport, Session
from tensat_tf.options import PROBE_MIN_GAIN, Budget
from tensat_tf.rules import RuleSet, compile_rule, counting_name, ruleset_name
from tensat_tf.rules.syntax import to_text, variables

# Probe costs this close (relative) are the same program summed in another order: the earlier e-graph, smaller and
# already proven, is kept (ResNet50 at 224 pixels: 75.31851173979794 after 75.31851173979796 kept an e-graph whose
# probe had stopped unproven, and the final extraction ran again for 1.4 s).
_SAME_COST = 1e-9

TERM_FUNCTIONS = terms.NAMES


class StopReason(str, enum.Enum):
    NO_RULES = "no_rules"
    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration_limit"
    NODE_LIMIT = "node_limit"
    WORK_LIMIT = "work_limit"           # the e-nodes the iterations searched (Budget.work): the same on every machine
    TIME_LIMIT = "time_limit"           # the clock, the backstop: depends on the machine
    NO_GAIN = "no_gain"
    ERROR = "error"                     # egglog raised and no rule is to blame (SaturationResult.error says what)


class Backoff:
    """egg's BackoffScheduler state: per rule, how often it was banned and the iteration its ban ends.

    Rules with one left side and guards, the same up to variable names (`groups`: rule -> them), match the same
    e-nodes and share one budget: their matches are summed, and the group is banned together. TENSAT's generated rules state
    one identity in several operand orders (S036, S037, S040, S047, S057 and S058 all distribute a Mul over an
    AddV2): on a 12-layer GPT-2-style decoder each matched 798 layer-norm e-nodes in one iteration, under egg's limit
    of 1,000 alone, 4,788 together, and their e-nodes made the next iteration and its probe take 3 s for nothing the
    probe could extract (BENCHMARKS.md)."""

    def __init__(self, match_limit: Optional[int], ban_length: int, groups: Optional[dict] = None):
        self.match_limit, self.ban_length = match_limit, ban_length
        self.groups = groups or {}
        self.times_banned: dict[str, int] = {}
        self.banned_until: dict[str, int] = {}

    def _key(self, rule: str) -> str:
        return self.groups.get(rule, rule)

    def banned(self, rule: str, iteration: int) -> bool:
        return self.banned_until.get(self._key(rule), 0) > iteration

    def over(self, matches: dict, iteration: int) -> list[str]:
        """Ban (and return) the rules whose group's matches in `iteration` exceed its threshold."""
        if self.match_limit is None:
            return []
        total: dict[str, int] = {}
        for rule, n in matches.items():
            total[self._key(rule)] = total.get(self._key(rule), 0) + n
        hit = set()
        for key, n in sorted(total.items()):
            t = self.times_banned.get(key, 0)
            if n > self.match_limit << t:
                self.banned_until[key] = iteration + (self.ban_length << t)
                self.times_banned[key] = t + 1
                hit.add(key)
        return sorted(rule for rule in matches if self._key(rule) in hit)

    def can_stop(self, iteration: int) -> bool:
        """egg's can_stop: true when no rule is banned; otherwise shortens every ban so the earliest ends now."""
        left = [r for r, until in self.banned_until.items() if until > iteration]
        if not left:
            return True
        delta = min(self.banned_until[r] for r in left) - iteration
        for r in left:
            self.banned_until[r] -= delta
        return False


@dataclasses.dataclass
class IterationStats:
    index: int
    enodes: int
    seconds: float
    matches: dict                       # rule name -> matches this iteration
    banned: list = dataclasses.field(default_factory=list)    # rules banned for good while trying this iteration
    rolled_back: int = 0                # attempts undone by pop
    backed_off: list = dataclasses.field(default_factory=list)  # rules the backoff scheduler banned this iteration
    probe_cost: Optional[float] = None  # the probe's best cost of the e-graph after this iteration


@dataclasses.dataclass
class SaturationResult:
    stop_reason: StopReason
    iterations: list
    enodes_before: int
    enodes: int
    banned: list
    seconds: float
    node_limit: int = 0                 # the limits this run had (Budget.limits of the input)
    seconds_limit: Optional[float] = None
    work_limit: Optional[int] = None
    searched: int = 0                   # the e-nodes the iterations searched (the work budget's measure)
    backed_off: list = dataclasses.field(default_factory=list)
    error: Optional[str] = None         # egglog's message when stop_reason is ERROR
    # the e-graph was rolled back to the state after this many iterations (the probe's best), or None
    kept_iterations: Optional[int] = None
    # the e-graph left is the one after this many iterations (the later ones, if any, changed nothing or were rolled
    # back): the number a probe of it was called with
    final_iteration: int = 0

    def to_json(self) -> dict:
        out = {
            "stop_reason": self.stop_reason.value, "iterations": len(self.iterations),
            "enodes_before": self.enodes_before, "enodes_after_saturation": self.enodes, "banned": self.banned,
            "backed_off": self.backed_off, "node_limit": self.node_limit,
            "seconds_limit": None if self.seconds_limit is None else round(self.seconds_limit, 4),
            "work_limit": self.work_limit, "searched": self.searched,
            "seconds": round(self.seconds, 4),
            "per_iteration": [dataclasses.asdict(i) for i in self.iterations],
        }
        if self.error is not None:      # only then: reports of runs without an error keep their bytes
            out["error"] = self.error
        if self.kept_iterations is not None:
            out["kept_iterations"] = self.kept_iterations
        return out


def _enodes(sizes: dict[str, int]) -> int:
    return sum(n for name, n in sizes.items() if name in TERM_FUNCTIONS)


def _heads(e, out: set) -> set:
    if isinstance(e, list) and e:
        if isinstance(e[0], str) and e[0] in TERM_FUNCTIONS:
            out.add(e[0])
        for x in e[1:]:
            _heads(x, out)
    return out


_ANALYSIS = "shapes"                    # the analysis ruleset (egraph/language.py)
# Rounds of the eager rules (each followed by the analysis) after an iteration: a bound, not a budget. They stop
# earlier at their fixpoint; a Keras Conv1D layer's Squeeze moves past at most its bias, batch norm and activation
# (five ops, seven for a swish), so 32 rounds cover chains far longer than any layer writes.
EAGER_ROUNDS = 32


class _NoCulprit(Exception):
    """egglog raised in an iteration, but no rule raises alone: a saturation error, not a rule to ban."""


class Saturator:
    """Rules are compiled into the e-graph lazily, the first time they can match: a rule whose left side names a
    constructor with no e-node (Conv2D rules on BERT) cannot match, and with ~160 rules the per-rule cost of egglog's
    search dominates small graphs. The check is redone every iteration, since right sides add constructors."""

    def __init__(self, eg, ruleset: RuleSet, budget: Budget, progress=None, probe=None):
        self.session = eg if isinstance(eg, Session) else Session(eg)
        self.rs, self.budget, self.probe = ruleset, budget, probe
        self.progress = progress or (lambda text: None)
        self.counter = 0
        self.loaded: set[str] = set()
        self.heads = {r.name: frozenset(set().union(*(_heads(src, set()) for src in r.sources))) for r in ruleset.rules}
        self.eager: list[str] = []            # the eager rules that can match now (_eager)
        self.eager_set = ""                   # ... declared as this combined ruleset

    def _load(self, names: list[str]) -> None:
        todo = [n for n in names if n not in self.loaded]
        if todo:
            self.session.run_program("\n".join(compile_rule(self.rs.by_name(n)) for n in todo))
            self.loaded.update(todo)

    def _over_on_count(self, active: list[str], k: int, backoff: Backoff) -> list[str]:
        """Step 3's check made first for the active multi rules, whose matches grow as a product: their queries run
        alone with no action (compile_rule's count_only: nothing changes), and those over the backoff threshold are
        banned before anything is applied, as egg's BackoffScheduler checks a rule's matches after its search and
        before applying them. Found over only after the whole iteration, a multi rule cost that iteration twice:
        Inception-ResNet-v2's M08 (Relu merges), 0.4 s of its 4.3 s pass. -> the rules banned.

        Only in the first iteration, before any rule has run (multi rules run in the first k_multi iterations, 1 by
        default): egglog matches semi-naively, so a rule that ran reports only the matches new since its last run,
        and a twin run for the first time later would count them all (tried for the other rules near their
        threshold: the twin of a test's associativity rule counted 75 where the rule itself reported 35)."""
        multi = [n for n in active if self.rs.by_name(n).multi] if k == 0 else []
        if not multi or backoff.match_limit is None:
            return []
        try:
            self.session.run_program("\n".join(compile_rule(self.rs.by_name(n), count_only=True) for n in multi))
            report = self.session.run(self.session.combine("count_", [ruleset_name(counting_name(n)) for n in multi]))
        except EgglogError:             # (a query alone changes nothing; if it raised, the iteration's own check stays)
            return []
        return backoff.over({n: report.matches.get(counting_name(n), 0) for n in multi}, k)

    def _one(self, names: list[str]) -> tuple[dict, bool]:
        """One iteration of `names` plus the analysis. -> (matches per rule, whether the e-graph changed: new e-nodes
        or unions). Raises EgglogError."""
        self.counter += 1
        report = RunReport(False, {})
        if names:
            report = self.session.run(self.session.combine(f"iter_{self.counter}_", [ruleset_name(n) for n in names]))
            self.session.saturate(_ANALYSIS)
        if self.eager:
            eager = self.session.schedule(
                f"(repeat {EAGER_ROUNDS} (seq (run {self.eager_set}) (saturate (run {_ANALYSIS}))))")
            for n in self.eager:                      # (the analysis' matches are in the schedule's report too)
                if eager.matches.get(n):
                    report.matches[n] = report.matches.get(n, 0) + eager.matches[n]
            report.updated = report.updated or eager.updated
        return report.matches, report.updated

    def _eager(self, present: set) -> None:
        """Load the eager rules (syntax.py `:schedule eager`) whose left side can match in an e-graph holding the
        constructors `present`, and declare them as one ruleset when that set grew (right sides only add
        constructors, so it only grows: its size names it)."""
        names = [r.name for r in self.rs.rules if r.eager and self.heads[r.name] <= present]
        if names != self.eager:
            self._load(names)
            self.eager_set = self.session.combine(f"eager_{len(names)}_", [ruleset_name(n) for n in names])
            self.eager = names

    def _culprits(self, names: list[str]) -> list[str]:
        """Rules that raise when run alone (each in its own push/pop); none when the analysis or the eager rules raise
        without any step rule run (the e-graph itself is inconsistent, or an eager rule is to blame, which is never
        banned) or only the rules together raise: not a rule to ban, an error."""
        with self.session.push():
            try:
                self.session.saturate(_ANALYSIS)
                self._one([])                   # the eager rules alone: every attempt runs them
            except EgglogError:
                return []
        bad = []
        for n in names:
            with self.session.push():
                try:
                    self._one([n])
                except EgglogError:
                    bad.append(n)
        return bad

    def _iteration(self, active: list[str], k: int, node_limit: int, backoff: Backoff, stats: IterationStats,
                   banned: list[str], backed_off: list[str]) -> Optional[tuple[dict, bool, dict]]:
        """Iteration k (steps 2-4 of the module docstring): tries `active`, undoing and narrowing it until an attempt
        is within the budgets. -> (matches, updated, function sizes) of the attempt kept, None if every attempt was
        undone. Raises _NoCulprit when egglog raised and no rule is to blame."""
        while active or self.eager:             # (eager rules alone: one attempt, see the end of the loop)
            failure, over = None, []
            with self.session.push() as frame:
                try:
                    matches, updated = self._one(active)
                except EgglogError as e:
                    failure = e
                else:
                    over = backoff.over({n: c for n, c in matches.items() if n in active}, k)
                    if not over:
                        sizes = self.session.sizes()
                        if _enodes(sizes) <= node_limit:
                            frame.keep()
            if frame.kept:
                return matches, updated, sizes
            stats.rolled_back += 1
            if not active:                      # the eager rules alone: nothing to narrow
                if failure is not None:
                    raise _NoCulprit(str(failure))
                return None
            if failure is not None:
                drop = self._culprits(active)
                if not drop:
                    raise _NoCulprit(str(failure))
                banned.extend(drop)
                stats.banned.extend(drop)
            elif over:
                drop = over
                stats.backed_off.extend(over)
                backed_off.extend(n for n in over if n not in backed_off)
            else:                               # over the node limit: ban the rule with the most matches
                ran = sorted(n for n in matches if n in active)     # (eager rules are not banned)
                drop = [max(ran, key=lambda n: matches[n]) if ran else active[0]]
                banned.extend(drop)
                stats.banned.extend(drop)
            active = [n for n in active if n not in drop]
        return None

    def run(self) -> SaturationResult:
        b = self.budget
        t0 = time.perf_counter()
        sizes = self.session.sizes()
        size0 = size = _enodes(sizes)
        node_limit, seconds, work = b.limits(size0)
        banned: list[str] = []                  # for good (node limit, egglog errors)
        backoff = Backoff(b.match_limit, b.ban_length, {r.name: _left_side(r) for r in self.rs.rules
                                                         if len(r.sources) == 1})
        backed_off: list[str] = []              # every rule the scheduler banned, once, in order
        iters: list[IterationStats] = []
        if not self.rs.rules:
            return SaturationResult(StopReason.NO_RULES, iters, size0, size, banned, 0.0, node_limit, seconds, work)
        last_secs, growth = 0.0, 1.0
        probe_secs = 0.0                        # the probes' time: bounded by their own limits, not the budget's
        searched = 0                            # e-nodes searched so far: the work budget's measure
        best, stale = float("inf"), 0           # the probe's best cost so far, iterations since it improved
        best_at = None                          # (iterations done, session depth) when the probe found `best`
        changed_at = 0                          # iterations done when the e-graph last changed
        reason, error = StopReason.ITERATION_LIMIT, None
        for k in range(b.iterations):
            present = {name for name, n in sizes.items() if n > 0}
            runnable = [r.name for r in self.rs.rules if r.name not in banned and (not r.multi or k < b.k_multi)
                        and self.heads[r.name] <= present and not r.eager]
            self._eager(present)
            if not runnable and not self.eager:
                reason = StopReason.SATURATED if not banned else StopReason.NODE_LIMIT
                break
            active = [n for n in runnable if not backoff.banned(n, k)]
            if not active:                      # only backed-off rules left: end the earliest ban now (egg)
                backoff.can_stop(k)
                active = [n for n in runnable if not backoff.banned(n, k)]
            if work is not None and searched + size > work:     # this iteration would search `size` e-nodes
                reason = StopReason.WORK_LIMIT
                break
            if seconds is not None and time.perf_counter() - t0 - probe_secs + last_secs * growth > seconds:
                reason = StopReason.TIME_LIMIT
                break
            stats = IterationStats(k + 1, size, 0.0, {})
            ti = time.perf_counter()
            self._load(active)
            tl = time.perf_counter()            # compiling rules is a one-off: not in the next iteration's forecast
            over = self._over_on_count(active, k, backoff)
            if over:
                stats.backed_off.extend(over)
                backed_off.extend(n for n in over if n not in backed_off)
                active = [n for n in active if n not in over]
            try:
                kept = self._iteration(active, k, node_limit, backoff, stats, banned, backed_off)
            except _NoCulprit as e:
                reason, error = StopReason.ERROR, str(e)
                break
            if kept is None:                    # every attempt was undone: the e-graph is the previous iteration's
                matches, new_size, updated = {}, size, False
                sizes = self.session.sizes()
            else:
                matches, updated, sizes = kept
                new_size = _enodes(sizes)
                if updated:
                    changed_at = k + 1
            run_secs = time.perf_counter() - tl
            # every attempt searched the e-graph the iteration started from (the undone ones and the kept one)
            searched += size * (stats.rolled_back + (kept is not None))
            if updated and k > 0 and self.probe is not None and b.patience is not None:
                tp = time.perf_counter()
                stats.probe_cost = self.probe(self.session.egraph, k + 1)
                probe_secs += time.perf_counter() - tp
                if stats.probe_cost is not None and stats.probe_cost < best * (1 - _SAME_COST):
                    # a step under PROBE_MIN_GAIN does not pay for another iteration, but its probe's program is the
                    # cheapest found, proven as closely as any: saturation ends on this e-graph, not an earlier one
                    stale = 0 if stats.probe_cost < best * (1 - PROBE_MIN_GAIN) else stale + 1
                    best, best_at = stats.probe_cost, (k + 1, self.session.depth)
                else:
                    stale += 1
            stats.seconds = round(time.perf_counter() - ti, 4)
            stats.enodes = new_size
            stats.matches = {n: c for n, c in sorted(matches.items()) if c}
            iters.append(stats)
            self.progress(f"saturation iteration {stats.index}: {new_size} e-nodes, {len(stats.matches)} rules "
                          f"matched" + (f", banned {', '.join(stats.banned)}" if stats.banned else "")
                          + (f", backed off {', '.join(stats.backed_off)}" if stats.backed_off else ""))
            last_secs, growth = run_secs, max(1.0, new_size / max(size, 1))
            size = new_size
            if stale >= (b.patience or 0) > 0:
                reason = StopReason.NO_GAIN
                break
            if not updated and not stats.banned:
                # nothing changed: saturated unless rules are backed off (then their bans end sooner, as in egg)
                if backoff.can_stop(k + 1) and not stats.backed_off:
                    reason = StopReason.SATURATED
                    break
            elif not updated and not [n for n in runnable if n not in banned]:
                reason = StopReason.NODE_LIMIT
                break
        kept_iterations = None
        if reason in (StopReason.NO_GAIN, StopReason.WORK_LIMIT, StopReason.TIME_LIMIT) and stale > 0 \
                and best_at is not None:
            # The iterations since the probe's best added nothing it could extract, only e-nodes that make the final
            # ILP slower (and, under its time limit, often worse: MobileNetV3-Small's probe went 0.597 -> 0.600 ->
            # 0.616 over two more iterations). Every kept iteration left the state before it on egglog's stack
            # (Session.push), so popping down to the depth after the best iteration restores that e-graph.
            kept_iterations, depth = best_at
            while self.session.depth > depth:
                self.session.pop()
            size = _enodes(self.session.sizes())
        return SaturationResult(reason, iters, size0, size, banned, time.perf_counter() - t0, node_limit, seconds,
                                work, searched, backed_off, error, kept_iterations,
                                changed_at if kept_iterations is None else kept_iterations)


def _left_side(rule) -> str:
    """A single rule's left side and guards with its variables renamed in order of appearance: rules that share them
    match the same e-nodes (Backoff's groups)."""
    names = {v: f"?{i}" for i, v in enumerate(variables(rule.sources[0]))}

    def renamed(e):
        return [renamed(x) for x in e] if isinstance(e, list) else names.get(e, e)
    return to_text(renamed(rule.sources[0])) + " :when " + to_text(renamed(list(rule.guards)))


def saturate(eg, ruleset: RuleSet, budget: Budget = Budget(), progress=None, probe=None) -> SaturationResult:
    """eg: an egglog `bindings.EGraph` or a Session over one. progress: optional callable taking one line of text per
    iteration. probe: optional callable taking the e-graph (the `bindings.EGraph`) and returning the cost of the best
    program extractable from it (None if none), called after every iteration that changed the e-graph; saturation stops (NO_GAIN) when it has not improved for `budget.patience` iterations."""
    return Saturator(eg, ruleset, budget, progress, probe).run()
