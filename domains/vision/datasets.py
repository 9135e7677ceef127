"""Image datasets as uint8 tensors, read through torchvision's own dataset classes.

* CIFAR-10 / CIFAR-100 (``cifar-10-batches-py``, ``cifar-100-python`` under the root),
  STL-10 (``stl10_binary``; splits ``train``, ``unlabeled``, ``train+unlabeled``, ``test``):
  not available offline from the package registries; found locally or downloaded where a
  network exists (``download: true``).
* MNIST / Fashion-MNIST: from the offline sources of docs/data.md through the data provider
  (``domains.vision.catalogue.locate``), which leaves the decompressed IDX files where torchvision's
  ``MNIST`` / ``FashionMNIST`` read them (``<root>/MNIST/raw``, ``<root>/FashionMNIST/raw``).

Each dataset is an entry of ``dataset_table.py`` (storage ``memory``: its torchvision class,
number of classes, files and how to get them). Images stay uint8 ``[N, C, H, W]`` in memory; augmentation happens on the batch
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

from domains.vision.dataset_table import VisionDataset, entry, names

__all__ = [
    "ImageSplit",
    "load_split",
    "default_root",
    "imbalanced_indices",
    "DatasetMissing",
    "unavailable",
    "SUBSET_SEEDS",
    "seeded_subset",
]


def _in_memory(dataset: str) -> VisionDataset:
    """The table's entry of an in-memory dataset (a ValueError naming them otherwise)."""
    known = names("memory")
    if dataset not in known:
        raise ValueError(f"dataset must be one of {', '.join(known)}, got {dataset!r}")
    return entry(dataset)


_IDX = ("MNIST", "FashionMNIST")  # torchvision classes reading IDX files the data provider fetches


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
    folder = str(entry(dataset).layout)  # the class's name is its folder
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
    e = _in_memory(dataset)
    splits = (*e.train_splits, "test")
    if split not in splits:
        raise ValueError(f"split of {dataset} must be one of {', '.join(splits)}, got {split!r}")
    if e.layout in _IDX:
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

    try:
        e = _in_memory(dataset)
    except ValueError as err:
        return str(err)
    cls = getattr(tvd, str(e.layout))
    if e.layout in _IDX:
        try:
            where = _mnist_root(dataset, Path(root) if root is not None else None)
        except (FileNotFoundError, ValueError) as err:  # not installed and the fetch failed
            return str(err)
        folder = where / cls.__name__ / "raw"
        need = [folder / Path(url).stem for url, _ in cls.resources]
    else:
        if download:
            return None
        where = Path(root) if root is not None else default_root()
        files = [name for name, _ in cls.train_list + cls.test_list]
        files += [cls.meta["filename"]] if hasattr(cls, "meta") else []
        need = [where / cls.base_folder / name for name in files]
    absent = [p for p in need if not p.is_file()]
    if not absent:
        return None
    where = str(Path(where).resolve())
    return (
        f"dataset {dataset!r} is not where it is read: {absent[0]}"
        f"{f' and {len(absent) - 1} more files are' if len(absent) > 1 else ' is'} missing "
        f"(expected {e.looked_for.format(root=where)}). {e.how_to_get.format(root=where)}"
    )


@lru_cache(maxsize=4)
def _read(dataset: str, split: str, where: str, download: bool, verify: bool) -> ImageSplit:
    import torchvision.datasets as tvd

    e = entry(dataset)
    cls = getattr(tvd, str(e.layout))
    try:
        if e.layout in ("CIFAR10", "CIFAR100"):
            if not verify:
                cls = _unverified(cls)
            ds = cls(where, train=(split == "train"), download=download)
            images = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
            labels = torch.as_tensor(ds.targets, dtype=torch.long)
        elif e.layout == "STL10":
            ds = cls(where, split=split, download=download)
            images = torch.from_numpy(np.ascontiguousarray(ds.data))
            labels = torch.as_tensor(ds.labels, dtype=torch.long)
        else:  # the IDX files of (Fashion-)MNIST
            ds = cls(where, train=(split == "train"), download=download)
            images = ds.data.unsqueeze(1).contiguous()
            labels = ds.targets.long()
    except RuntimeError as err:  # torchvision: "Dataset not found or corrupted..."
        raise DatasetMissing(
            f"dataset {dataset!r} ({split}) not found: looked for "
            f"{e.looked_for.format(root=where)}. {e.how_to_get.format(root=where)}. "
            f"(torchvision said: {err})"
        ) from None
    return ImageSplit(f"{dataset}:{split}", images, labels, int(e.num_classes or int(labels.max()) + 1))


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
