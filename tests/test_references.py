"""What the code, configs and documents point a reader to exists: every project file they name by path, and every
dotted `lit_resformer.module.name` they cite. A file moved or a function renamed leaves no comment pointing nowhere."""

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# where a reader is sent: the package, its configs, scripts, benchmarks, tests and documents (not the committed runs)
SOURCES = [p for folder in ("lit_resformer", "configs", "scripts", "benchmarks", "tests", "docs")
           for p in (REPO / folder).rglob("*") if p.suffix in {".py", ".yaml", ".md", ".sh"}
           and "results" not in p.relative_to(REPO).parts[:2]] + [REPO / "README.md", REPO / "Makefile"]
# a project path: not inside another path (a test's fixture such as pkg/tests/test_core.py)
PATH = re.compile(r"(?<![\w/.-])((?:lit_resformer|configs|scripts|benchmarks|tests|docs)/[\w/.-]*\w\.(?:py|sh|yaml|md))")
DOTTED = re.compile(r"(?<![\w.])lit_resformer(?:\.\w+)+")
# paths of other projects, named as theirs: (the path, the words before it that say whose it is)
ELSEWHERE = {"scripts/base_train.py": "nanochat"}
# the files the recipes of docs/EXTENDING.md and docs/REFERENCE.md have a reader write
RECIPES = {"configs/grids/figN.yaml", "configs/figures/attn-gate.yaml", "configs/grids/attn-gate.yaml",
           "configs/grids/repro/attn-gate.yaml", "configs/grids/transfer/fig9-muon.yaml"}


def named(pattern: re.Pattern, sources: list[Path] = SOURCES) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in sources:
        if source == Path(__file__):
            continue
        text = source.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            owner = ELSEWHERE.get(match.group(0))
            if owner and owner in text[max(0, match.start() - 80):match.start()]:
                continue
            found.setdefault(match.group(0), set()).add(str(source.relative_to(REPO)))
    return found


def test_sources_are_read():
    assert len(SOURCES) > 200 and REPO / "lit_resformer" / "model" / "transformer.py" in SOURCES


def test_every_project_path_named_exists():
    # the tests name the files their fixtures write; everything else names files of this checkout
    named_paths = named(PATH, [s for s in SOURCES if not s.is_relative_to(REPO / "tests")])
    assert RECIPES <= set(named_paths)  # each still a recipe's
    missing = {path: sorted(where) for path, where in named_paths.items()
               if not (REPO / path).exists() and path not in RECIPES}
    assert missing == {}


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    if REPO.joinpath(*parts).with_suffix(".py").is_file():  # a module file outside a package (the export's remote code)
        return True
    for k in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[k:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_dotted_name_cited_resolves():
    package = {p.stem for p in (REPO / "lit_resformer").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    # `lit_resformer.name` and the like are keys of a results file, not modules: only names under a module are checked
    cited = {name: where for name, where in named(DOTTED).items() if name.split(".")[1] in package}
    assert len(cited) > 20
    assert {name: sorted(where) for name, where in cited.items() if not resolves(name)} == {}


@pytest.mark.parametrize("text, found", [("see lit_resformer/grids/spec.py `Ladder`", ["lit_resformer/grids/spec.py"]),
                                         ('"pkg/tests/test_core.py": 1', []), ("docs/x.md", ["docs/x.md"]), ("see ../docs/x.md", [])])
def test_a_path_is_read_where_it_is_named(text, found):
    assert PATH.findall(text) == found


def test_every_relative_link_of_a_document_resolves():
    documents = [s for s in SOURCES if s.suffix == ".md"]
    links = {(str(d.relative_to(REPO)), target) for d in documents
             for target in re.findall(r"\]\(([^)\s]+)\)", d.read_text(encoding="utf-8"))
             if not target.startswith(("http://", "https://", "#", "mailto:"))}
    assert len(links) > 40
    assert sorted((d, t) for d, t in links if not (REPO / d).parent.joinpath(t.split("#")[0]).exists()) == []
