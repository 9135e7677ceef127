"""Image datasets read from disk, one file per image: the folder layouts and their checks.

Layouts (``data.dataset``; ``data.path`` is the folder that holds the splits):

* ``imagefolder``: ``train/<class>/*`` and ``val/<class>/*`` (torchvision's ``ImageFolder``
  layout; JPEG, PNG and WebP, any case of extension). ``data.classes`` restricts and orders the
  classes (a list, or a text file with one name per line); default: the train folders, sorted.
* ``imagenet`` (ILSVRC-2012): ``train/<wnid>/*.JPEG``; ``val/<wnid>/*.JPEG``, or ``val/`` flat
  (``ILSVRC2012_val_00000001.JPEG`` ...) with the ground truth of the devkit
  (``ILSVRC2012_devkit_t12/``, read with torchvision's own devkit parsers), of Kaggle's
  ``LOC_val_solution.csv``, or of any file of ``filename label`` lines (``data.val_labels``;
  default: looked for beside ``val/``).
* ``imagenet100``: the ``imagenet`` layout restricted to the 100 classes of CACR Table 6
  (``imagenet100.txt`` beside this module), from a full ImageNet folder or from one that holds
  only those 100 class folders.
* ``tiny-imagenet`` (Tiny ImageNet, 200 classes of 64x64 images, CPCL): ``wnids.txt``,
  ``train/<wnid>/images/*.JPEG`` and ``val/images/*.JPEG`` with ``val/val_annotations.txt``.

Only the file list is held in memory (a path and a label per image); the pixels are read by
``streaming.py`` when a batch needs them. :func:`find_problems` lists every problem of a folder
at once (missing, unreadable, empty class, train / val classes that differ, val labels that
name unknown classes) so that a run refuses before anything is created.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = [
    "FolderSplit",
    "FolderProblem",
    "EXTENSIONS",
    "IMAGENET100",
    "imagenet100_classes",
    "dataset_path",
    "DEFAULT_FOLDERS",
    "find_problems",
    "load_folder_split",
    "HOW_TO_GET",
]

EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
IMAGENET100 = Path(__file__).with_name("imagenet100.txt")

HOW_TO_GET = {
    "imagefolder": "put one folder per class, each holding its images (JPEG, PNG or WebP), under "
    "{path}/train and {path}/val (docs/data.md, 'Your own photos')",
    "imagenet": "download ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar from "
    "https://image-net.org (an account is needed; it is on no package registry), "
    "extract train/ as one folder per wnid and val/ either by wnid or flat with "
    "ILSVRC2012_devkit_t12 beside it, under {path} (docs/data.md, 'ImageNet')",
    "imagenet100": "lay out ImageNet as for 'imagenet' under {path} (all 1,000 classes, or only "
    "the 100 of domains/vision/imagenet100.txt) (docs/data.md, 'ImageNet-100')",
    "tiny-imagenet": "download tiny-imagenet-200.zip from http://cs231n.stanford.edu/ and extract "
    "it so that {path}/wnids.txt, {path}/train and {path}/val exist "
    "(docs/data.md, 'Tiny ImageNet')",
}

DEFAULT_FOLDERS = {
    "imagenet": ("imagenet",),
    "imagenet100": ("imagenet100", "imagenet"),
    "tiny-imagenet": ("tiny-imagenet-200",),
}


class FolderProblem(ValueError):
    """A dataset folder that cannot be read as its layout says; ``problems`` lists them all."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class FolderSplit:
    """One split of a folder dataset: ``paths[i]`` (relative to ``root``) has label ``labels[i]``
    (an index into ``classes``)."""

    name: str
    root: str
    paths: tuple[str, ...]
    labels: np.ndarray
    classes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def path(self, i: int) -> str:
        return os.path.join(self.root, self.paths[i])

    def subset(self, index: Sequence[int]) -> FolderSplit:
        index = np.asarray(index, dtype=np.int64)
        return FolderSplit(self.name, self.root, tuple(self.paths[i] for i in index), self.labels[index], self.classes)


def imagenet100_classes() -> tuple[str, ...]:
    """The 100 wnids of CACR Table 6 in the table's order (``imagenet100.txt``)."""
    lines = IMAGENET100.read_text().splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def dataset_path(dataset: str, path: str | None, root: str | os.PathLike | None) -> Path:
    """Where a streamed dataset is read: ``data.path``, else its folder under the data root
    (``imagenet100`` falls back to a full ``imagenet`` folder)."""
    if path:
        return Path(path).expanduser()
    from toolkit.data import data_root

    base = data_root(root)
    names = DEFAULT_FOLDERS[dataset]
    for name in names:
        if (base / name).is_dir():
            return base / name
    return base / names[0]


def _is_image(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS) and not name.startswith(".")


def _entries(folder: Path, keep: Callable[[os.DirEntry], bool], problems: list[str]) -> list[str] | None:
    """Sorted names of the entries of ``folder`` that ``keep`` accepts, or None (and a problem
    naming the folder) when it cannot be read."""
    try:
        with os.scandir(folder) as it:
            return sorted(e.name for e in it if keep(e))
    except FileNotFoundError:
        problems.append(f"{folder} does not exist")
    except NotADirectoryError:
        problems.append(f"{folder} is not a folder")
    except PermissionError as err:
        problems.append(f"{folder} cannot be read ({err.strerror})")
    return None


