"""GraphDef -> egglog terms.

One `let` per TF node, in topological order. Placeholders become (Input name) and Consts become (Weight id), ids
deduplicated by content. Ops of the op table become typed terms when their Const inputs, attributes and layout are
supported; every other node (and every node that must keep its name: feeds, fetches, preserved nodes, and anything
with control edges) becomes an opaque (Op name args) whose NodeDef is kept in a side table and emitted unchanged
apart from its inputs. Nothing is dropped.

Let names: `$n<i>_` for node i, `$n<i>_o<k>_` for output k of a tuple node, `$n<i>_c<j>_` for the inner links of a
variadic op, `$n<i>_sq_` for the squeezed twin of weight node i (see BROADCAST_OPS). (egglog 13.2: names ending in
digits can collide with its fresh names, hence the trailing `_`.)
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import networkx as nx
import numpy as np
import tensorflow as tf

from tensat_tf import einsum, ops, symbolic
from tensat_tf.egraph import language as L
from tensat_tf.item import GrapplerItem, node_name


@dataclasses.dataclass
class Original:
    """The e-node ingest created for one let: the original term of that let's e-class. Extraction reads these to
    find the choice that reproduces the input graph (tensat_tf/egraph/emit.py original_nodes); the emitter reads the
    typed ones so that a chosen e-node equal to an input node is emitted as that node (its NodeDef and name)."""
    op: str                                     # constructor (tensat_tf/terms.py)
    payload: tuple                              # its literal arguments
    children: Optional[tuple[str, ...]]         # let names of its child classes; None for Op (its list is inline)
    node: Optional[tf.compat.v1.NodeDef] = None   # typed terms: the input node it is (None: a variadic inner link)
    const_nodes: tuple[str, ...] = ()           # typed terms: names of the Const nodes folded into its literals

    @property
    def spec(self) -> Optional[ops.OpSpec]:
        return ops.BY_TERM.get(self.op)


def _empty(kind):
    return dataclasses.field(default_factory=kind)


@dataclasses.dataclass
class Ingested:
    """What ingest made of a graph: the egglog commands that build its terms, and what emit and extraction need to
    map e-nodes back to the graph."""
    graph_def: tf.compat.v1.GraphDef               # the input graph (library, versions are copied to the output)
    shapes: dict[str, Optional[tuple[int, ...]]]   # tensor name -> TF-inferred shape (None: unknown rank)
    commands: list = _empty(list)                  # egglog commands that build the terms
    lets: dict[str, str] = _empty(dict)            # node name -> let name of its term
    output_lets: dict[str, str] = _empty(dict)     # tensor name "a:k" -> let name of that tensor
    inputs: dict[str, tf.compat.v1.NodeDef] = _empty(dict)     # Input leaf name -> Placeholder NodeDef
    weights: list[tf.compat.v1.NodeDef] = _empty(list)         # Weight id -> the first Const with that content
    weight_dtypes: list[tf.DType] = _empty(list)               # Weight id -> its dtype
    opaque: dict[str, tf.compat.v1.NodeDef] = _empty(dict)     # Op key (node name) -> NodeDef
    opaque_dtypes: dict[str, list[tf.DType]] = _empty(dict)    # Op key -> output dtypes
    terms: dict[str, Original] = _empty(dict)      # let name -> its original term, in the order ingest made them
    roots: list[str] = _empty(list)                # let names that must be computed (keep nodes)
    # tensor name -> its dims as tensat_tf/symbolic.py knows them (products of symbols too, which `shapes` cannot
    # hold), and the base symbols that are a graph input's dim 0: what the cost model prices (cost/sizes.py)
    sizes: dict = _empty(dict)
    batch_bases: frozenset = frozenset()
    # the e-graph mode analysis of the symbols (ReshapeS's emitter reads a symbol's graph input from its base_origin)
    symbols: Optional[symbolic.Analysis] = None
    # Weight id -> the value of a one-element floating weight (what cost/fusion.py's hard swish checks: 3 and 1/6)
    scalars: dict[int, float] = _empty(dict)

    @property
    def typed(self) -> dict[str, Original]:
        """node name -> original term, for the input nodes ingested as typed terms (in ingest order)."""
        return {name: self.terms[let] for name, let in self.lets.items() if self.terms[let].node is not None}

    def tensor_inputs(self, let: str) -> tuple[str, ...]:
        """Let names of the tensor inputs of the input node behind typed term `let`: its children, with a variadic
        op's inner links (same constructor, no node of their own) read through."""
        term = self.terms[let]
        kids = term.children
        while kids:
            inner = self.terms.get(kids[-1])
            if inner is None or inner.node is not None or inner.op != term.op:
                break
            kids = kids[:-1] + inner.children
        return kids


