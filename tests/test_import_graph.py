"""The package's import graph: no module imports one that imports it back (directly or around a
loop), and no lower layer imports a higher one.

Every import counts, at module level and inside functions alike: an import deferred into a
function still ties the two modules together, it only hides the loop until that function runs.
The graph is read from the source (``ast``), relative imports resolved, nothing imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "layerfuse"

# Bottom to top. A module may import its own package and any package of a lower layer; packages of
# one layer are independent of each other. ``layerfuse`` is the package's own __init__.
LAYERS = (
    ("errors", "versions", "display", "hub", "lifeline", "files", "seeds"),  # imports nothing of the project
    ("tasks", "transfer", "device"),  # the task registry (no torch); host arrays onto the device; --device checked
    ("cache", "fusions", "layers"),  # the on-disk format; the heads (torch only); the layer specs
    ("precision",),  # the forward-pass precisions: one table for extraction and training
    ("extract",),  # datasets in, the backbone's forward, writes the cache
    ("training",),  # one run from the cache
    ("finetune",),  # the live backbone for the same loop
    ("inference", "probing", "experiments"),  # prediction; probes; grids of runs
    ("hf",),  # trained heads as transformers models
    ("serve",),  # the HTTP service
    ("cli",),  # every command
    ("__main__", "layerfuse"),  # ``python -m layerfuse``; ``import layerfuse``
)


def modules() -> dict[str, Path]:
    """``{"layerfuse.training.data": path}`` of every module, packages by their __init__."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` for every import of the project, wherever it sits."""
    mods = modules()

    def known(name: str) -> str | None:
        while name not in mods and "." in name:
            name = name.rpartition(".")[0]
        return name if name in mods else None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod itself
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in mods else source
                           for alias in node.names]
            else:
                continue
            for target in targets:
                if target != "layerfuse" and not target.startswith("layerfuse."):
                    continue
                target = known(target)
                if target and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def layer_of(module: str) -> tuple[str, int]:
    """(top-level name, layer index) of a module: ``layerfuse.training.data`` -> ("training", 4)."""
    top = module.split(".")[1] if "." in module else module
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return top, index
    raise AssertionError(f"{module} is in no layer of LAYERS: add {top!r} where it belongs")


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    for module in modules():
        layer_of(module)


def test_no_import_cycles():
    graph = import_graph()
    loops = []
    for component in cycles(graph):
        inside = set(component)
        arrows = [f"{a} -> {b} (line {line})" for a in component for b, line in sorted(graph[a].items())
                  if b in inside]
        loops.append(f"{', '.join(component)}:\n    " + "\n    ".join(arrows))
    assert not loops, "modules that import each other, around a loop:\n" + "\n".join(loops)


def test_no_lower_layer_imports_a_higher_one():
    wrong = []
    for module, edges in sorted(import_graph().items()):
        top, layer = layer_of(module)
        for target, line in sorted(edges.items()):
            other, other_layer = layer_of(target)
            if other != top and other_layer >= layer:
                wrong.append(f"{module} -> {target} (line {line}): layer {layer} imports layer {other_layer}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "layerfuse.tasks" in graph["layerfuse.training.tasks"]  # at module level
    assert "layerfuse.training.tasks" in graph["layerfuse.training.checkpoint"]  # the head class, inside a function
    assert "layerfuse.finetune.live" in graph["layerfuse.inference.predictor"]  # inside a method
