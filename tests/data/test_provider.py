"""The offline data provider: real fetched data (fetched into the default data root on first
use, a no-op afterwards), integrity checks on corrupted copies, the install pipeline offline
(a fake registry). The datasets are the installed domains' (``domains.installed.catalogue``),
handed to the provider's functions as a value."""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
import json
import shutil
import struct
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from domains import installed
from toolkit.data import MARKER, Artifact, Catalogue, ChecksumError, Dataset, FetchError, Source, data_root
from toolkit.data import root as data_folder
from toolkit.data.fetchers import check_artifact

CATALOGUE = installed.catalogue()  # the vision and text domains' datasets


def locate(name, root=None, fetch=True):
    return data_folder.locate(CATALOGUE, name, root, fetch)


def fetch(name, root=None, force=False, catalogue=CATALOGUE):
    return data_folder.fetch(catalogue, name, root, force)


def verify(name, root=None):
    return data_folder.verify(CATALOGUE, name, root)


def is_installed(name, root=None, catalogue=CATALOGUE):
    return data_folder.is_installed(catalogue, name, root)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- real data (default data root)


def test_default_set_is_the_documented_one():
    # the installed domains' order: vision's, then text's
    assert CATALOGUE.default_names() == (
        "fashion-mnist",
        "foolbox-samples",
        "austen",
        "mobydick",
        "sotu",
        "brown",
        "rotten-tomatoes",
        "vader-groundtruth",
        "trec",
        "bibles",
    )
    assert set(CATALOGUE.names()) == {
        "fashion-mnist",
        "mnist",
        "foolbox-samples",
        "austen",
        "mobydick",
        "sotu",
        "brown",
        "rotten-tomatoes",
        "vader-groundtruth",
        "trec",
        "bibles",
    }
    for entry in CATALOGUE.datasets:
        assert entry.licence and entry.description and entry.download_bytes > 0
        for source in entry.sources:
            assert len(source.tree_sha256) == 64
            for artifact in source.artifacts:
                assert len(artifact.sha256) == 64 and artifact.version


def _idx_header(path: Path, magic: int, dims: int) -> tuple[int, ...]:
    raw = path.read_bytes()[: 4 * (dims + 1)]
    got_magic, *shape = struct.unpack(f">{dims + 1}I", raw)
    assert got_magic == magic, f"{path}: IDX magic {got_magic:#010x}, expected {magic:#010x}"
    return tuple(shape)