# Broadcasting is normalized once, here: an operand of these ops that is a weight of rank <= the other operand's rank
# with leading dims of 1 ([1,1,1,C] after Grappler folds BatchNormalization's reshapes, [1,1,C] from LayerNorm)
# broadcasts exactly like the weight without them, so the op's class also gets the term on the squeezed weight
# ([C]). Every per-channel rule, written for rank-1 constants, then matches real exports; the original term stays
# (the input graph still round-trips) and extraction takes whichever form the rules improve. Doing it by union at
# ingest rather than by a rule family costs no saturation iteration (multi-pattern rules run only in the first
# ones), adds no rule per op x rank x operand side, and adds one e-node per op and one leaf per weight.
# Why it is sound: with rank(c) <= rank(x), broadcast(x, c) aligns c's dims with x's last ones; a leading 1 of c
# broadcasts against x's dim without changing it, and removing it keeps rank(c) <= rank(x), so the result's rank
# (x's) and every value are the same. With rank(c) > rank(x) the leading 1s add dims to the result: not squeezed.
BROADCAST_OPS = ("AddV2", "Mul", "Sub")
# The N-way merges of projections that read one tensor (rules/einsum.rules, `(few-readers ?x)`) run where 2 to this
# many projections of one kind (an Einsum or a BatchMatMulV2 by a weight, the kinds those rules merge) read it, and
# no more of the other. Their 2- and 3-way rules make C(n,2) + C(n,3) overlapping merged alternatives of n
# projections for extraction to choose among: 4 for a self-attention's Q/K/V, 84 for the 8 key/value projections of
# an encoder-decoder's memory (4 decoder layers), where the tensat pass took 17.6 s (13.7 in its probes' ILPs)
# against 3.5 s without them, for a predicted 1.050x against 1.041x (BENCHMARKS.md).
MERGE_READERS = 4
PROJECTIONS = ("Einsum", "BatchMatMulV2")
# BIAS_AT_INGEST: an AddV2 of a tensor y and a per-channel weight ([C], or [1,..,1,C] squeezed as above, C = y's last
# dim) is also a BiasAdd (rule F05's rewrite) from the start. Keras writes a folded BatchNormalization as that AddV2,
# and the multi-pattern merges written on BiasAdd (MERGE-CONV-BIAS-*, MERGE-DENSE-*: rules/merge.rules) run only in
# the first iteration, before F05's BiasAdds exist: on Inception-ResNet-v2 only the bare MERGE-CONV-2 matched, which
# leaves every branch's bias and ReLU outside the merged convolution's kernel.


def _tensor_ref(inp: str) -> tuple[str, int]:
    name, _, idx = inp.partition(":")
    return name, int(idx) if idx else 0


def _tensor_name(node: str, k: int) -> str:
    return f"{node}:{k}"