def _scan(folder: Path, problems: list[str]) -> list[str] | None:
    """Image file names in ``folder``."""
    return _entries(folder, lambda e: _is_image(e.name) and e.is_file(), problems)


def _subfolders(folder: Path, problems: list[str]) -> list[str] | None:
    """Folder names in ``folder`` (hidden ones left out)."""
    return _entries(folder, lambda e: e.is_dir() and not e.name.startswith("."), problems)


def _class_list(classes: Sequence[str] | str | None, problems: list[str]) -> list[str] | None:
    if classes is None or not isinstance(classes, str):
        return list(classes) if classes is not None else None
    try:
        lines = Path(classes).expanduser().read_text().splitlines()
    except OSError as err:
        problems.append(f"data.classes: the class list {classes} cannot be read ({err.strerror or err})")
        return None
    return [ln.split()[0] for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def _by_class(
    split_dir: Path, classes: Sequence[str], split: str, problems: list[str], inner: str = ""
) -> tuple[list[str], list[int]]:
    paths: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        names = _scan(split_dir / cls / inner if inner else split_dir / cls, problems)
        if names is None:
            continue
        if not names:
            problems.append(
                f"class {cls!r} of {split} has no image ({split_dir / cls}; "
                f"expected files ending in {', '.join(EXTENSIONS)})"
            )
        prefix = f"{split_dir.name}/{cls}/{inner + '/' if inner else ''}"
        paths.extend(prefix + n for n in names)
        labels.extend([label] * len(names))
    return paths, labels


def _read_val_labels(source: Path, problems: list[str]) -> dict[str, str] | None:
    """``{file name: class}`` from a devkit folder, LOC_val_solution.csv or 'name label' lines."""
    try:
        if source.is_dir():  # ILSVRC2012_devkit_t12: torchvision's parsers of the devkit
            from torchvision.datasets.imagenet import parse_meta_mat, parse_val_groundtruth_txt

            idx_to_wnid, _ = parse_meta_mat(str(source))
            truth = parse_val_groundtruth_txt(str(source))
            return {f"ILSVRC2012_val_{i + 1:08d}.JPEG": idx_to_wnid[idx] for i, idx in enumerate(truth)}
        text = source.read_text()
    except (OSError, KeyError, ValueError) as err:
        problems.append(f"data.val_labels: {source} cannot be read as validation labels ({err})")
        return None
    out: dict[str, str] = {}
    if source.suffix == ".csv":  # Kaggle: ImageId,PredictionString ("n01751748 x y x y ...")
        for row in csv.DictReader(text.splitlines()):
            image, pred = row.get("ImageId"), row.get("PredictionString")
            if image and pred:
                out[f"{image}.JPEG" if "." not in image else image] = pred.split()[0]
    else:
        for line in text.splitlines():
            parts = line.replace(",", " ").split()
            if len(parts) >= 2 and not line.startswith("#"):
                out[parts[0]] = parts[1]
    if not out:
        problems.append(f"data.val_labels: {source} holds no 'file label' line")
        return None
    return out


def _flat_val(
    val_dir: Path, names: list[str], truth: dict[str, str], classes: Sequence[str], problems: list[str]
) -> tuple[list[str], list[int]]:
    index = {c: i for i, c in enumerate(classes)}
    paths, labels, unlabelled = [], [], []
    for name in names:
        cls = truth.get(name, truth.get(name.rsplit(".", 1)[0]))
        if cls is None:
            unlabelled.append(name)
        elif cls in index:  # a class left out (imagenet100, data.classes) drops its images
            paths.append(f"{val_dir.name}/{name}")
            labels.append(index[cls])
    if unlabelled:
        problems.append(
            f"{len(unlabelled)} images of {val_dir} have no label in the validation "
            f"labels (first: {', '.join(unlabelled[:3])})"
        )
    return paths, labels


def _layout(
    dataset: str, path: Path, classes: Sequence[str] | str | None, val_labels: str | None
) -> tuple[dict[str, FolderSplit], list[str]]:
    problems: list[str] = []
    if not path.is_dir():
        how = HOW_TO_GET[dataset].format(path=path)
        return {}, [f"dataset {dataset!r} not found: {path} is not a folder. To get it: {how}"]
    wanted = _class_list(classes, problems)
    if dataset == "imagenet100":
        wanted = list(imagenet100_classes())
    train_dir, val_dir = path / "train", path / "val"
    inner = ""
    if dataset == "tiny-imagenet":
        inner = "images"
        try:
            found = [w.strip() for w in (path / "wnids.txt").read_text().split() if w.strip()]
        except OSError as err:
            problems.append(
                f"{path / 'wnids.txt'} cannot be read ({err.strerror or err}); {HOW_TO_GET[dataset].format(path=path)}"
            )
            found = _subfolders(train_dir, problems) or []
    else:
        found = _subfolders(train_dir, problems) or []
    if wanted is None:
        wanted = found
    else:
        missing = [c for c in wanted if c not in found]
        if missing and found:
            problems.append(
                f"{len(missing)} of the {len(wanted)} classes have no folder in {train_dir} "
                f"(first: {', '.join(missing[:5])})"
            )
        wanted = [c for c in wanted if c in found]
    if not wanted and not problems:
        problems.append(f"{train_dir} holds no class folder")
    splits: dict[str, FolderSplit] = {}
    tr_paths, tr_labels = _by_class(train_dir, wanted, "train", problems, inner)
    splits["train"] = FolderSplit(
        f"{dataset}:train", str(path), tuple(tr_paths), np.asarray(tr_labels, dtype=np.int64), tuple(wanted)
    )
    # val: by class, or flat with labels
    val_classes = _subfolders(val_dir, problems)
    if val_classes is None:
        return splits, problems
    flat_names = _scan(val_dir / inner if inner else val_dir, [])
    if dataset == "tiny-imagenet" or (not val_classes and flat_names):
        if dataset == "tiny-imagenet":
            source = path / "val" / "val_annotations.txt"
        elif val_labels:
            source = Path(val_labels).expanduser()
        else:
            candidates = [
                path / "ILSVRC2012_devkit_t12",
                path / "LOC_val_solution.csv",
                path / "val_labels.txt",
                val_dir / "val_labels.txt",
            ]
            source = next((c for c in candidates if c.exists()), None)  # type: ignore[assignment]
            if source is None:
                problems.append(
                    f"{val_dir} is flat (no class folders) and no validation labels were "
                    f"found (looked for {', '.join(str(c) for c in candidates)}); set "
                    "data.val_labels to the devkit folder or a 'filename label' file"
                )
                return splits, problems
        truth = _read_val_labels(source, problems)
        if truth is None:
            return splits, problems
        vdir = val_dir / inner if inner else val_dir
        va_paths, va_labels = _flat_val(vdir, flat_names or [], truth, wanted, problems)
        if inner:
            va_paths = [f"val/{p}" for p in va_paths]
        present = set(va_labels)
        empty = [wanted[i] for i in range(len(wanted)) if i not in present]
        if empty:
            problems.append(f"{len(empty)} classes have no validation image (first: {', '.join(empty[:5])})")
    else:
        extra = sorted(set(val_classes) - set(found))
        lacking = [c for c in wanted if c not in val_classes]
        if extra or lacking:
            problems.append(
                "train and val hold different classes: "
                + "; ".join(
                    p
                    for p in (
                        f"only in val: {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}" if extra else "",
                        f"only in train: {', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''}"
                        if lacking
                        else "",
                    )
                    if p
                )
            )
        va_paths, va_labels = _by_class(val_dir, [c for c in wanted if c in val_classes], "val", problems)
        # labels index the train class list
        index = {c: i for i, c in enumerate(wanted)}
        names = [c for c in wanted if c in val_classes]
        remap = np.asarray([index[c] for c in names], dtype=np.int64)
        va_labels = list(remap[np.asarray(va_labels, dtype=np.int64)]) if va_labels else []
    splits["val"] = FolderSplit(
        f"{dataset}:val", str(path), tuple(va_paths), np.asarray(va_labels, dtype=np.int64), tuple(wanted)
    )
    return splits, problems


@lru_cache(maxsize=8)
def _cached(
    dataset: str, path: str, classes: tuple[str, ...] | str | None, val_labels: str | None
) -> tuple[dict[str, FolderSplit], tuple[str, ...]]:
    splits, problems = _layout(dataset, Path(path), classes, val_labels)
    return splits, tuple(problems)


def _key(classes: Sequence[str] | str | None) -> tuple[str, ...] | str | None:
    return classes if classes is None or isinstance(classes, str) else tuple(classes)


def find_problems(
    dataset: str,
    path: str | None,
    root: str | os.PathLike | None = None,
    classes: Sequence[str] | str | None = None,
    val_labels: str | None = None,
) -> list[str]:
    """Every problem of the dataset's folder (empty when it reads cleanly). The file lists are
    kept, so a run that checks first and loads next scans the folders once."""
    where = dataset_path(dataset, path, root)
    return list(_cached(dataset, str(where.resolve()), _key(classes), val_labels)[1])


def load_folder_split(
    dataset: str,
    split: str,
    path: str | None,
    root: str | os.PathLike | None = None,
    classes: Sequence[str] | str | None = None,
    val_labels: str | None = None,
) -> FolderSplit:
    """The ``train`` or ``val`` file list of a folder dataset; :class:`FolderProblem` with every
    problem when the folder does not read cleanly."""
    if split not in ("train", "val"):
        raise ValueError(f"split of {dataset} must be 'train' or 'val', got {split!r}")
    where = dataset_path(dataset, path, root)
    splits, problems = _cached(dataset, str(where.resolve()), _key(classes), val_labels)
    if problems:
        raise FolderProblem(problems)
    return splits[split]