@pytest.mark.parametrize("split,count", [("train", 60000), ("t10k", 10000)])
def test_fashion_mnist_raw_idx_files(split, count):
    raw = locate("fashion-mnist") / "raw"
    images, labels = raw / f"{split}-images-idx3-ubyte", raw / f"{split}-labels-idx1-ubyte"
    # IDX: magic 0x00000803 = unsigned bytes, 3 dims; 0x00000801 = unsigned bytes, 1 dim.
    assert _idx_header(images, 0x00000803, 3) == (count, 28, 28)
    assert images.stat().st_size == 16 + count * 28 * 28
    assert _idx_header(labels, 0x00000801, 1) == (count,)
    label_bytes = labels.read_bytes()[8:]
    assert len(label_bytes) == count
    # Fashion-MNIST is balanced: 6,000 (train) / 1,000 (test) images per class.
    assert Counter(label_bytes) == {k: count // 10 for k in range(10)}
    assert (raw.parent.name, raw.name) == ("FashionMNIST", "raw")  # torchvision's layout


def test_austen_six_novels_in_reading_order():
    folder = locate("austen")
    rows = [line.split("\t") for line in (folder / "books.tsv").read_text("utf-8").splitlines()[1:]]
    titles = [r[1] for r in rows]
    assert titles == [
        "Sense & Sensibility",
        "Pride & Prejudice",
        "Mansfield Park",
        "Emma",
        "Northanger Abbey",
        "Persuasion",
    ]
    files = sorted(folder.glob("*.txt"))
    assert [f.name for f in files] == [r[0] for r in rows]  # sorted names = reading order
    first_lines = [f.read_text("utf-8").splitlines()[0] for f in files]
    assert first_lines == [
        "SENSE AND SENSIBILITY",
        "PRIDE AND PREJUDICE",
        "MANSFIELD PARK",
        "EMMA",
        "NORTHANGER ABBEY",
        "Persuasion",
    ]
    texts = [f.read_text("utf-8") for f in files]
    words = sum(len(t.split()) for t in texts)
    assert abs(words - 717_537) <= 717_537 * 0.001, words
    pride = texts[1]
    assert (
        "It is a truth universally acknowledged, that a single man in possession\n"
        "of a good fortune, must be in want of a wife.\n\n"
    ) in pride  # blank line = paragraph
    assert all(t.count("\n\n") > 1000 for t in texts)


def test_rotten_tomatoes_counts():
    path = locate("rotten-tomatoes") / "rotten_tomatoes_corpus_full.csv.bz2"
    with io.TextIOWrapper(bz2.open(path), encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert {"category", "text"} <= set(reader.fieldnames)
        counts = Counter(row["category"] for row in reader)
    assert counts["fresh"] == 7403 and counts["rotten"] == 5405 and counts["plot"] == 1097


def test_sentence_sets_for_senteval_stand_ins():
    vader = locate("vader-groundtruth")
    for name, rows in (("amazonReviewSnippets_GroundTruth.txt", 3708), ("nytEditorialSnippets_GroundTruth.txt", 5190)):
        lines = (vader / name).read_text("utf-8").splitlines()
        assert len(lines) == rows
        assert all(len(line.split("\t")) == 3 and -4 <= float(line.split("\t")[1]) <= 4 for line in lines)
    trec = (locate("trec") / "question_labels.txt").read_text("latin-1").splitlines()
    train = trec[-5452:]
    assert all(line.split(" ", 1)[0].split(":")[0] in {"ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"} for line in train)
    bibles = locate("bibles")
    assert sorted(p.name for p in (bibles / "mods.d").glob("*.conf")) == ["engKJV2006eb.conf", "engWEB2015eb.conf"]
    assert len(list((locate("foolbox-samples")).glob("cifar10_*.png"))) == 20


def test_installed_default_datasets_verify_and_fetch_is_a_no_op(monkeypatch):
    for name in ("austen", "rotten-tomatoes", "trec"):
        folder = locate(name)
        marker = json.loads((folder / MARKER).read_text())
        for rel, info in marker["files"].items():  # marker hashes = the files on disk
            assert _sha256((folder / rel).read_bytes()) == info["sha256"]
        assert verify(name) == folder
    monkeypatch.setattr(data_folder, "download", lambda *a, **k: pytest.fail("fetch downloaded again"))
    assert fetch("austen") == locate("austen")


# ---------------------------------------------------------------- integrity on a copied root


def _copy_dataset(name: str, tmp_path: Path) -> Path:
    source = locate(name)
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def test_verify_names_a_corrupted_file(tmp_path):
    folder = _copy_dataset("austen", tmp_path)
    assert verify("austen", tmp_path) == folder
    victim = folder / "4-emma.txt"
    data = bytearray(victim.read_bytes())
    data[1000] ^= 0x01  # same size: only the hash can tell
    victim.write_bytes(bytes(data))
    assert is_installed("austen", tmp_path)  # the cheap check looks at sizes only
    with pytest.raises(ChecksumError, match="4-emma.txt") as info:
        verify("austen", tmp_path)
    assert info.value.path == victim
    victim.write_bytes(bytes(data[:-10]))  # truncated: even locate notices
    assert not is_installed("austen", tmp_path)
    with pytest.raises(FileNotFoundError):
        locate("austen", tmp_path, fetch=False)


def test_verify_names_extra_and_missing_files(tmp_path):
    folder = _copy_dataset("trec", tmp_path)
    (folder / "stray.txt").write_text("x")
    with pytest.raises(ChecksumError, match="stray.txt"):
        verify("trec", tmp_path)
    (folder / "stray.txt").unlink()
    (folder / "question_labels.txt").unlink()
    with pytest.raises(ChecksumError, match="question_labels.txt.*missing"):
        verify("trec", tmp_path)


def test_check_artifact_catches_a_corrupted_download(tmp_path):
    blob = b"pinned package bytes " * 100
    good = tmp_path / "pkg.whl"
    good.write_bytes(blob)
    artifact = Artifact("pypi", "pkg", "1.0", "pkg.whl", _sha256(blob), len(blob), kind="wheel")
    check_artifact(good, artifact)
    bad = tmp_path / "bad" / "pkg.whl"
    bad.parent.mkdir()
    bad.write_bytes(blob[:-1] + b"X")
    with pytest.raises(ChecksumError, match=r"bad/pkg\.whl: sha256") as info:
        check_artifact(bad, artifact)
    assert info.value.path == bad
    bad.write_bytes(blob[:-1])
    with pytest.raises(ChecksumError, match="size"):
        check_artifact(bad, artifact)


def test_locate_missing_without_fetch_says_what_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        locate("mnist", tmp_path, fetch=False)
    message = str(info.value)
    assert "'mnist'" in message
    assert str(tmp_path / "MNIST") in message
    assert f"ctk data fetch mnist --root {tmp_path}" in message
    with pytest.raises(ValueError, match="name must be one of .*got 'cifar10'"):
        locate("cifar10", tmp_path, fetch=False)


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("CTK_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("CTK_DATA")
    monkeypatch.chdir(tmp_path)
    assert data_root() == tmp_path / "data"


def test_ctk_data_path_and_errors(tmp_path):
    """``ctk data``'s answers and failures: the path alone on stdout, errors on stderr (status 1),
    --root before or after the sub-command."""
    from tests.conftest import run_here

    done = run_here(Path.cwd(), {}, *["data", "path", "austen"])
    assert done.returncode == 0 and done.stdout.strip() == str(locate("austen")), done.stderr
    for args in (
        ["data", "--root", str(tmp_path), "path", "austen"],
        ["data", "path", "austen", "--root", str(tmp_path)],
    ):
        done = run_here(Path.cwd(), {}, *args)
        assert done.returncode == 1 and done.stdout == "" and "fetch austen --root" in done.stderr, done.stderr
    done = run_here(Path.cwd(), {}, *["data", "fetch", "nonsense", "--root", str(tmp_path)])
    assert done.returncode == 1 and "got 'nonsense'" in done.stderr, done.stderr
    done = run_here(Path.cwd(), {}, *["data", "fetch"])
    assert done.returncode == 2 and "Missing argument" in done.stderr, done.stderr


# ---------------------------------------------------------------- install pipeline, offline


def _toy_dataset(
    monkeypatch,
    tmp_path,
    payload: dict[str, bytes],
    expected: dict[str, bytes],
    fail_builder: bool = False,
    sources: int = 1,
):
    """A catalogue of one dataset 'toy' whose 'registry' is a local zip, and a download counter."""
    archive = tmp_path / "registry" / "toy-1.0.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in payload.items():
            z.writestr(name, data)
    blob = archive.read_bytes()
    artifact = Artifact("pypi", "toy", "1.0", archive.name, _sha256(blob), len(blob), kind="wheel")
    lines = "".join(f"{rel}\t{_sha256(expected[rel])}\n" for rel in sorted(expected))
    source = Source((artifact,), "toy", _sha256(lines.encode()), len(expected), sum(map(len, expected.values())))
    entry = Dataset("toy", "toy", "none", "toy", (source,) * sources, False)
    calls = []

    def fake_download(art, dest, cache):
        calls.append(art.filename)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, dest / art.filename)
        check_artifact(dest / art.filename, art)
        return dest / art.filename

    def build(files, out, work):
        with zipfile.ZipFile(files[archive.name]) as z:
            z.extractall(out)
        if fail_builder:
            raise FetchError("builder broke halfway")

    monkeypatch.setattr(data_folder, "download", fake_download)
    return Catalogue((entry,), {"toy": build}), calls


def test_fetch_installs_atomically_and_is_idempotent(monkeypatch, tmp_path):
    files = {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256))}
    toy, calls = _toy_dataset(monkeypatch, tmp_path, files, files)
    root = tmp_path / "root"
    folder = fetch("toy", root, catalogue=toy)
    assert folder == root / "toy" and calls == ["toy-1.0.zip"]
    for rel, data in files.items():
        assert (folder / rel).read_bytes() == data
    marker = json.loads((folder / MARKER).read_text())
    assert marker["files"]["sub/b.bin"]["sha256"] == _sha256(files["sub/b.bin"])
    assert marker["artifacts"][0]["sha256"] == _sha256((tmp_path / "registry/toy-1.0.zip").read_bytes())
    assert fetch("toy", root, catalogue=toy) == folder and calls == ["toy-1.0.zip"]  # no-op
    assert data_folder.locate(toy, "toy", root, fetch=False) == folder
    fetch("toy", root, force=True, catalogue=toy)
    assert calls == ["toy-1.0.zip"] * 2
    assert list((root / ".tmp").iterdir()) == []


