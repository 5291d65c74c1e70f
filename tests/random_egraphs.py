"""Small random cyclic e-graphs for the extraction tests (tests/test_extract.py, tests/test_prune.py), which check
claims about every acyclic choice against enumeration."""
from __future__ import annotations

import random

from tensat_tf.egraph.data import EGraphData, ENode


def egraph(spec, roots, blacklist=()) -> EGraphData:
    """spec: (op, class, child classes, cost) per node, node ids in list order."""
    return EGraphData.build([ENode(op, c, tuple(ch), cost) for op, c, ch, cost in spec], roots, blacklist)


def random_egraph(rng: random.Random, max_cost: int = 5) -> EGraphData:
    """One leaf class; every other node has one or two children in any other class, so cycles are common; about one
    node in ten is blacklisted."""
    n_classes = rng.randint(5, 7)
    spec = [("leaf", 0, (), rng.choice([0.0, 1.0, 3.0]))]
    for c in range(1, n_classes):
        for _ in range(rng.randint(1, 3)):
            kids = tuple(rng.sample([k for k in range(n_classes) if k != c], rng.choice([1, 2, 2])))
            spec.append(("op", c, kids, float(rng.randint(0, max_cost))))
    return egraph(spec, [n_classes - 1], blacklist={i for i in range(len(spec)) if rng.random() < 0.1})
