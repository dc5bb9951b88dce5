"""The package's own imports, read from the source: no import circle anywhere, every import runs down the layers
(LAYERS), the core library never imports the suites over it (grids, verdicts, reports, eval, export, benchmarks)
but from its command-line entry point, no package is over 2,500 lines and no module name is used twice. Also what
the package installs: lit_resformer, no other top-level name.

Every import counts, also one inside a function: an import put off until a call hides a circle, it does not
remove it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("lit_resformer", "benchmarks")
# Suites over the core library: each may import the core, the core none of them.
PERIPHERY = ("lit_resformer.grids", "lit_resformer.execution", "lit_resformer.stacking", "lit_resformer.measures", "lit_resformer.verdicts", "lit_resformer.reports",
             "lit_resformer.board", "lit_resformer.eval", "lit_resformer.export", "benchmarks")
# The rooms, bottom up: a module imports only from its own layer or the layers below it.
LAYERS = (
    ("lit_resformer.config", "lit_resformer.model", "lit_resformer.corpora", "lit_resformer.writing",
     "lit_resformer.provenance", "lit_resformer.options"),
    ("lit_resformer.data",),
    # a run's own files, in the runs room but below training, which writes them (lit_resformer/runs/run_dir.py says why)
    ("lit_resformer.runs.run_dir", "lit_resformer.runs.checkpoint_reading"),
    ("lit_resformer.training",),
    ("lit_resformer.runs",),
    ("lit_resformer.analysis", "lit_resformer.eval", "lit_resformer.export"),
    ("lit_resformer.stacking",),
    ("lit_resformer.execution",),
    ("lit_resformer.grids",),
    ("lit_resformer.measures",),
    ("lit_resformer.verdicts",),
    ("lit_resformer.reports",),
    ("lit_resformer.board",),
    ("lit_resformer.cli", "benchmarks"),
)
PACKAGE_LINES = 2500
COMMAND_LINE = "lit_resformer.cli"
INSTALLED_TOP_LEVEL = {"lit_resformer"}


def within(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def is_core(module: str) -> bool:
    return within(module, ("lit_resformer",)) and not within(module, PERIPHERY) and module != COMMAND_LINE


def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every Python file of the packages (a package by its __init__.py)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def nodes_run_on_import(tree: ast.Module):
    """The statements and expressions that importing the module runs: all but the bodies of functions."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))


