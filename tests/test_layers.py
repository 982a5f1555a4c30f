"""The package's layers: every import (at the top of a module or inside a function) goes to
the same layer or one below, and no modules import each other in a circle.

The layers, lowest first, are the map a contributor reads the code by (docs/architecture.md):
foundations, data, metrics, features, fusion, the greedy core, checkpoints, the models,
training, the end-to-end model, and the workflows and commands on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "dgn"

#: Lowest first. A module belongs to the first entry that is its name or a package above it.
LAYERS: list[tuple[str, ...]] = [
    ("dgn._version", "dgn.errors", "dgn._choices", "dgn._options", "dgn._validation", "dgn._memory", "dgn._progress"),
    ("dgn.data",),
    ("dgn.metrics",),
    ("dgn.features",),
    ("dgn.fusion",),
    ("dgn._paths", "dgn.distributed"),
    ("dgn.objectives",),
    ("dgn._kernels",),
    ("dgn.greedy", "dgn.encoder"),
    ("dgn.layer", "dgn.losses"),
    ("dgn.training",),
    ("dgn.checkpoint",),
    ("dgn.baselines",),
    ("dgn.model",),
    ("dgn.pipeline",),
    ("dgn.ranking",),
    ("dgn.train",),
    ("dgn.sentence",),
    ("dgn.tune", "dgn.explain", "dgn.trainer"),
    ("dgn.selector",),
    ("dgn.predict", "dgn.benchmark"),
    ("dgn.commands", "dgn.cli"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int:
    for rank, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _imports(module: str) -> set[str]:
    """The dgn modules ``module`` imports, anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("dgn") and name != module:
                found.add(name)
    return found


#: ``dgn/__init__.py`` only names what it re-exports on first use; it is no layer.
GRAPH = {m: _imports(m) - {"dgn"} for m in MODULES if m != "dgn"}


def test_every_module_has_a_layer():
    for module in GRAPH:
        _layer(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down_or_across(module):
    upward = sorted(t for t in GRAPH[module] if _layer(t) > _layer(module))
    assert not upward, f"{module} (layer {_layer(module)}) imports from higher layers: {upward}"


def test_no_import_circle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not circles, f"modules that import each other in a circle: {circles}"


def test_the_checker_sees_an_upward_import_and_a_circle(tmp_path):
    """The checks above can fail: a function-level import from the core up to the commands
    is seen, and two modules that import each other make a circle."""
    saved = dict(GRAPH)
    try:
        GRAPH["dgn.greedy"] = GRAPH["dgn.greedy"] | {"dgn.commands.train"}
        with pytest.raises(AssertionError, match="higher layers"):
            test_imports_go_down_or_across("dgn.greedy")
        GRAPH["dgn.objectives"] = GRAPH["dgn.objectives"] | {"dgn.greedy"}
        with pytest.raises(AssertionError, match="circle"):
            test_no_import_circle()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)
    assert "dgn.checkpoint" in _imports("dgn.model") and "dgn.errors" in _imports("dgn.model")
