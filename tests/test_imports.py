"""The package's own imports, read from the source: no import circle anywhere, and the core (lit_resformer) never
imports the periphery (ablations, eval, benchmarks) but from its command-line entry point.

Every import counts, also one inside a function: an import put off until a call hides a circle, it does not
remove it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("lit_resformer", "ablations", "eval", "benchmarks")
PERIPHERY = ("ablations", "eval", "benchmarks")
COMMAND_LINE = "lit_resformer.cli"


def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every Python file of the packages (a package by its __init__.py)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that the file imports: `from X import n` names X.n when that is a module, else X."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
    return {m for m in found if m in modules and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """module -> the modules it imports."""
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_the_graph_is_read(graph):
    """The reading itself: known imports are found, relative ones resolved, a circle is seen."""
    assert "ablations.results" in graph["ablations.report"]  # from .results import ...
    assert "lit_resformer.reporting" in graph["lit_resformer.run_dir"]  # from .reporting import ...
    assert "lit_resformer.config_files" in graph["ablations.spec"]  # from lit_resformer.config_files import ...
    assert "ablations.report_analysis" in graph["ablations.report"]  # inside a function
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter({**graph, "lit_resformer.reporting": {"ablations.report"}}).static_order())


def test_no_import_circle(graph):
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"modules that import each other in a circle: {' -> '.join(err.args[1])}")


def test_the_core_imports_the_periphery_only_from_its_command_line(graph):
    crossing = sorted((a, b) for a, imported in graph.items() for b in imported
                      if a.split(".")[0] == "lit_resformer" and b.split(".")[0] in PERIPHERY and a != COMMAND_LINE)
    assert crossing == [], f"core modules that import the periphery: {crossing}"