def test_failed_fetch_leaves_no_half_folder(monkeypatch, tmp_path):
    files = {"a.txt": b"alpha\n"}
    toy, _ = _toy_dataset(monkeypatch, tmp_path, files, files, fail_builder=True)
    root = tmp_path / "root"
    with pytest.raises(FetchError, match="builder broke halfway"):
        fetch("toy", root, catalogue=toy)
    assert not (root / "toy").exists()
    assert list((root / ".tmp").iterdir()) == []
    with pytest.raises(FileNotFoundError, match="fetching it failed.*builder broke halfway"):
        data_folder.locate(toy, "toy", root)


def test_fetch_rejects_output_that_differs_from_the_pinned_tree(monkeypatch, tmp_path):
    toy, _ = _toy_dataset(monkeypatch, tmp_path, {"a.txt": b"alpha\n"}, {"a.txt": b"alpha, pinned\n"})
    root = tmp_path / "root"
    with pytest.raises(ChecksumError, match="tree sha256"):
        fetch("toy", root, catalogue=toy)
    assert not (root / "toy").exists()


def test_fetch_tries_every_source_and_reports_each(monkeypatch, tmp_path):
    toy, calls = _toy_dataset(monkeypatch, tmp_path, {"a.txt": b"alpha\n"}, {"a.txt": b"alpha, pinned\n"}, sources=2)
    root = tmp_path / "root"
    with pytest.raises(FetchError, match="(?s)from any source:\n- PyPI toy.*\n- PyPI toy"):
        fetch("toy", root, catalogue=toy)
    assert len(calls) == 2 and not (root / "toy").exists()


