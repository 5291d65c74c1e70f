"""Grappler's contract for a pass: what is fed, what is fetched, which nodes must survive by name."""
from __future__ import annotations

import dataclasses


def node_name(tensor_or_node: str) -> str:
    """'^a', 'a:1', 'a' -> 'a'."""
    return tensor_or_node.lstrip("^").split(":")[0]


def source(nodes: dict, ref: str):
    """The node a tensor reference reads, through Identity nodes (a frozen variable read, an inlined argument), or
    None when a name is not in `nodes` (name -> NodeDef)."""
    node = nodes.get(node_name(ref))
    while node is not None and node.op == "Identity" and node.input:
        node = nodes.get(node_name(node.input[0]))
    return node


@dataclasses.dataclass(frozen=True)
class GrapplerItem:
    feeds: tuple[str, ...]            # tensor names ("x:0") the caller feeds
    fetches: tuple[str, ...]          # tensor names the caller fetches
    preserve: frozenset[str] = frozenset()   # extra node names that must keep their name and behaviour

    @property
    def keep_nodes(self) -> frozenset[str]:
        """Nodes no pass may rename or remove: feeds, fetches and preserved nodes."""
        return frozenset({node_name(t) for t in self.feeds + self.fetches}) | self.preserve
