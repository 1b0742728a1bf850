"""The shape of the code base, checked so that it cannot drift: no import cycle between simrun's
modules, no module over 400 lines, the domain folders in place.

Imports are read with :mod:`ast`: every ``import sim.x`` / ``from sim.x import y`` at module
level (inside functions too: a lazy import still ties two modules together), except those under
``if TYPE_CHECKING:`` and those of a package's module-level ``__getattr__`` (PEP 562: ``import
sim`` re-exports :mod:`sim.api` on first attribute access, which no module of simrun makes).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SIM = Path(__file__).resolve().parent.parent / "sim"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(SIM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SIM.rglob("*.py"))}


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The simrun modules that module ``name`` imports (a package import resolves to the
    package's ``__init__``; ``from pkg import mod`` to the submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("sim"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.startswith("sim"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in modules else node.module)
    return {m for m in out if m in modules and m != name}


def import_graph() -> nx.DiGraph:
    modules = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        g.add_edges_from((name, dep) for dep in _imports(name, path, modules))
    return g


def test_the_import_graph_finds_known_edges():
    # the scan itself works: an edge that must exist is found
    g = import_graph()
    assert g.has_edge("sim.engine.core", "sim.pipeline.ops")
    assert g.has_edge("sim.models.generator", "sim.parallel.config")


def test_no_import_cycle_between_modules():
    g = import_graph()
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_no_module_over_400_lines():
    too_long = {name: n for name, p in _modules().items()
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}


def test_few_loose_modules_at_the_top_of_the_package():
    # the domain lives in folders; only the shared vocabulary stays at the top
    loose = sorted(p.stem for p in SIM.glob("*.py") if p.stem != "__init__")
    assert len(loose) <= 8, loose
