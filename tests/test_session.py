"""The egglog session (tensat_tf/egraph/session.py): check tells "does not hold" from "malformed", push/pop restore
the e-graph, and an egglog error that no rule causes stops saturation with its own reason (and the pass keeps its
input) instead of banning every rule."""
import pytest

from tensat_tf import rules
from tensat_tf.egraph import language
from tensat_tf.egraph.saturate import StopReason, saturate
from tensat_tf.egraph.session import EgglogError, MalformedProgram, Session, forms

# x: [2, 3], y: [3], and x * y (its shape comes from the analysis)
LEAVES = ('(let $x_ (Input "x"))\n(set (shape $x_) (vec-of 2 3))\n(let $y_ (Input "y"))\n(set (shape $y_) (vec-of 3))\n'
          '(let $m_ (Mul $x_ $y_))\n(let $k_ 7)')
MULC = "(rule MULC (Mul ?a ?b) => (Mul ?b ?a) :test ((?a 2 3) (?b 3)))\n"
# unsound: unions x * y ([2, 3]) with relu(y) ([3]); egglog refuses to merge the two shapes
BAD = "(rule BAD (Mul ?a ?b) => (Relu ?b) :test ((?a 2 3) (?b 3)))\n"
NO_BACKOFF = dict(match_limit=None, nodes_per_enode=None, seconds_per_enode=None)


def session() -> Session:
    s = Session(language.new_egraph())
    s.run_program(LEAVES)
    return s


def ruleset(tmp_path, text):
    p = tmp_path / "t.rules"
    p.write_text("(family t)\n" + text)
    return rules.select([], extra_files=[str(p)])


def test_check_holds_fails_and_refuses_malformed_queries():
    s = session()
    assert s.check('(= $x_ (Input "x"))')
    assert s.check("(= (shape $x_) (vec-of 2 3))", "(= $k_ 7)")        # several facts, a global of a primitive sort
    assert s.check("(= $m_ (Mul a b))")                                   # plain names are pattern variables
    assert not s.check("(= $x_ $y_)")
    assert not s.check("(= $k_ 8)")
    assert not s.check("(= $m_ (Mul $y_ $x_))")                          # not commuted (no rule ran)
    assert not s.check('(= $x_ (Input "x"))', "(= $x_ $y_)")              # all facts must hold
    malformed = ["(= $x_ (Foo $y_))",            # unknown function
                 "(= $x_ $y_",                   # parse error
                 '(= $x_ (Input "x" 3))',        # arity
                 "(= $x_ 3)",                    # type
                 "(= $x_ $typo_)",               # unbound global: as a pattern variable it would match anything
                 "(= $x_ $y_)) (pop"]            # more than one command
    for fact in malformed:
        with pytest.raises(MalformedProgram):
            s.check(fact)
    assert s.check('(= $x_ (Input "x"))')                                 # none of it changed the e-graph


def test_push_pops_on_exit_and_on_exceptions_and_keep_keeps():
    s = session()
    before = s.sizes()
    assert before["Input"] == 2 and before["Mul"] == 1
    with s.push():
        s.run_program('(let $z_ (Input "z"))')
        assert s.sizes()["Input"] == 3
    assert s.sizes() == before and s.depth == 0
    with pytest.raises(ValueError):
        with s.push():
            s.run_program('(let $z_ (Input "z"))')
            raise ValueError("inside the frame")
    assert s.sizes() == before and s.depth == 0
    with s.push() as frame:
        s.run_program('(let $z_ (Input "z"))')
        frame.keep()
    assert s.sizes()["Input"] == 3 and s.depth == 1                       # egglog keeps the saved copy (13.2)
    with pytest.raises(EgglogError):
        Session(language.new_egraph()).pop()


def test_runtime_errors_are_not_malformed_and_pop_recovers_from_them():
    s = session()
    s.saturate("shapes")
    before = s.sizes()
    with s.push():
        with pytest.raises(EgglogError) as e:
            s.run_program("(union $m_ (Relu $y_))\n(run-schedule (saturate (run shapes)))")
        assert not isinstance(e.value, MalformedProgram) and "Illegal merge" in str(e.value)
    with s.push():                                   # a Rust panic (unknown ruleset) leaves egglog unusable ...
        with pytest.raises(EgglogError):
            s.run("no_such_ruleset")
    assert s.sizes() == before                       # ... until the pop
    assert s.saturate("shapes").updated is False and s.check("(= (shape $m_) (vec-of 2 3))")


