"""The saturation driver's backoff scheduler (egg's BackoffScheduler) and the budgets scaled to the input."""
import pytest

from tensat_tf import rules
from tensat_tf.egraph import ingest, language
from tensat_tf.egraph.saturate import Backoff, StopReason, saturate
from tensat_tf.egraph.session import Session
from tensat_tf.options import Budget

RULES = ("(family t)\n"
         "(rule ASSOC (AddV2 (AddV2 ?a ?b) ?c) => (AddV2 ?a (AddV2 ?b ?c)) :test ((?a 2 2) (?b 2 2) (?c 2 2)))\n"
         "(rule MULC (Mul ?a ?b) => (Mul ?b ?a) :test ((?a 2 2) (?b 2 2)))\n")


def test_backoff_thresholds_and_bans_double():
    b = Backoff(match_limit=10, ban_length=5)
    assert b.over({"r": 10, "s": 3}, 0) == []                 # at the limit: applied
    assert b.over({"r": 11}, 1) == ["r"]                      # over it: banned for 5 iterations
    assert [b.banned("r", k) for k in (2, 5, 6)] == [True, True, False]
    assert b.over({"r": 20}, 6) == []                         # threshold is now 10 << 1
    assert b.over({"r": 21}, 7) == ["r"] and b.banned_until["r"] == 7 + 10
    assert not b.can_stop(8)                                  # banned: no saturation; the ban is shortened
    assert not b.banned("r", 8) and b.can_stop(8)
    assert Backoff(None, 5).over({"r": 10 ** 9}, 0) == []     # no match limit: no backoff


def test_rules_of_one_left_side_share_one_budget():
    """Rules with the same left side and guards up to variable names (TENSAT's S036/S037/... state one identity in
    several operand orders) match the same e-nodes: their matches are summed and the group is banned together."""
    from tensat_tf.egraph.saturate import _left_side
    from tensat_tf.rules.syntax import parse_file
    _, parsed, _ = parse_file("(family t)\n"
                          "(rule D1 (Mul ?a (AddV2 ?b ?c)) => (AddV2 (Mul ?a ?b) (Mul ?a ?c)) "
                          ":test ((?a 2 2) (?b 2 2) (?c 2 2)))\n"
                          "(rule D2 (Mul ?x (AddV2 ?y ?z)) => (AddV2 (Mul ?x ?z) (Mul ?x ?y)) "
                          ":test ((?x 2 2) (?y 2 2) (?z 2 2)))\n"
                          "(rule D3 (Mul ?x (AddV2 ?y ?z)) => (AddV2 (Mul ?y ?x) (Mul ?z ?x)) :when ((const ?x)) "
                          ":test ((?x :weight 2 2) (?y 2 2) (?z 2 2)))\n", "<test>")
    keys = {r.name: _left_side(r) for r in parsed}
    assert keys["D1"] == keys["D2"] != keys["D3"]            # D3's guard: it matches other e-nodes
    b = Backoff(match_limit=10, ban_length=5, groups=keys)
    assert b.over({"D1": 6, "D3": 6}, 0) == []               # 6 each, in two groups
    assert b.over({"D1": 6, "D2": 6, "D3": 6}, 1) == ["D1", "D2"]    # 12 in D1's group: both banned
    assert b.banned("D2", 2) and b.banned("D1", 2) and not b.banned("D3", 2)
    assert Backoff(10, 5).over({"D1": 6, "D2": 6}, 0) == []  # without groups, per rule as in egg


def test_budget_scales_with_the_input_and_caps_hold():
    b = Budget()
    assert b.limits(100) == (2_000, 6.0, 20_000)              # floors
    assert b.limits(1_000) == (20_000, 15.0, 40_000)
    assert b.limits(10_000) == (50_000, 150.0, 400_000)       # the absolute node cap
    assert b.limits(100_000)[2] == 2_000_000                  # the absolute work cap
    assert Budget(seconds=3.0).limits(1_000)[1] == 3.0        # the absolute time cap
    assert Budget(node_limit=700, work=900, nodes_per_enode=None, seconds_per_enode=None,
                  work_per_enode=None).limits(1_000) == (700, None, 900)


