"""The offline code corpus: what it takes and skips, its order, manifest, reuse, and the split by file."""

import json

import pytest

from lit_resformer.corpora.code_corpus import CORPUS_FILE, MAX_FILE_BYTES, prepare_code_corpus, read_manifest
from lit_resformer.corpora.sources import local_documents
from lit_resformer.data.packing import scan_corpus


def _package_tree(root):
    files = {
        "pkg/__init__.py": "VERSION = 1\n",
        "pkg/core.py": "def add(a, b):\n    return a + b\n",
        "pkg/sub/zeta.py": "Z = 'zeta'\n",
        "pkg/sub/alpha.py": "A = 'alpha'\n",
        "pkg/tests/test_core.py": "def test(): pass\n",  # test folder
        "pkg/testing/helpers.py": "H = 1\n",  # test folder
        "pkg/__pycache__/core.cpython-311.py": "cached\n",
        "pkg/test_inline.py": "def test_x(): pass\n",  # test module
        "pkg/vendored/copy_of_core.py": "def add(a, b):\n    return a + b\n",  # duplicate content
        "pkg/empty.py": "   \n",
        "pkg/data.txt": "not python\n",
        "other/mod.py": "print('other')\n",
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "pkg/latin1.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    (root / "pkg/huge.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 10))
    return root


def _records(out):
    return [json.loads(line) for line in (out / CORPUS_FILE).read_text().splitlines()]


def test_sources_skips_and_stable_order(tmp_path):
    tree = _package_tree(tmp_path / "site")
    manifest = prepare_code_corpus(tmp_path / "corpus", roots=[tree], min_chars=10, max_chars=10_000)
    paths = [r["path"].split(":", 1)[1] for r in _records(tmp_path / "corpus")]
    assert paths == ["other/mod.py", "pkg/__init__.py", "pkg/core.py", "pkg/sub/alpha.py", "pkg/sub/zeta.py"]
    assert manifest["files"] == 5
    assert manifest["characters"] == sum(len(r["text"]) for r in _records(tmp_path / "corpus"))
    assert manifest["skipped"] == {
        "duplicate content": 1, "empty": 1, "larger than 512000 bytes": 1, "not UTF-8": 1,
        "skipped folder (tests, caches, nested site-packages)": 3}
    # the same tree gives the same corpus, byte for byte
    again = prepare_code_corpus(tmp_path / "corpus2", roots=[tree], min_chars=10, max_chars=10_000)
    assert again["sha256"] == manifest["sha256"]


def test_max_chars_cuts_in_order_and_min_chars_is_enforced(tmp_path):
    tree = _package_tree(tmp_path / "site")
    first_two = len("print('other')") + len("VERSION = 1")
    manifest = prepare_code_corpus(tmp_path / "c", roots=[tree], min_chars=1, max_chars=first_two)
    assert manifest["files"] == 2
    with pytest.raises(ValueError, match="fewer than min_chars=100,000"):
        prepare_code_corpus(tmp_path / "d", roots=[tree], min_chars=100_000, max_chars=200_000)
    assert not (tmp_path / "d").exists()


def test_intact_corpus_is_reused_and_damaged_one_rebuilt(tmp_path):
    tree = _package_tree(tmp_path / "site")
    out = tmp_path / "corpus"
    manifest = prepare_code_corpus(out, roots=[tree], min_chars=10, max_chars=10_000)
    assert read_manifest(out) == manifest
    with (out / CORPUS_FILE).open("a") as f:
        f.write('{"text": "tampered"}\n')
    assert read_manifest(out) is None
    assert prepare_code_corpus(out, roots=[tree], min_chars=10, max_chars=10_000) == manifest
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="holds other files"):
        prepare_code_corpus(tmp_path / "mine", roots=[tree], min_chars=10, max_chars=10_000)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_one_document_per_file_so_the_holdout_splits_by_file(tmp_path):
    tree = tmp_path / "site"
    for i in range(40):
        path = tree / f"pkg/m{i:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def f{i}():\n    return {i}\n")
    out = tmp_path / "corpus"
    prepare_code_corpus(out, roots=[tree], min_chars=10, max_chars=10_000)
    documents = list(local_documents(out / CORPUS_FILE))  # data.path names the .jsonl itself
    assert len(documents) == 40 and {d.domain for d in documents} == {"python"}
    texts = {r["text"] for r in _records(out)}
    assert {d.text for d in documents} == texts  # each file is exactly one document
    scan = scan_corpus(documents, holdout_fraction=0.05)
    assert sorted(scan.held_out["python"].values()) == ["test", "test", "val", "val"]
