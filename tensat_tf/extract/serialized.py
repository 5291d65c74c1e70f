"""Load an egraph-serialize JSON file (e.g. extraction-gym's TENSAT e-graphs) into EGraphData.

Format: {"nodes": {node_id: {"op", "cost", "eclass", "children": [node_id, ...]}}, "root_eclasses": [...]}.
A child is a node id standing for that node's e-class; the op name is the text before '('.

Ids are made deterministic independently of the JSON key order: classes are numbered in natural (numeric-aware)
order of their id strings, and nodes are numbered class by class, each class's nodes in natural order of their ids.
So node ids within a class ascend, as EGraphData requires, and every downstream tie-break is reproducible.
"""
from __future__ import annotations

import json
import re
from typing import Any

from tensat_tf.egraph.data import EGraphData, ENode

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """'10__2' sorts after '9__11': digit runs compare as numbers, the rest as text."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(text) if part)


def op_name(op: str) -> str:
    """'Conv2d([1; 1; 0])' -> 'Conv2d'; 'Var("x")' -> 'Var'."""
    return op.split("(", 1)[0].strip()


class FormatError(ValueError):
    """The file is not an egraph-serialize e-graph this loader understands."""


def from_json(data: Any) -> EGraphData:
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise FormatError("expected a JSON object with a 'nodes' object")
    raw_nodes: dict[str, dict] = data["nodes"]
    try:
        class_ids = sorted({str(n["eclass"]) for n in raw_nodes.values()}, key=natural_key)
    except (KeyError, TypeError) as exc:
        raise FormatError(f"a node lacks 'eclass': {exc}") from None
    class_index = {cid: i for i, cid in enumerate(class_ids)}

    by_class: list[list[str]] = [[] for _ in class_ids]
    for nid, n in raw_nodes.items():
        by_class[class_index[str(n["eclass"])]].append(nid)

    nodes: list[ENode] = []
    for members in by_class:
        for nid in sorted(members, key=natural_key):
            n = raw_nodes[nid]
            try:
                children = tuple(class_index[str(raw_nodes[c]["eclass"])] for c in n.get("children", ()))
            except KeyError as exc:
                raise FormatError(f"node {nid!r} has unknown child {exc}") from None
            op = str(n.get("op", ""))
            nodes.append(ENode(op=op_name(op), eclass=class_index[str(n["eclass"])], children=children,
                               cost=float(n.get("cost", 1.0)), payload=op))

    roots = []
    for r in data.get("root_eclasses", []):
        if str(r) not in class_index:
            raise FormatError(f"root e-class {r!r} has no nodes")
        roots.append(class_index[str(r)])
    if not roots:
        raise FormatError("no 'root_eclasses'")
    return EGraphData.build(nodes, roots)


def load(path: str) -> EGraphData:
    """Read an egraph-serialize JSON file. Raises OSError or FormatError (a ValueError) on a bad file."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise FormatError(f"not JSON: {exc}") from None
    return from_json(data)
