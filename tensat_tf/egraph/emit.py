"""A choice of one e-node per e-class -> GraphDef.

Walks the chosen DAG from the roots (post-order, memoised per class):
  - Input / Weight leaves become the original Placeholder / Const nodes;
  - an opaque Op is its original NodeDef with new inputs;
  - a typed e-node that is exactly an original node (same term, literals, children) reuses that NodeDef and name,
    and its original Const inputs; any other typed e-node becomes a fresh node named `tensat/<Op>_<k>`;
  - nested ConcatV2 on one axis (binary in the e-graph) are flattened back into one N-ary op when the inner one has no
    other consumer;
  - a ReshapeS whose shape holds symbols reads a target built from Shape(graph input), shared by value between the
    reshapes that need the same one (tensat_tf/shape_values.py).
A new node whose fusion also needs a name order (cost/fusion.py Site.precedes: an exact GELU's inner Mul) and that
runs fused in the choice is then renamed to sort first, so that TF's Grappler leaves the pattern for the remapper to
fuse (egraph/runtime_names.py). The patterns are TF's, whatever device the cost model priced: the name costs nothing
where TF does not fuse, and a model converted on one CPU may be served on another that does. The result keeps the
input's function library and versions. Node order is the emission order, which depends only on the choice, so equal
choices give equal bytes.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

import networkx as nx
import numpy as np
import tensorflow as tf

from tensat_tf import ops, shape_values, symbolic
from tensat_tf.egraph import nodedef, runtime_names
from tensat_tf.cost import fusion
from tensat_tf.egraph.data import EGraphData
from tensat_tf.extract.dag import reachable_classes, unfused
from tensat_tf.egraph.export import Exported
from tensat_tf.egraph.ingest import Ingested, Original
from tensat_tf.item import node_name

NEW_PREFIX = runtime_names.NEW_PREFIX


class Emitter:
    def __init__(self, ing: Ingested, exp: Exported, choice: dict[int, int]):
        self.ing, self.exp, self.g, self.choice = ing, exp, exp.egraph, choice
        self.out = tf.compat.v1.GraphDef()
        self.out.versions.CopyFrom(ing.graph_def.versions)
        self.out.library.CopyFrom(ing.graph_def.library)
        self.tensor_of: dict[int, str] = {}       # Tensor class -> tensor name in the output
        self.node_of: dict[int, str] = {}         # TTuple class -> node name in the output
        self.dtype_of: dict[int, tf.DType] = {}
        self.emitted: set[str] = set()
        self.counter = Counter()
        self.originals = self._index_originals()
        self.uses = self._count_uses()
        self.const, self.order = self._const_classes()
        self.values: dict[int, np.ndarray] = {}    # folded class -> its value (_fold)
        self.input_nodes = {n.name: n for n in ing.graph_def.node}   # name -> NodeDef of the input graph
        self.shape_values: Optional[shape_values.Builder] = None       # run-time targets of ReshapeS (_target)

    # ------------------------------------------------------------------ bookkeeping
    def _index_originals(self) -> dict[int, list[tuple[Original, list[int]]]]:
        """class -> its typed original terms (ingest's record), each with the classes of its node's tensor inputs."""
        by_class: dict[int, list[tuple[Original, list[int]]]] = {}
        for let in self.ing.lets.values():
            origin = self.ing.terms[let]
            if origin.node is not None:
                inputs = [self.exp.lets[i] for i in self.ing.tensor_inputs(let)]
                by_class.setdefault(self.exp.lets[let], []).append((origin, inputs))
        return by_class

    def _count_uses(self) -> Counter:
        """How many chosen e-nodes read each class (to know when a nested concat may be flattened)."""
        uses, seen, stack = Counter(), set(), list(self.g.roots)
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            for ch in self.g.nodes[self.choice[c]].children:
                uses[ch] += 1
                stack.append(ch)
        for r in self.g.roots:
            uses[r] += 1
        return uses

    def _const_classes(self) -> tuple[set[int], list[int]]:
        """Classes that only depend on weights under this choice (their typed nodes are folded into Consts), and every
        class the roots need, children first."""
        const: set[int] = set()
        dg = nx.DiGraph()
        for c in reachable_classes(self.g, self.choice):
            dg.add_node(c)
            dg.add_edges_from((ch, c) for ch in self.g.nodes[self.choice[c]].children)
        order = list(nx.lexicographical_topological_sort(dg))
        for c in order:
            n = self.g.nodes[self.choice[c]]
            if n.op in ("Weight", "FConst") or ((n.op in ops.BY_TERM or n.op == "Out") and n.children
                                    and all(ch in const for ch in n.children)):
                const.add(c)
        return const, order

    def _fold(self) -> None:
        """Compute the value of every folded class the walk will emit, in one TF graph run (a session per op cost
        1.5 s on DenseNet169's 510 folded ops): weights and statistics are fed, the typed ops are built by
        nodedef.build, and the dtype of a typed op is its first typed input's, as in _emit_typed (a rule's FConst
        literal takes its reader's)."""
        # the classes the walk folds: const Tensor classes (not Weights) that a root is, or an unfolded node reads (a
        # const class has only const children, so no unfolded node is below a folded one)
        read = set(self.g.roots)
        for c in self.order:
            if c not in self.const:
                read.update(self.g.nodes[self.choice[c]].children)
        tops = {c for c in read if c in self.const and self.g.nodes[self.choice[c]].op != "Weight"
                and self.exp.sorts[c] == "Tensor"}
        if not tops:
            return
        needed = set(tops)                     # and the classes they are computed from
        for c in reversed(self.order):
            if c in needed:
                needed.update(self.g.nodes[self.choice[c]].children)
        gd, feeds, name, dtype = tf.compat.v1.GraphDef(), {}, {}, {}
        for c in (c for c in self.order if c in needed):
            n = self.g.nodes[self.choice[c]]
            if n.op == "FConst" and c not in tops:
                continue                       # a rule's literal has no dtype of its own: its reader gives it one
            if n.op in ("Weight", "FConst"):
                value = (tf.make_ndarray(self.ing.weights[n.payload[0]].attr["value"].tensor) if n.op == "Weight"
                         else np.float32(n.payload[0]))     # a literal read by an unfolded node: float32, as F17's
                name[c] = f"fold/in{c}"
                feeds[name[c]] = value
                dtype[c] = tf.as_dtype(np.asarray(value).dtype)
            elif n.op == "Out":
                k = n.payload[0]
                name[c], dtype[c] = f"{name[n.children[0]]}:{k}", dtype[n.children[0]]
            else:
                spec = ops.BY_TERM[n.op]
                # the op's dtype is its first typed input's (from spec.dtype_input); a literal (FConst,
                # rules/activation.rules halves a filter with one) is fed in that dtype, so a float16 model's weights
                # are not met by a float32 0.5
                op_dtype = next((dtype[ch] for ch in n.children[spec.dtype_input:] if ch in dtype), tf.float32)
                inputs = []
                for ch in n.children:
                    if ch not in dtype:
                        inputs.append(f"fold/in{ch}_{op_dtype.name}")
                        feeds[inputs[-1]] = np.asarray(self.g.nodes[self.choice[ch]].payload[0],
                                                       op_dtype.as_numpy_dtype)
                    else:
                        inputs.append(name[ch])
                node, extra = nodedef.build(spec, n.payload, f"fold/n{c}", inputs, op_dtype)
                gd.node.extend(extra + [node])
                name[c], dtype[c] = (f"{node.name}:0" if spec.outputs == "one" else node.name), op_dtype
        ordered = sorted(tops)
        for c, value in zip(ordered, nodedef.evaluate(gd, feeds, [name[c] for c in ordered])):
            self.values[c] = value

    def _emit_folded(self, cls: int) -> None:
        value = np.asarray(self.values[cls])
        node = tf.compat.v1.NodeDef(name=self._fresh("Const"), op="Const")
        node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        self._add(node)
        self.tensor_of[cls] = node.name
        self.dtype_of[cls] = tf.as_dtype(value.dtype)

    def _add(self, node) -> None:
        self.out.node.append(node)
        self.emitted.add(node.name)

    def _fresh(self, op: str) -> str:
        while True:
            name = f"{NEW_PREFIX}{op}_{self.counter[op]}"
            self.counter[op] += 1
            if name not in self.input_nodes and name not in self.emitted:
                return name

    # ------------------------------------------------------------------ main walk
    def run(self) -> tf.compat.v1.GraphDef:
        self._fold()
        for r in self.g.roots:
            self._visit(r)
        return self.out

    def _visit(self, c: int) -> str:
        """Emit class c (after its children); returns its tensor name (Tensor) or node name (TTuple)."""
        if c in self.tensor_of:
            return self.tensor_of[c]
        if c in self.node_of:
            return self.node_of[c]
        # iterative post-order: deep graphs (long chains) would overflow Python's recursion limit
        stack = [(c, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in self.tensor_of or cls in self.node_of:
                continue
            enode = self.g.nodes[self.choice[cls]]
            kids = self._children_to_emit(cls, enode)
            if not ready:
                stack.append((cls, True))
                stack.extend((k, False) for k in reversed(kids) if k not in self.tensor_of and k not in self.node_of)
                continue
            self._emit_class(cls, enode)
        return self.tensor_of.get(c, self.node_of.get(c))

    def _children_to_emit(self, cls: int, enode) -> list[int]:
        if cls in self.const and enode.op != "Weight":
            return []                          # folded: computed here, its weights are not emitted
        if enode.op == "Op":                   # its argument list is read through, not emitted as a class
            return list(self._flat_list(enode.children[-1]))
        if enode.op == "ConcatV2":
            return self._concat_inputs(cls, enode)
        return list(enode.children)

    def _flat_list(self, list_class: int):
        while True:
            n = self.g.nodes[self.choice[list_class]]
            if n.op == "TNil":
                return
            yield n.children[0]
            list_class = n.children[1]

    def _concat_inputs(self, cls: int, enode) -> list[int]:
        """Input classes of a ConcatV2 after flattening same-axis single-use inner concats."""
        axis = enode.payload[0]
        out = []
        for ch in enode.children:
            inner = self.g.nodes[self.choice[ch]]
            if (inner.op == "ConcatV2" and inner.payload[0] == axis and self.uses[ch] == 1
                    and ch not in self.tensor_of):
                out.extend(self._concat_inputs(ch, inner))
            else:
                out.append(ch)
        return out

    # ------------------------------------------------------------------ per e-node
    def _emit_class(self, cls: int, enode) -> None:
        op = enode.op
        if cls in self.const and op != "Weight":
            if self.exp.sorts[cls] == "Tensor":
                self._emit_folded(cls)
            else:
                self.node_of[cls] = ""         # a folded tuple: its Out projections fold on their own
            return
        if op == "Input":
            name = enode.payload[0]
            self._copy_original(self.ing.inputs[name])
            self.tensor_of[cls] = name
            self.dtype_of[cls] = tf.as_dtype(self.ing.inputs[name].attr["dtype"].type)
        elif op == "Weight":
            src = self.ing.weights[enode.payload[0]]
            self._copy_original(src)
            self.tensor_of[cls] = src.name
            self.dtype_of[cls] = self.ing.weight_dtypes[enode.payload[0]]
        elif op == "Op":
            key = enode.payload[0]
            node = tf.compat.v1.NodeDef()
            node.CopyFrom(self.ing.opaque[key])
            del node.input[:]
            node.input.extend(self._ref(a) for a in self._flat_list(enode.children[-1]))
            self._add(node)
            self.node_of[cls] = node.name
        elif op == "Out":
            tup = self.node_of[enode.children[0]]
            k = enode.payload[0]
            self.tensor_of[cls] = tup if k == 0 else f"{tup}:{k}"
            self.dtype_of[cls] = self._tuple_dtype(enode.children[0], k)
        elif op == "Ctl":
            self.tensor_of[cls] = "^" + self.node_of[enode.children[0]]
        elif op in ("TNil", "TCons"):
            self.node_of[cls] = ""      # lists have no node of their own; Op reads them through _flat_list
        else:
            self._emit_typed(cls, enode, ops.BY_TERM[op])

    def _ref(self, c: int) -> str:
        return self.tensor_of[c]

    def _tuple_dtype(self, tuple_class: int, k: int) -> tf.DType:
        n = self.g.nodes[self.choice[tuple_class]]
        if n.op == "Op":
            return self.ing.opaque_dtypes[n.payload[0]][k]
        return self.dtype_of[n.children[0]]          # Split/SplitV: same dtype as the split tensor

    def _copy_original(self, src) -> None:
        if src.name not in self.emitted:
            node = tf.compat.v1.NodeDef()
            node.CopyFrom(src)
            self._add(node)

    def _match_original(self, cls: int, enode, inputs: list[int]) -> Optional[Original]:
        """The input node that the chosen e-node of cls is exactly (term, literals, input classes), if any."""
        for origin, origin_inputs in self.originals.get(cls, ()):
            if origin.node.name in self.emitted or origin.op != enode.op:
                continue
            if origin.payload != enode.payload:
                continue
            if origin_inputs == inputs:
                return origin
        return None

    def _emit_typed(self, cls: int, enode, spec: ops.OpSpec) -> None:
        inputs = self._concat_inputs(cls, enode) if spec.variadic else list(enode.children)
        origin = self._match_original(cls, enode, inputs)
        in_names = [self._ref(i) for i in inputs]
        if origin is not None:
            node = tf.compat.v1.NodeDef()
            node.CopyFrom(origin.node)
            for const in origin.const_nodes:
                self._copy_original(self.input_nodes[const])
            data = [i for i in node.input if not i.startswith("^")]
            const_pos = spec.const_positions(len(data))
            it = iter(in_names)
            new_inputs = [data[p] if p in const_pos else next(it) for p in range(len(data))]
            del node.input[:]
            node.input.extend(new_inputs)
        else:
            node = self._new_typed(spec, enode, in_names, self.dtype_of[inputs[spec.dtype_input]])
        self._add(node)
        if spec.outputs == "one":
            self.tensor_of[cls] = node.name
            self.dtype_of[cls] = self.dtype_of[inputs[spec.dtype_input]]
        else:
            self.node_of[cls] = node.name

    def _new_typed(self, spec: ops.OpSpec, enode, in_names: list[str], dtype: tf.DType):
        if spec.symbolic_target and any(d <= -2 for d in enode.payload[0]):
            in_names = in_names + [self._target(enode.payload[0])]
        node, consts = nodedef.build(spec, enode.payload, self._fresh(spec.tf_op), in_names, dtype)
        for const in consts:
            self._add(const)
        return node

    def _target(self, dims) -> str:
        """The int32 tensor of a ReshapeS's shape: its symbols (graph input dims) read from Shape(input)."""
        if self.shape_values is None:
            inputs = {n.name: tf.as_dtype(n.attr["dtype"].type) for n in self.ing.inputs.values()}
            self.shape_values = shape_values.Builder(self.ing.graph_def, self.ing.symbols, inputs, reuse=False)
        b = self.shape_values
        elems = [symbolic.decode(d) if d <= -2 else d for d in dims]
        before = len(b.new)
        name = b.target(elems, tf.int32, scaled=True)
        if name is None:
            raise ValueError(f"no run-time target for a reshape to {list(dims)}")
        for node in b.new[before:]:
            self._add(node)
        return name

    def precedences(self) -> list[tuple[str, str, str]]:
        """(node, the node it must sort before, tag) for every chosen node of TF's fusion patterns with a name order
        (cost/fusion.py Site.precedes) that runs fused in the choice (extract/dag.py unfused, on the patterns as
        fusion_sites finds them on the e-graph, with oneDNN's), in reachable_classes order."""
        sites = fusion.fusion_sites(self.exp)
        if not any(s.precedes for s in sites.values()):
            return []
        # a Site has the fields of a Fused term that unfused reads (reads, producers, partners, consumers)
        g = dataclasses.replace(self.g, fused=sites)
        needed = reachable_classes(g, self.choice)
        alone = unfused(g, self.choice, needed)
        out = []
        for c in needed:
            site = sites.get(self.choice[c])
            if site is None or site.precedes is None or self.choice[c] in alone:
                continue
            before, tag = site.precedes
            if c in self.tensor_of and before in self.tensor_of:
                out.append((node_name(self.tensor_of[c]), node_name(self.tensor_of[before]), tag))
        return out


def emit(ing: Ingested, exp: Exported, choice: dict[int, int]) -> tf.compat.v1.GraphDef:
    em = Emitter(ing, exp, choice)
    out = em.run()
    runtime_names.precede(out, em.precedences())
    return out


def original_nodes(ing: Ingested, exp: Exported) -> dict[int, int]:
    """class -> the e-node that is the ingested (original) term of that class, for every let-bound class.

    After rewrites a class holds many e-nodes; this finds the one ingest created (its record, Ingested.terms), by
    term (op, literals, child classes). Opaque nodes are found by their key alone (their argument lists are inline
    terms)."""
    g: EGraphData = exp.egraph
    index: dict = {}
    for i, n in enumerate(g.nodes):
        index.setdefault((n.op, n.payload, n.children), i)
        if n.op == "Op":
            index.setdefault(("Op", n.payload), i)
    out: dict[int, int] = {}
    for let, t in ing.terms.items():
        key = ("Op", t.payload) if t.children is None else (t.op, t.payload, tuple(exp.lets[k] for k in t.children))
        out.setdefault(exp.lets[let], index[key])
    return out


def original_choice(ing: Ingested, exp: Exported, original: Optional[dict[int, int]] = None) -> dict[int, int]:
    """The choice that reproduces the input graph: every let-bound class takes its original e-node (argument lists of
    opaque nodes, which no rule touches, take their only e-node). `original`: original_nodes(ing, exp), if known."""
    g: EGraphData = exp.egraph
    orig = original_nodes(ing, exp) if original is None else original
    return {c: orig.get(c, nodes[0]) for c, nodes in enumerate(g.classes) if nodes}
