"""The import graph of the package: no circle among its modules, and no arrow from the library into the CLI.

Every module under tensat_tf/, passes/ and rules/ (installed as tensat_tf.passes and tensat_tf.rules, see setup.py)
is parsed with ast; an edge is any import of another tensat_tf module, at the top or inside a function (a lazy
import is still a dependency, and so is one under `if __name__ == "__main__":`). Not counted: imports under
`if TYPE_CHECKING:` (never run).
"""
import ast
import os

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"tensat_tf": "tensat_tf", "tensat_tf.passes": "passes", "tensat_tf.rules": "rules"}
CLI = "tensat_tf.cli"
# circles that other pieces of issue 13 remove; each entry is one circle's modules, sorted. Empty: none known.
KNOWN_CYCLES: list[tuple[str, ...]] = []


def modules() -> dict[str, str]:
    """module name -> file path."""
    out = {}
    for package, folder in FOLDERS.items():
        base = os.path.join(ROOT, folder)
        for root, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(root, base)
            if package == "tensat_tf" and rel.split(os.sep)[0] in ("passes", "rules"):
                continue
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for f in sorted(files):
                if f.endswith(".py"):
                    out[prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"] = os.path.join(root, f)
    return out


def _skipped_block(node) -> bool:
    if not isinstance(node, ast.If):
        return False
    text = ast.unparse(node.test)
    return text in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _imports(tree):
    stack = [tree]
    while stack:
        node = stack.pop()
        if _skipped_block(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                # `from pkg import sub` imports the module pkg.sub when there is one, else a name of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:         # `import a.b.c` of a name inside a.b: the module a.b
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
    return g


def test_the_graph_sees_the_package():
    g = graph()
    assert {"tensat_tf.convert", "tensat_tf.passes.tensat", "tensat_tf.rules", "tensat_tf.cli.main"} <= set(g)
    assert g.has_edge("tensat_tf.passes.tensat", "tensat_tf.egraph.saturate")
    assert g.has_edge("tensat_tf.cli.main", "tensat_tf.cli.convert_cmd")


def test_no_import_circle():
    cycles = sorted(tuple(sorted(c)) for c in nx.simple_cycles(graph()))
    assert [c for c in cycles if c not in KNOWN_CYCLES] == []


def test_the_library_never_imports_the_cli():
    into_cli = sorted((a, b) for a, b in graph().edges
                      if (b == CLI or b.startswith(CLI + ".")) and not (a == CLI or a.startswith(CLI + ".")))
    assert into_cli == []