def _egraph(n_mul=50):
    """x + c1 + ... + c6 (a left-deep AddV2 chain) and x * d1 * ... * d{n_mul} (a Mul chain)."""
    import tensorflow as tf
    from tensat_tf.item import GrapplerItem
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 4], name="x")
        y = x
        for i in range(6):
            y = tf.add(y, tf.constant(float(i + 1), shape=[4, 4]))
        z = x
        for i in range(n_mul):
            z = z * tf.constant(float(i + 2), shape=[4, 4])
        tf.identity(y, name="out")
        tf.identity(z, name="out2")
    gd = g.as_graph_def()
    ing = ingest.ingest(gd, GrapplerItem(feeds=["x:0"], fetches=["out:0", "out2:0"]))
    eg = language.new_egraph()
    ingest.load(eg, ing)
    last_mul = [n for n in gd.node if n.op == "Mul"][-1]
    return eg, ing, last_mul


def _rules(tmp_path, text=RULES):
    p = tmp_path / "t.rules"
    p.write_text(text)
    return rules.select([], extra_files=[str(p)])


def _commuted(eg, ing, mul) -> bool:
    a, b = (ing.output_lets[t if ":" in t else t + ":0"] for t in mul.input)
    return Session(eg).check(f"(= {ing.lets[mul.name]} (Mul {b} {a}))")


UNSCALED = dict(nodes_per_enode=None, seconds_per_enode=None, work_per_enode=None)


def test_rule_over_the_match_limit_is_banned_then_unbanned_after_its_ban_length(tmp_path):
    eg, ing, mul = _egraph()
    res = saturate(eg, _rules(tmp_path), Budget(iterations=10, match_limit=40, ban_length=2, **UNSCALED))
    it = res.iterations
    # iteration 1: MULC has 50 matches > 40: not applied, banned for 2 iterations; ASSOC keeps changing the e-graph
    assert it[0].backed_off == ["MULC"] and "ASSOC" in it[0].matches
    assert "MULC" not in it[1].matches and it[1].enodes > it[0].enodes
    # iteration 3 = 1 + ban length: back, under the doubled threshold (50 <= 80), and applied
    assert it[2].matches.get("MULC") == 50 and not it[2].backed_off
    assert res.stop_reason == StopReason.SATURATED and res.backed_off == ["MULC"]
    assert _commuted(eg, ing, mul)


PAIRS = ("(family t)\n"
         "(multi PAIRS ((Mul ?a ?b) => (Mul ?b ?a)) ((Mul ?c ?d) => (Mul ?d ?c)) :test ((?a 2 2) (?b 2 2) (?c 2 2) "
         "(?d 2 2)))\n")


@pytest.mark.parametrize("limit", [40, None])
def test_a_multi_rule_over_the_match_limit_is_banned_on_its_count_before_anything_is_applied(tmp_path, limit):
    """egg's BackoffScheduler counts a rule's matches after its search and before applying them; a multi rule's
    (50 x 49 ordered pairs of the chain's Muls here) are counted first by its query alone, so the iteration is not
    run, undone and run again without it."""
    eg, ing, mul = _egraph()
    res = saturate(eg, _rules(tmp_path, PAIRS), Budget(iterations=3, match_limit=limit, **UNSCALED))
    first = res.iterations[0]
    if limit is None:                                         # no backoff: applied, and the Muls commuted
        assert first.matches == {"PAIRS": 50 * 49} and _commuted(eg, ing, mul)
        return
    assert first.backed_off == ["PAIRS"] and first.rolled_back == 0 and first.matches == {}
    assert first.enodes == res.enodes_before and not _commuted(eg, ing, mul)


