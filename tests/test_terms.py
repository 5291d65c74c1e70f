"""The term language is declared once (tensat_tf/terms.py): every piece derived from it agrees with the declaration."""
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

from tensat_tf import ops, terms
from tensat_tf.cost import analytic
from tensat_tf.egraph import ingest, language, saturate
from tensat_tf.item import GrapplerItem
from tensat_tf.rules import compile as rule_compile


def test_egglog_program_declares_exactly_the_declared_constructors():
    text = language.program()
    declared = {name: (tuple(args.split()), sort)
                for name, args, sort in re.findall(r"\(constructor (\S+) \(([^()]*)\) (\S+)\)", text)}
    assert len(declared) == text.count("(constructor ")          # every declaration matched the pattern
    assert declared == {c.name: (c.arg_sorts, c.sort) for c in terms.CONSTRUCTORS.values()}
    assert tuple(re.findall(r"\(datatype (\S+)\)", text)) == terms.TERM_SORTS


def test_typed_constructors_are_the_op_table():
    assert {c.name for c in terms.TYPED} == set(ops.BY_TERM)
    assert not terms.STRUCTURAL_NAMES & set(ops.BY_TERM)
    for c in terms.TYPED:
        spec = ops.BY_TERM[c.name]
        assert c.arg_sorts == tuple(spec.arg_sorts) and c.sort == spec.output_sort and not c.structural


def test_rule_compiler_sorts_are_the_declaration():
    for name, c in terms.CONSTRUCTORS.items():
        assert tuple(rule_compile.constructor_sorts(name)) == c.arg_sorts
    for other in ("shape", "vec-of", "IsConst", "dim", "Relu7"):
        assert rule_compile.constructor_sorts(other) is None


def test_cost_model_and_saturation_read_the_declaration():
    assert analytic.STRUCTURAL_FREE == {"Input", "Weight", "FConst", "Out", "Ctl", "TNil", "TCons"}
    assert analytic.STRUCTURAL_FREE == {c.name for c in terms.CONSTRUCTORS.values() if not c.runs}
    for name in analytic.STRUCTURAL_FREE:
        assert analytic.node_cost(name, (), None, None) == 0.0
    assert analytic.node_cost("Op", ("x",), None, None) > 0.0
    assert analytic.node_cost("Relu", (), [(4, 8)], (4, 8)) > 0.0
    assert saturate.TERM_FUNCTIONS == set(terms.CONSTRUCTORS)


def test_name_check_rejects_a_colliding_constructor(monkeypatch):
    monkeypatch.setattr(terms, "TYPED", terms.TYPED + (terms.Constructor("Relu6", ("Tensor",), "Tensor", False),))
    with pytest.raises(AssertionError, match="collide"):
        terms._check()
    monkeypatch.setattr(terms, "TYPED", terms.TYPED[:-1] + (terms.TYPED[0],))
    with pytest.raises(AssertionError, match="twice"):
        terms._check()


def test_const_positions():
    assert ops.TABLE["ConcatV2"].const_positions(4) == [3]        # the axis is the last input, whatever N is
    assert ops.TABLE["SplitV"].const_positions(3) == [1, 2]
    assert ops.TABLE["Split"].const_positions(2) == [0]
    assert ops.TABLE["MatMul"].const_positions(2) == []


W = tf.constant(np.arange(12, dtype="f").reshape(3, 4))
B = tf.constant(np.ones((1, 1, 4), "f"))


@tf.function(input_signature=[tf.TensorSpec([None, 2, 3], name="x")])
def small(x):
    y = tf.matmul(x, tf.broadcast_to(W, [2, 3, 4])) * B         # a squeezed weight (B is [1, 1, 4])
    a, b = tf.split(y, 2, axis=-1)
    return {"c": tf.concat([a, b, tf.nn.relu(a)], axis=-1), "s": tf.reduce_sum(y)}


def test_ingest_records_one_original_term_per_let_in_the_declared_language():
    cf = small.get_concrete_function()
    ffn, gd = convert_to_constants.convert_variables_to_constants_v2_as_graph(cf, lower_control_flow=False)
    ing = ingest.ingest(gd, GrapplerItem(tuple(t.name for t in ffn.inputs), tuple(t.name for t in ffn.outputs)))
    ops_seen = set()
    for let, t in ing.terms.items():
        c = terms.CONSTRUCTORS[t.op]
        ops_seen.add(t.op)
        n_kids = sum(terms.is_term_sort(s) for s in c.arg_sorts)
        if t.op == "Op":
            assert t.children is None                             # its argument list is inline
        else:
            assert len(t.children) == n_kids and len(t.payload) == len(c.arg_sorts) - n_kids, (let, t)
            assert all(k in ing.terms for k in t.children)
    assert {"Input", "Weight", "Op", "Out", "ConcatV2", "Split", "Mul", "Relu"} <= ops_seen
    assert set(ing.lets.values()) <= set(ing.terms)
    # typed nodes are the terms that carry their node; a three-input concat reads through its inner link
    concat = next(name for name, t in ing.typed.items() if t.op == "ConcatV2")
    assert len(ing.tensor_inputs(ing.lets[concat])) == 3 and len(ing.terms[ing.lets[concat]].children) == 2
    assert ing.typed[concat].const_nodes == (gd.node[[n.name for n in gd.node].index(concat)].input[-1],)
    assert any(let.endswith("sq_") for let in ing.terms)