def test_fetch_replaces_a_folder_without_marker(monkeypatch, tmp_path):
    files = {"a.txt": b"alpha\n"}
    toy, _ = _toy_dataset(monkeypatch, tmp_path, files, files)
    root = tmp_path / "root"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "half-written.txt").write_text("partial")
    assert not is_installed("toy", root, catalogue=toy)
    folder = data_folder.locate(toy, "toy", root)
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "a.txt"]


def test_joining_catalogues_refuses_a_second_entry_or_builder_under_a_taken_name():
    from domains.text.catalogue import CATALOGUE as TEXT

    austen = TEXT.entry("austen")
    assert Catalogue.joined([TEXT, TEXT]) == TEXT  # the same entries and builders again: kept once
    changed = Dataset("austen", "another", "none", "austen", austen.sources, False)
    with pytest.raises(ValueError, match="dataset name 'austen' is given twice"):
        Catalogue.joined([TEXT, Catalogue((changed,), TEXT.builders)])
    with pytest.raises(ValueError, match="builder name 'austen' is given by domains.text.catalogue and by"):
        Catalogue.joined([TEXT, Catalogue((), {"austen": lambda files, out, work: None})])
    with pytest.raises(ValueError, match="dataset name 'austen' is given twice; expected one entry a name"):
        Catalogue((austen, austen), TEXT.builders)
    orphan = Source(austen.sources[0].artifacts, "no-such-builder", "0" * 64, 1, 1)
    with pytest.raises(ValueError, match="dataset 'orphan': source builder 'no-such-builder' is not given"):
        Catalogue((Dataset("orphan", "x", "none", "orphan", (orphan,), False),), TEXT.builders)
    with pytest.raises(ValueError, match="placed dataset 'imagenet' is given twice with different folders"):
        Catalogue.joined([Catalogue(placed={"imagenet": ("a",)}), Catalogue(placed={"imagenet": ("b",)})])


def test_the_installed_domains_answer_their_datasets_and_a_bad_declaration_is_named(monkeypatch):
    """The catalogue is what each domain's entry module declares (``CATALOGUE``): vision and text
    declare theirs, rl and toy none; a declaration of the wrong type is a DomainError naming it."""
    from domains.text.catalogue import CATALOGUE as TEXT
    from domains.vision.catalogue import CATALOGUE as VISION

    specs = installed.specs()
    assert specs["vision"].catalogue() is VISION and specs["text"].catalogue() is TEXT
    assert specs["rl"].catalogue() == Catalogue() == specs["toy"].catalogue()
    assert CATALOGUE.names() == VISION.names() + TEXT.names()
    assert set(CATALOGUE.placed) == {"imagenet", "imagenet100", "tiny-imagenet"}
    import domains.toy

    monkeypatch.setattr(domains.toy, "CATALOGUE", {"austen": "a dict"}, raising=False)
    with pytest.raises(
        installed.DomainError, match=r"domains.toy.CATALOGUE is dict; expected a toolkit.data.Catalogue"
    ):
        installed.catalogue()