def test_saturation_is_not_declared_while_a_rule_is_banned(tmp_path):
    only_mulc = "(family t)\n" + RULES.splitlines()[2] + "\n"
    eg, ing, mul = _egraph()
    # the only rule is backed off in iteration 1, so nothing changes: that is not saturation
    res = saturate(eg, _rules(tmp_path, only_mulc), Budget(iterations=1, match_limit=40, **UNSCALED))
    assert res.iterations[0].backed_off == ["MULC"] and res.stop_reason == StopReason.ITERATION_LIMIT
    assert not _commuted(eg, ing, mul)
    # with iterations left, its ban is cut short (as egg's can_stop does), it runs, and only then is it saturated
    eg, ing, mul = _egraph()
    res = saturate(eg, _rules(tmp_path, only_mulc), Budget(iterations=10, match_limit=40, **UNSCALED))
    assert res.stop_reason == StopReason.SATURATED
    assert res.iterations[1].matches == {"MULC": 50}
    assert _commuted(eg, ing, mul)


def test_match_limit_none_is_the_old_driver(tmp_path):
    eg, ing, mul = _egraph()
    res = saturate(eg, _rules(tmp_path), Budget(iterations=10, match_limit=None, **UNSCALED))
    assert res.backed_off == [] and res.iterations[0].matches.get("MULC") == 50
    assert _commuted(eg, ing, mul)


def test_a_user_set_flag_wins_over_the_scaled_budget():
    from absl import flags
    from tensat_tf.cli import engine_flags
    FLAGS = flags.FLAGS
    try:
        FLAGS.unparse_flags()
        FLAGS(["prog"])
        b = engine_flags.engine_options().budget
        assert b.nodes_per_enode is not None and b.seconds_per_enode is not None and b.match_limit == 1000
        FLAGS.unparse_flags()
        FLAGS(["prog", "--node_limit=1234", "--saturation_seconds=7", "--match_limit=0"])
        b = engine_flags.engine_options().budget
        assert b.limits(10_000) == (1234, 7.0, 400_000) and b.match_limit is None
        FLAGS.unparse_flags()
        FLAGS(["prog", "--saturation_work=5000"])
        assert engine_flags.engine_options().budget.limits(10_000)[2] == 5000
    finally:
        FLAGS.unparse_flags()


def test_probe_stops_saturation_once_the_cost_stops_improving(tmp_path):
    # ASSOC changes the 6-term chain for more than 4 iterations (no backoff)
    budget = Budget(iterations=10, match_limit=None, patience=2, **UNSCALED)
    calls = []

    def flat(eg, iteration):            # the cost never improves after the baseline (iteration 2)
        calls.append(iteration)
        return 1.0
    eg, _, _ = _egraph()
    res = saturate(eg, _rules(tmp_path), budget, probe=flat)
    assert res.stop_reason == StopReason.NO_GAIN
    assert [i.probe_cost for i in res.iterations] == [None, 1.0, 1.0, 1.0] and calls == [2, 3, 4]

    assert res.kept_iterations == 2 == res.final_iteration and res.to_json()["kept_iterations"] == 2
    assert res.enodes == res.iterations[1].enodes < res.iterations[-1].enodes     # rolled back to the baseline

    def improving(eg, iteration):       # a cost that keeps falling: no early stop
        calls.append(iteration)
        return 1.0 / len(calls)
    eg, _, _ = _egraph()
    res = saturate(eg, _rules(tmp_path), budget, probe=improving)
    assert res.stop_reason == StopReason.SATURATED and len(res.iterations) > 4
    assert res.kept_iterations is None and "kept_iterations" not in res.to_json()
    # the last iteration changed nothing (saturated): the e-graph left is the last probed one
    assert res.final_iteration == calls[-1] == len(res.iterations) - 1