def _infer(graph_def) -> tuple[dict, dict, symbolic.Analysis, symbolic.Analysis]:
    """Output dtypes and shapes of every node: TF's own shape inference, with each dim TF leaves unknown replaced by
    its symbol where tensat_tf/symbolic.py finds one (encoded as an i64 <= -2, see tensat_tf/ops.py); the full
    symbolic analysis (Ingested.sizes); and the e-graph mode analysis that gave the symbols their codes
    (Ingested.symbols)."""
    dtypes, tf_shapes = symbolic.tf_inferred(graph_def)
    analysis = symbolic.infer(graph_def, tf_shapes, egraph=True)
    # for pricing, everything the analysis can name (the e-graph mode leaves a Reshape's product of symbols unknown
    # where the egglog rules cannot derive it): 0.07 s on ConvNeXt-Tiny's 1,000 nodes
    encoded = {t: analysis.encoded(t) for t in tf_shapes}
    return dtypes, encoded, symbolic.infer(graph_def, tf_shapes), analysis


def _attr_value(node, attr: ops.Attr):
    if attr.name not in node.attr:
        return attr.default
    v = node.attr[attr.name]
    if attr.kind == "bool":
        return bool(v.b)
    if attr.kind == "int":
        return int(v.i)
    if attr.kind == "str":
        return v.s.decode()
    if attr.kind == "float":
        return float(v.f)
    return tuple(int(x) for x in v.list.i)


def _const_value(node, kind: str):
    """The integer value of a Const node, or None when it is not a usable integer constant."""
    if node is None or node.op != "Const" or any(i.startswith("^") for i in node.input):
        return None
    arr = tf.make_ndarray(node.attr["value"].tensor)
    if arr.dtype not in (np.int32, np.int64):
        return None
    if kind == "int":
        return int(arr) if arr.ndim == 0 else None
    if kind == "pairs":
        return tuple(int(x) for x in arr.reshape(-1)) if arr.ndim == 2 and arr.shape[1] == 2 else None
    return tuple(int(x) for x in arr.reshape(-1)) if arr.ndim == 1 else None


def _array(tensor) -> np.ndarray:
    """A TensorProto's value; a read-only view of its bytes when it has them (tf.make_ndarray copies: 0.4 s of
    BERT-TASO's ingest)."""
    dtype = tf.as_dtype(tensor.dtype)
    content = tensor.tensor_content          # each read of the field copies its bytes out of the proto: read once
    if content and dtype.is_numpy_compatible and dtype != tf.string:
        shape = [d.size for d in tensor.tensor_shape.dim]
        return np.frombuffer(content, dtype=dtype.as_numpy_dtype).reshape(shape)
    return tf.make_ndarray(tensor)


def _weight_key(node, arr: np.ndarray) -> bytes:
    h = hashlib.sha256()
    h.update(str(node.attr["dtype"].type).encode())
    h.update(str(arr.shape).encode())
    if arr.dtype == object:                 # strings: their proto's bytes (an object array's are pointers)
        h.update(node.attr["value"].tensor.SerializeToString(deterministic=True))
    else:
        # the raw bytes, without a copy; as uint8, since a buffer of bfloat16 (ml_dtypes' 'E') cannot be made
        h.update(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)))
    return h.digest()


def _is_positive(arr: np.ndarray) -> bool:
    """Every element is a finite, normal float > 0: the (Positive w) fact of rules' `(positive ?w)` guard (e.g.
    relu(s*x + t) = s*relu(x + t/s), rules/positive_fold.rules). Subnormals are left out: a device that flushes them
    to zero would make them 0, and 1/s of one overflows."""
    if arr.dtype not in (np.float16, np.float32, np.float64) or not arr.size:
        return False
    return bool(np.all(np.isfinite(arr)) and np.all(arr >= np.finfo(arr.dtype).tiny))