def test_run_reports_matches_and_changes(tmp_path):
    s = session()
    s.saturate("shapes")
    s.run_program(rules.compile_rule(ruleset(tmp_path, MULC).by_name("MULC")))
    report = s.run(rules.ruleset_name("MULC"))
    assert report.updated and report.matches == {"MULC": 1}
    assert s.check("(= $m_ (Mul $y_ $x_))")
    # iterations: relu(relu(x))'s shape takes two iterations of the analysis
    for n, derived in ((1, False), (2, True)):
        s = session()
        s.run_program("(let $r_ (Relu (Relu $x_)))")
        s.run("shapes", n)
        assert s.check("(= (shape $r_) (vec-of 2 3))") is derived


def test_a_rule_that_raises_alone_is_banned_and_the_rest_run(tmp_path):
    s = session()
    res = saturate(s, ruleset(tmp_path, MULC + BAD), budget(10))
    assert res.banned == ["BAD"] and res.iterations[0].banned == ["BAD"]
    assert res.stop_reason == StopReason.SATURATED and res.error is None and "error" not in res.to_json()
    assert s.check("(= $m_ (Mul $y_ $x_))") and not s.check("(= $m_ (Relu $y_))")


def test_an_error_no_rule_causes_stops_saturation_with_error(tmp_path):
    """The e-graph itself is inconsistent (a shape fact the analysis contradicts): every rule run alone raises too.
    Banning them all and reporting node_limit hid that; the run must stop with ERROR, the e-graph as before."""
    s = session()
    s.run_program("(let $bad_ (Tanh $x_))\n(set (shape $bad_) (vec-of 9 9))")
    before = s.sizes()
    res = saturate(s, ruleset(tmp_path, MULC), budget(10))
    assert res.stop_reason == StopReason.ERROR and res.banned == [] and res.iterations == []
    assert "Illegal merge" in res.error and res.to_json()["error"] == res.error
    assert s.sizes() == before and s.depth == 0


def test_the_pass_keeps_its_input_on_an_egglog_error(tmp_path, monkeypatch):
    import tensorflow as tf
    from tensat_tf.egraph import ingest
    from tensat_tf.item import GrapplerItem
    from tensat_tf.options import EngineOptions
    from tensat_tf.passes.tensat import TensatPass
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        tf.identity((x * tf.constant(2.0, shape=[2, 3])) * tf.constant(3.0, shape=[2, 3]), name="out")
    gd, item = g.as_graph_def(), GrapplerItem(feeds=["x:0"], fetches=["out:0"])
    (tmp_path / "t.rules").write_text("(family t)\n(rule ASSOC (Mul (Mul ?a ?b) ?c) => (Mul ?a (Mul ?b ?c)) "
                                      ":test ((?a 2 3) (?b 2 3) (?c 2 3)))\n")
    options = EngineOptions(enable_rules=[], rules_files=[str(tmp_path / "t.rules")], probe_seconds=0, min_gain=0.0)
    load = ingest.load

    def load_inconsistent(eg, ing):
        load(eg, ing)
        Session(eg).run_program(f"(let $bad_ (Tanh {ing.output_lets['x:0']}))\n(set (shape $bad_) (vec-of 9 9))")

    p = TensatPass(options)                             # the control: x * (2 * 3), the constant product folded
    assert [n.op for n in p.optimize(gd, item).node].count("Mul") == 1 and p.stats.stop_reason == "saturated"
    monkeypatch.setattr(ingest, "load", load_inconsistent)
    p = TensatPass(options)
    assert p.optimize(gd, item) is gd
    assert p.stats.stop_reason == "error" and p.stats.kept_input.startswith("egglog error: ")
    assert "Illegal merge" in p.stats.saturation["error"]


def budget(iterations):
    from tensat_tf.options import Budget
    return Budget(iterations=iterations, **NO_BACKOFF)


def test_forms_splits_top_level_forms_past_strings_and_comments():
    text = '(let $a (Input "x)(")) ; a comment (with (parens)\n  (set (shape $a) (vec-of 2 3))\nbare "s"\n(unclosed (x'
    assert forms(text) == ['(let $a (Input "x)("))', '(set (shape $a) (vec-of 2 3))', 'bare', '"s"', '(unclosed (x']
    assert forms('(a "q\\"(")') == ['(a "q\\"(")']      # an escaped quote does not end the string


def test_a_program_runs_form_by_form_and_one_that_does_not_parse_runs_nothing():
    s = session()
    before = s.sizes()
    with pytest.raises(MalformedProgram):            # every form is parsed before any runs
        s.run_program("(let $z_ (Relu $x_))\n(let $w_ (Tanh $x_)")
    assert s.sizes() == before
    s.run_program("(let $z_ (Relu $x_)) (let $w_ (Tanh $z_))")      # two forms on one line
    assert s.check("(= $w_ (Tanh (Relu $x_)))")