def imported_modules(name: str, path: Path, modules: dict[str, Path], on_import_only: bool = False) -> set[str]:
    """The modules of `modules` that the file imports: `from X import n` names X.n when that is a module, else X.
    With `on_import_only`, only the imports that importing the file runs, none inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in nodes_run_on_import(tree) if on_import_only else ast.walk(tree):
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
    assert "lit_resformer.runs.results" in graph["lit_resformer.reports.grid_report"]  # from .results import ...
    assert "lit_resformer.writing" in graph["lit_resformer.runs.run_dir"]  # from .reporting import ...
    assert "lit_resformer.config.files" in graph["lit_resformer.grids.spec"]  # from lit_resformer.config.files import ...
    assert "lit_resformer.reports.attention" in graph["lit_resformer.reports.grid_report"]  # inside a function
    assert "lit_resformer.export.hf_remote.configuration_resformer" in graph[
        "lit_resformer.export.hf_remote.modeling_resformer"]  # relative
    assert "lit_resformer.eval.run" in graph[COMMAND_LINE]  # inside the eval subcommand
    assert is_core("lit_resformer.model.transformer") and is_core("lit_resformer.runs.run_dir")
    assert layer("lit_resformer.runs.run_dir") < layer("lit_resformer.training.module") < layer("lit_resformer.runs.results")
    assert not any(map(is_core, ("lit_resformer.eval.run", "lit_resformer.export", COMMAND_LINE, "lit_resformer.execution.jobs")))
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter({**graph, "lit_resformer.writing": {"lit_resformer.reports.grid_report"}}).static_order())


def test_no_import_circle(graph):
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"modules that import each other in a circle: {' -> '.join(err.args[1])}")


def layer(module: str) -> int:
    if module == "lit_resformer":  # the package's face: load_checkpoint
        return layer("lit_resformer.runs.checkpoint_reading")
    return next(i for i, packages in enumerate(LAYERS) if within(module, packages))


def test_every_import_runs_down_the_layers(graph):
    upward = sorted((a, b) for a, imported in graph.items() for b in imported if layer(b) > layer(a))
    assert upward == [], f"imports that run back up the layers: {upward}"


def test_rooms_are_small_and_names_are_not_reused():
    sizes: dict[str, int] = {}
    names: dict[str, list[str]] = {}
    for name, path in module_files().items():
        if name.startswith("lit_resformer."):
            room = ".".join(name.split(".")[:2])
            sizes[room] = sizes.get(room, 0) + len(path.read_text().splitlines())
        if path.name != "__init__.py":
            names.setdefault(path.stem, []).append(name)
    assert {room: n for room, n in sizes.items() if n > PACKAGE_LINES} == {}
    assert {stem: found for stem, found in names.items() if len(found) > 1} == {}


def test_the_core_imports_the_periphery_only_from_its_command_line(graph):
    crossing = sorted((a, b) for a, imported in graph.items() for b in imported if is_core(a) and within(b, PERIPHERY))
    assert crossing == [], f"core modules that import the periphery: {crossing}"


def test_the_command_line_imports_the_periphery_only_when_a_command_runs(graph):
    modules = module_files()
    on_import = imported_modules(COMMAND_LINE, modules[COMMAND_LINE], modules, on_import_only=True)
    assert {"lit_resformer.options", "lit_resformer.training.runtime"} <= on_import  # what it does import up front
    assert {m for m in graph[COMMAND_LINE] if within(m, PERIPHERY)} >= {"lit_resformer.eval.run", "lit_resformer.export"}
    assert sorted(m for m in on_import if within(m, PERIPHERY)) == []


def test_export_does_not_need_lm_eval(graph):
    """Writing a Hugging Face folder imports nothing of the evaluation suite (nor lm-eval through it)."""
    crossing = sorted((a, b) for a, imported in graph.items() for b in imported
                      if within(a, ("lit_resformer.export",)) and within(b, ("lit_resformer.eval",)))
    assert crossing == [], f"export modules that import eval: {crossing}"


def test_only_the_project_s_own_names_are_installed():
    """The packages setuptools installs from pyproject, by top-level name: generic ones (eval, benchmarks) would
    collide in site-packages with other projects' packages of that name."""
    from setuptools.config.pyprojecttoml import read_configuration

    setuptools_config = read_configuration(REPO / "pyproject.toml")["tool"]["setuptools"]
    installed = set(setuptools_config["packages"])  # the package list find resolves to
    assert {name.split(".")[0] for name in installed} == INSTALLED_TOP_LEVEL
    assert {"lit_resformer.eval", "lit_resformer.export"} <= installed
    assert setuptools_config["package-data"] == {"lit_resformer.eval": ["tasks_data/**/*"],
                                                 "lit_resformer.corpora": ["pinned_corpus.json"],
                                                 "lit_resformer.config": ["fit_fields.json"],
                                                 "lit_resformer.board": ["board.css", "board.js"],
                                                 "lit_resformer.export": ["hf_remote/*.py"]}
    assert (REPO / "lit_resformer/eval/tasks_data").is_dir() and (REPO / "lit_resformer/export/hf_remote").is_dir()


def test_tests_are_laid_out_like_the_package_and_import_no_other_test_module():
    """A test of lit_resformer/<package>/ lives in tests/<package>/ (project-wide checks at tests/), a test module's name
    is used once (pytest imports each by its name), and what tests share is a fixture in conftest.py or a function in
    tests/helpers/, never an import of another test module."""
    tests = REPO / "tests"
    packages = {p.name for p in (REPO / "lit_resformer").iterdir() if (p / "__init__.py").is_file()}
    files = sorted(tests.rglob("test_*.py"))
    folders = {f.parent.name for f in files if f.parent != tests}
    assert folders <= packages, folders - packages
    names = [f.name for f in files]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(name.split(".")[-1].startswith("test_") for name in imported), (path, imported)