def _typed_literals(node, spec: ops.OpSpec, nodes_by_name, shapes) -> Optional[dict]:
    """Literal values for a typed term, or None when the node must stay opaque."""
    lit = {}
    for a in spec.attrs:
        v = _attr_value(node, a)
        if v is None:
            return None
        lit[a.name] = v
    for a in ("data_format",):
        if a in node.attr:
            lit[a] = node.attr[a].s.decode()
    data_inputs = [i for i in node.input if not i.startswith("^")]
    for c in spec.const_inputs:
        ref = data_inputs[c.index]
        v = _const_value(nodes_by_name.get(node_name(ref)), c.kind)
        if v is None:
            return None
        lit[c.name] = v
    out_shape = shapes.get(_tensor_name(node.name, 0))
    if spec.shape_literal:                 # the output's shape is a run-time value: the facts' shape is its literal
        if out_shape is None:
            return None
        lit["out_shape"] = tuple(out_shape)
    if "axis" in lit:                      # normalise negative axes: rules compare them as integers
        if out_shape is None:              # (every op with an axis keeps the rank of its input)
            return None
        if lit["axis"] < 0:
            lit["axis"] += len(out_shape)
    if spec.tf_op == "SplitV":
        sizes = list(lit["size_splits"])
        if -1 in sizes:                    # make the inferred size explicit, or stay opaque
            in_shape = shapes.get(_tensor_name(*_tensor_ref(data_inputs[0])))
            dim = in_shape[lit["axis"]] if in_shape is not None else -1
            if dim < 0:
                return None
            sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
        lit["size_splits"] = tuple(sizes)
    for a, value in spec.fixed_attrs:
        if a in node.attr and node.attr[a].i != value:
            return None
    if spec.normalize is not None:
        lit = spec.normalize(lit)
        if lit is None:
            return None
    if spec.accepts is not None and not spec.accepts(lit):
        return None
    if spec.variadic and len(data_inputs) - len(spec.const_inputs) < 2:
        return None                        # a one-input ConcatV2 has no binary form
    return lit


def _topological_order(graph_def) -> list[str]:
    """Node names, inputs first; ties in graph order (so equal graphs give equal let names)."""
    order_of = {n.name: i for i, n in enumerate(graph_def.node)}
    dg = nx.DiGraph()
    dg.add_nodes_from(order_of)
    dg.add_edges_from((node_name(i), n.name) for n in graph_def.node for i in n.input)
    return list(nx.lexicographical_topological_sort(dg, key=order_of.__getitem__))