def test_no_gain_rolls_the_egraph_back_to_the_iteration_of_the_best_probe(tmp_path):
    costs = iter([3.0, 2.0, 2.5, 2.5])      # after iterations 2, 3 (the best), 4, 5
    seen = {}

    def probe(eg, iteration):
        seen[iteration] = Session(eg).sizes()
        return next(costs)
    eg, _, _ = _egraph()
    s = Session(eg)
    res = saturate(s, _rules(tmp_path), Budget(iterations=10, match_limit=None, patience=2, **UNSCALED), probe=probe)
    assert res.stop_reason == StopReason.NO_GAIN and len(res.iterations) == 5 and res.kept_iterations == 3
    assert sorted(seen) == [2, 3, 4, 5] and res.final_iteration == 3
    assert s.sizes() == seen[3] != seen[5] and res.enodes == res.iterations[2].enodes
    s.pop()                                 # the frames below the kept state are still there: iteration 3's own
    assert s.sizes() == seen[2]


def test_a_probe_gain_below_the_minimum_ends_saturation_on_the_cheaper_egraph(tmp_path):
    """A step under PROBE_MIN_GAIN buys no further iteration, but its probe's program is the cheapest found: the
    e-graph kept is its iteration's, not the one before (ResNet50V2's third probe, 0.29 % below the second, held the
    sibling-conv merges the second lacked)."""
    from tensat_tf.egraph.saturate import PROBE_MIN_GAIN
    costs = iter([1.0, 1.0 - PROBE_MIN_GAIN / 2, 0.5])        # the third is never asked for
    eg, _, _ = _egraph()
    res = saturate(eg, _rules(tmp_path), Budget(iterations=10, match_limit=None, patience=1, **UNSCALED),
                   probe=lambda eg, iteration: next(costs))
    assert res.stop_reason == StopReason.NO_GAIN and len(res.iterations) == 3
    assert res.kept_iterations == res.final_iteration == 3 and res.enodes == res.iterations[-1].enodes


def test_a_probe_cost_equal_but_for_rounding_keeps_the_earlier_egraph(tmp_path):
    costs = iter([2.0, 1.0, 1.0 * (1 - 1e-14), 0.5])          # the fourth is never asked for
    eg, _, _ = _egraph()
    res = saturate(eg, _rules(tmp_path), Budget(iterations=10, match_limit=None, patience=1, **UNSCALED),
                   probe=lambda eg, iteration: next(costs))
    assert res.stop_reason == StopReason.NO_GAIN and len(res.iterations) == 4
    assert res.kept_iterations == res.final_iteration == 3


def test_the_probes_time_does_not_count_against_the_saturation_budget(tmp_path):
    """A probe has its own limits (the pass's probe_work and probe_seconds); charged to the saturation budget, a slow
    machine's probes would end saturation on time where a fast machine's do not."""
    import time

    def slow(eg, iteration):                # 0.6 s per probe, a falling cost: only the budget could stop it early
        time.sleep(0.6)
        return 1.0 / iteration
    eg, _, _ = _egraph()
    res = saturate(eg, _rules(tmp_path), Budget(iterations=6, match_limit=None, seconds=1.0, **UNSCALED), probe=slow)
    assert res.stop_reason != StopReason.TIME_LIMIT and len(res.iterations) >= 4
    assert res.seconds > 1.0 + 0.6          # the probes took longer than the whole budget


def test_the_work_budget_stops_saturation_at_the_same_iteration_whatever_the_clock(tmp_path):
    """The work budget counts the e-nodes the iterations search: the iteration that would pass it is not run, and
    where that is does not depend on how long the iterations took (a slow probe, a generous clock)."""
    import time
    free = saturate(_egraph()[0], _rules(tmp_path), Budget(iterations=6, match_limit=None, **UNSCALED))
    assert free.stop_reason != StopReason.WORK_LIMIT and len(free.iterations) >= 4
    starts = [free.enodes_before] + [i.enodes for i in free.iterations]
    work = sum(starts[:3])                  # exactly the first three iterations' searches
    assert free.searched >= work + starts[3]

    def slow(eg, iteration):
        time.sleep(0.3)
        return 1.0 / iteration
    for probe in (None, slow):
        res = saturate(_egraph()[0], _rules(tmp_path), Budget(iterations=6, match_limit=None, work=work, **UNSCALED),
                       probe=probe)
        assert res.stop_reason == StopReason.WORK_LIMIT and len(res.iterations) == 3
        assert res.searched == work and res.to_json()["work_limit"] == work
        assert [i.enodes for i in res.iterations] == starts[1:4]


def _relu_chain(n: int = 3):
    """Relu^n(Squeeze(x, [1])) on x [2, 1, 4, 3]: a chain an eager rule moves the Squeeze up through."""
    import tensorflow as tf
    from tensat_tf.item import GrapplerItem
    g = tf.Graph()
    with g.as_default():
        y = tf.squeeze(tf.compat.v1.placeholder(tf.float32, [2, 1, 4, 3], name="x"), [1])
        for _ in range(n):
            y = tf.nn.relu(y)
        tf.identity(y, name="out")
    ing = ingest.ingest(g.as_graph_def(), GrapplerItem(feeds=["x:0"], fetches=["out:0"]))
    eg = language.new_egraph()
    ingest.load(eg, ing)
    return eg


MOVE = ("(rule MOVE (Relu (Squeeze ?d ?y)) => (Squeeze ?d (Relu ?y)){} "
        ":test ((?d :lit (vec-of 1)) (?y 2 1 4 3)))\n")
STEP = "(rule NEG2 (Neg (Neg ?x)) => ?x :test ((?x 2 3)))\n"       # never matches here: a step rule to run


@pytest.mark.parametrize("step_rules", ["", STEP], ids=["eager alone", "with a step rule"])
def test_an_eager_rule_reaches_its_fixpoint_in_one_iteration(tmp_path, step_rules):
    eager = _rules(tmp_path, "(family t)\n" + MOVE.format(" :schedule eager") + step_rules)
    assert [r.eager for r in eager.rules] == [True] + ([False] if step_rules else [])
    res = saturate(_relu_chain(), eager, Budget(iterations=10, match_limit=None, **UNSCALED))
    assert res.iterations[0].matches == {"MOVE": 3}          # all three Relus moved in the first iteration
    assert res.stop_reason == StopReason.SATURATED and len(res.iterations) == 2
    stepped = _rules(tmp_path, "(family t)\n" + MOVE.format("") + step_rules)
    res = saturate(_relu_chain(), stepped, Budget(iterations=10, match_limit=None, **UNSCALED))
    assert [it.matches.get("MOVE") for it in res.iterations[:3]] == [1, 1, 1]     # one Relu per iteration


def test_schedule_syntax(tmp_path):
    from tensat_tf.rules.syntax import RuleSyntaxError
    with pytest.raises(RuleSyntaxError, match="schedule takes one of"):
        _rules(tmp_path, "(family t)\n" + MOVE.format(" :schedule soon"))
    multi = ("(family t)\n(multi MM ((Relu ?a) => (Relu ?a)) ((Relu ?b) => (Relu ?b)) :schedule eager "
             ":test ((?a 2) (?b 2)))\n")
    with pytest.raises(RuleSyntaxError, match="cannot be eager"):
        _rules(tmp_path, multi)


def test_an_eager_rule_that_raises_stops_saturation_and_bans_no_step_rule(tmp_path):
    # a wrong "move": Relu(Squeeze(y)) as Squeeze(Transpose(y)) gives the class a second shape, which egglog refuses
    bad = ("(family t)\n(rule BAD (Relu (Squeeze ?d ?y)) => (Squeeze ?d (Transpose (vec-of 0 2 1 3) ?y)) "
           ":schedule eager :test ((?d :lit (vec-of 1)) (?y 2 1 4 3)))\n" + STEP)
    res = saturate(_relu_chain(), _rules(tmp_path, bad), Budget(iterations=10, match_limit=None, **UNSCALED))
    assert res.stop_reason == StopReason.ERROR and res.banned == []