class _Ingest:
    """One pass over the graph in topological order; one method per kind of node (Input, Weight, typed, opaque)."""

    def __init__(self, graph_def, item: GrapplerItem):
        self.dtypes, shapes, analysis, coded = _infer(graph_def)
        self.ing = Ingested(graph_def=graph_def, shapes=shapes,
                            sizes={t: analysis.shapes[t] for t in shapes if analysis.shapes.get(t) is not None},
                            batch_bases=frozenset(b for b, (_, k) in analysis.base_origin.items() if k == 0),
                            symbols=coded)
        self.shapes = shapes
        self.commands = self.ing.commands
        self.nodes_by_name = {n.name: n for n in graph_def.node}
        self.keep = item.keep_nodes
        self.ctrl_sources = {node_name(i) for n in graph_def.node for i in n.input if i.startswith("^")}
        self.weight_ids: dict[bytes, int] = {}
        self.arrays: list[np.ndarray] = []     # weight id -> its value, decoded once (BERT-TASO: 0.7 s when thrice)
        self.squeezed_lets: dict[str, Optional[str]] = {}

    def run(self) -> Ingested:
        for idx, name in enumerate(_topological_order(self.ing.graph_def)):
            self._node(idx, self.nodes_by_name[name])
        # after every term: the facts name existing e-classes and leave the terms' creation order as it was
        readers: dict[str, dict[str, int]] = {}      # tensor let -> projection kind -> how many read it
        for t in self.ing.terms.values():
            w = self.ing.terms.get(t.children[1]) if t.op in PROJECTIONS else None
            if w is not None and w.op == "Weight":
                kinds = readers.setdefault(t.children[0], {})
                kinds[t.op] = kinds.get(t.op, 0) + 1
        for let, kinds in readers.items():
            if max(kinds.values()) in range(2, MERGE_READERS + 1):
                self.commands.append(L.fact("FewReaders", [L.var(let)]))
        for wid, arr in enumerate(self.arrays):
            if _is_positive(arr):
                self.commands.append(L.fact("Positive", [L.call("Weight", [L.lit(wid)])]))
            if np.issubdtype(arr.dtype, np.floating):
                self.commands.append(L.fact("Floating", [L.call("Weight", [L.lit(wid)])]))
                if arr.size == 1:
                    self.ing.scalars[wid] = float(arr.reshape(()))
        return self.ing

    def _node(self, idx: int, node) -> None:
        ing, name, let_name = self.ing, node.name, f"$n{idx}_"
        ing.lets[name] = let_name
        has_ctrl = any(i.startswith("^") for i in node.input) or name in self.ctrl_sources
        spec = ops.TABLE.get(node.op)
        if node.op in ops.BINARY_ALIASES and len([i for i in node.input if not i.startswith("^")]) == 2 \
                and ("T" not in node.attr or node.attr["T"].type != tf.string.as_datatype_enum):
            spec = ops.TABLE[ops.BINARY_ALIASES[node.op]]
        literals = None
        if spec is not None and name not in self.keep and not has_ctrl:
            literals = _typed_literals(node, spec, self.nodes_by_name, self.shapes)
            if literals is None and self._tensor_form(node):
                spec = ops.TENSOR_FORMS[node.op]
                literals = _typed_literals(node, spec, self.nodes_by_name, self.shapes)

        if node.op == "Placeholder" and not has_ctrl:
            is_tuple = self._input(let_name, node)
        elif node.op == "Const" and not has_ctrl and name not in self.keep:
            is_tuple = self._weight(let_name, node)
        elif literals is not None:
            is_tuple = self._typed(idx, let_name, node, spec, literals)
        else:
            is_tuple = self._opaque(let_name, node)
        self._outputs(idx, let_name, node, is_tuple)
        if name in self.keep:
            ing.roots.append(let_name)

    # ------------------------------------------------------------------ one method per kind; each says if it is a tuple
    def _input(self, let_name: str, node) -> bool:
        self.ing.inputs[node.name] = node
        self.commands.append(L.let(let_name, L.call("Input", [L.lit(node.name)])))
        self.ing.terms[let_name] = Original("Input", (node.name,), ())
        return False

    def _weight(self, let_name: str, node) -> bool:
        wid = self._weight_id(node, self.dtypes[node.name][0])
        self.commands.append(L.let(let_name, L.call("Weight", [L.lit(wid)])))
        self.ing.terms[let_name] = Original("Weight", (wid,), ())
        return False

    def _typed(self, idx: int, let_name: str, node, spec: ops.OpSpec, literals: dict) -> bool:
        ing, commands = self.ing, self.commands
        data_inputs = [i for i in node.input if not i.startswith("^")]
        const_pos = spec.const_positions(len(data_inputs))
        tensor_inputs = [i for p, i in enumerate(data_inputs) if p not in const_pos]
        lit_args = [L.lit(literals[n]) for n, _ in spec.literals]
        payload = tuple(literals[n] for n, _ in spec.literals)
        in_lets = [ing.output_lets[_tensor_name(*_tensor_ref(i))] for i in tensor_inputs]
        if spec.variadic:
            # right-nested binary chain; the inner links get their own lets so the emitter can find them
            inner, inner_let = self._ref(tensor_inputs[-1]), in_lets[-1]
            for j in range(len(tensor_inputs) - 2, 0, -1):
                link = f"$n{idx}_c{j}_"
                commands.append(L.let(link, L.call(spec.term, lit_args + [self._ref(tensor_inputs[j]), inner])))
                ing.terms[link] = Original(spec.term, payload, (in_lets[j], inner_let))
                inner, inner_let = L.var(link), link
            args, kids = lit_args + [self._ref(tensor_inputs[0]), inner], (in_lets[0], inner_let)
        else:
            args, kids = lit_args + [self._ref(i) for i in tensor_inputs], tuple(in_lets)
        ing.terms[let_name] = Original(spec.term, payload, kids, node,
                                       tuple(node_name(data_inputs[p]) for p in const_pos))
        if node.op == "Einsum":            # the shape analysis reads the equation through this fact
            spec_of = einsum.parse(literals["equation"]).spec
            commands.append(L.set_fn("einsum-spec", [L.lit(literals["equation"])], spec_of))
        commands.append(L.let(let_name, L.call(spec.term, args)))
        if spec.term in BROADCAST_OPS:     # the term: an Add or AddN (BINARY_ALIASES) broadcasts as its AddV2
            squeezed = [self._squeezed_weight(i, tensor_inputs[1 - k]) for k, i in enumerate(tensor_inputs)]
            if squeezed[0]:                # one operand at a time: the argument needs the other one's rank
                squeezed[1] = None
            if any(squeezed):
                alt = [L.var(sq) if sq else self._ref(i) for sq, i in zip(squeezed, tensor_inputs)]
                commands.append(L.union(L.var(let_name), L.call(spec.term, lit_args + alt)))
            if spec.term == "AddV2":
                self._bias_form(let_name, tensor_inputs, squeezed)
        return spec.outputs != "one"

    def _bias_form(self, let_name: str, tensor_inputs: list[str], squeezed: list[Optional[str]]) -> None:
        """Union AddV2(y, b) with BiasAdd(y, b) when b is a weight of shape [C], as it is or as its squeezed form
        (`squeezed`, per operand), and C is y's last dim, in either operand order: rule F05's rewrite, done at ingest
        (see BIAS_AT_INGEST)."""
        shapes = self.shapes
        for k in (0, 1):
            y, b = tensor_inputs[k], tensor_inputs[1 - k]
            y_shape = shapes.get(_tensor_name(*_tensor_ref(y)))
            b_shape = shapes.get(_tensor_name(*_tensor_ref(b)))
            if y_shape is None or b_shape is None or len(y_shape) < 2 or not b_shape:
                continue
            # b's [C] form: b itself, or its squeezed twin (only one operand gets one: a [1,1,C] b whose other
            # operand was squeezed instead has no rank-1 form here; a [1,1,1,1] b, a one-filter conv's bias, is
            # squeezed to a scalar, which BiasAdd refuses)
            if len(b_shape) == 1:
                b_let = self.ing.output_lets[_tensor_name(*_tensor_ref(b))]
            elif squeezed[1 - k] is not None and all(d == 1 for d in b_shape[:-1]) and b_shape[-1] != 1:
                b_let = squeezed[1 - k]
            else:
                continue
            if self.ing.terms[b_let].op == "Weight" and b_shape[-1] == y_shape[-1] > 0:
                self.commands.append(L.union(L.var(let_name), L.call("BiasAdd", [self._ref(y), L.var(b_let)])))
                return

    def _opaque(self, let_name: str, node) -> bool:
        self.ing.opaque[node.name] = node
        self.ing.opaque_dtypes[node.name] = self.dtypes[node.name]
        self.commands.append(L.let(let_name, L.call("Op", [L.lit(node.name),
                                                            L.tlist([self._ref(i) for i in node.input])])))
        self.ing.terms[let_name] = Original("Op", (node.name,), None)
        return True

    def _outputs(self, idx: int, let_name: str, node, is_tuple: bool) -> None:
        """Name every output tensor (an `Out` projection of a tuple) and give it its shape fact."""
        for k in range(len(self.dtypes[node.name])):
            tensor = _tensor_name(node.name, k)
            if is_tuple:
                out_let = f"$n{idx}_o{k}_"
                self.commands.append(L.let(out_let, L.call("Out", [L.var(let_name), L.lit(k)])))
                self.ing.terms[out_let] = Original("Out", (k,), (let_name,))
            else:
                out_let = let_name
            self.ing.output_lets[tensor] = out_let
            s = self.shapes.get(tensor)
            if s is not None:
                self.commands.append(L.set_shape(L.var(out_let), s))

    # ------------------------------------------------------------------ helpers
    def _tensor_form(self, node) -> bool:
        """The node's folded inputs are run-time int32 tensors and the op has a form that reads them as tensors
        (ops.TENSOR_FORMS; the emitter writes the index type as int32)."""
        spec = ops.TENSOR_FORMS.get(node.op)
        if spec is None:
            return False
        data_inputs = [i for i in node.input if not i.startswith("^")]
        refs = [_tensor_ref(data_inputs[c.index]) for c in ops.TABLE[node.op].const_inputs]
        return all(self.dtypes[n][k] == tf.int32 for n, k in refs)

    def _ref(self, inp: str):
        """egglog expression for a tensor input or a control input."""
        if inp.startswith("^"):
            return L.call("Ctl", [L.var(self.ing.lets[inp[1:]])])
        return L.var(self.ing.output_lets[_tensor_name(*_tensor_ref(inp))])

    def _weight_id(self, node, dtype, arr: Optional[np.ndarray] = None) -> int:
        """The Weight id of a Const's content (arr: its value, if known), registering node as its source on first
        sight."""
        if arr is None:
            arr = _array(node.attr["value"].tensor)
        key = _weight_key(node, arr)
        if key not in self.weight_ids:
            self.weight_ids[key] = len(self.ing.weights)
            self.ing.weights.append(node)
            self.ing.weight_dtypes.append(dtype)
            self.arrays.append(arr)
        return self.weight_ids[key]

    def _squeezed_weight(self, inp: str, other: str) -> Optional[str]:
        """Let name of the squeezed form of weight input `inp` of a broadcasting op whose other operand is `other`
        (see BROADCAST_OPS), creating it on first use; None when `inp` has no such form."""
        ing, shapes = self.ing, self.shapes
        tensor, other_shape = _tensor_name(*_tensor_ref(inp)), shapes.get(_tensor_name(*_tensor_ref(other)))
        shape, let = shapes.get(tensor), ing.output_lets[tensor]
        if ing.terms[let].op != "Weight" or shape is None or other_shape is None or len(shape) > len(other_shape):
            return None
        lead = next((k for k, d in enumerate(shape) if d != 1), len(shape))
        if lead == 0:
            return None
        if let not in self.squeezed_lets:
            src_id = ing.terms[let].payload[0]
            src = ing.weights[src_id]
            value = self.arrays[src_id].reshape(shape[lead:])
            new = tf.compat.v1.NodeDef(name=src.name + "/squeezed", op="Const")
            while new.name in self.nodes_by_name:
                new.name += "_"
            new.attr["dtype"].CopyFrom(src.attr["dtype"])
            new.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            wid = self._weight_id(new, ing.weight_dtypes[src_id], value)
            sq = let + "sq_"
            self.commands.append(L.let(sq, L.call("Weight", [L.lit(wid)])))
            self.commands.append(L.set_shape(L.var(sq), shape[lead:]))
            ing.terms[sq] = Original("Weight", (wid,), ())
            self.squeezed_lets[let] = sq
        return self.squeezed_lets[let]


def ingest(graph_def, item: GrapplerItem) -> Ingested:
    return _Ingest(graph_def, item).run()


def load(eg, ing: Ingested) -> None:
    """Run the ingest commands and the shape analysis on `eg`."""
    eg.run_program(*ing.commands)
    L.run_shapes(eg)
