"""Image-folder datasets: one file per image on disk, read as a file list per split, with every
problem of a folder found at once.

A :class:`FolderSource` is one dataset's folder and how it is laid out (a :class:`FolderLayout`);
``domains/vision/dataset_table.py`` builds it from a recipe's ``data`` section and describes the
shipped datasets' layouts (``imagefolder``: ``train/<class>/*`` and ``val/<class>/*``, torchvision's
``ImageFolder`` layout; JPEG, PNG and WebP, any case of extension).

Only the file list is held in memory (a path and a label per image); the pixels are read by
``streaming.py`` when a batch needs them. :meth:`FolderSource.problems` lists every problem of a
folder at once (missing, unreadable, empty class, train / val classes that differ, val labels
that name unknown classes) so that a run refuses before anything is created.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = [
    "FolderLayout",
    "FolderSource",
    "FolderSplit",
    "FolderProblem",
    "EXTENSIONS",
    "IMAGENET100",
    "imagenet100_classes",
]

EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
IMAGENET100 = Path(__file__).with_name("imagenet100.txt")


class FolderProblem(ValueError):
    """A dataset folder that cannot be read as its layout says; ``problems`` lists them all."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class FolderLayout:
    """How a dataset's folder is laid out beyond ``train/<class>/`` and ``val/``.

    ``class_file``: a file of the folder naming the classes (Tiny ImageNet's ``wnids.txt``);
    None: the folders of ``train/``. ``fixed_classes``: a text file of the classes the dataset
    is (ImageNet-100), whatever ``data.classes`` says. ``inner``: the folder holding the images
    inside each class folder and inside a flat ``val/`` (Tiny ImageNet's ``images``).
    ``val_annotations``: the file, relative to the folder, labelling a flat ``val/`` (Tiny
    ImageNet); None: ``val/`` by class, or flat with the labels of ``data.val_labels`` or of a
    devkit / label file found beside it (ImageNet)."""

    class_file: str | None = None
    fixed_classes: Path | None = None
    inner: str = ""
    val_annotations: str | None = None


@dataclass(frozen=True)
class FolderSource:
    """One folder dataset as a run reads it: its ``name``, the folder ``path`` holding the splits,
    its ``layout``, the classes asked for (a list, a text file, or None: all) and the validation
    labels' file (or None), and ``how_to_get`` it (``{path}`` filled in) for the refusals."""

    name: str
    path: Path
    layout: FolderLayout = FolderLayout()
    classes: tuple[str, ...] | str | None = None
    val_labels: str | None = None
    how_to_get: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())
        if self.classes is not None and not isinstance(self.classes, str):
            object.__setattr__(self, "classes", tuple(self.classes))

    def problems(self) -> list[str]:
        """Every problem of the folder (empty when it reads cleanly). The file lists are kept,
        so a run that checks first and loads next scans the folders once."""
        return list(_cached(replace(self, path=self.path.resolve()))[1])

    def split(self, which: str) -> FolderSplit:
        """The ``train`` or ``val`` file list; :class:`FolderProblem` with every problem when the
        folder does not read cleanly."""
        if which not in ("train", "val"):
            raise ValueError(f"split of {self.name} must be 'train' or 'val', got {which!r}")
        splits, problems = _cached(replace(self, path=self.path.resolve()))
        if problems:
            raise FolderProblem(problems)
        return splits[which]

    def how(self) -> str:
        return self.how_to_get.format(path=self.path)


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
    return _class_file_lines(IMAGENET100)


def _class_file_lines(path: Path) -> tuple[str, ...]:
    lines = path.read_text().splitlines()
    return tuple(line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#"))


# -- reading folders ---------------------------------------------------------------------------


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


def _inside(folder: Path, inner: str) -> Path:
    return folder / inner if inner else folder


def _by_class(
    split_dir: Path, classes: Sequence[str], split: str, problems: list[str], inner: str = ""
) -> tuple[list[str], list[int]]:
    paths: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        names = _scan(_inside(split_dir / cls, inner), problems)
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


# -- a layout read as named steps ------------------------------------------------------------------


def _read_layout(source: FolderSource) -> tuple[dict[str, FolderSplit], list[str]]:
    """Both splits' file lists and every problem met on the way."""
    if not source.path.is_dir():
        return {}, [f"dataset {source.name!r} not found: {source.path} is not a folder. To get it: {source.how()}"]
    problems: list[str] = []
    found = _found_classes(source, problems)
    classes = _chosen_classes(source, found, problems)
    splits = {"train": _train_split(source, classes, problems)}
    val = _val_split(source, classes, found, problems)
    if val is not None:
        splits["val"] = val
    return splits, problems


def _found_classes(source: FolderSource, problems: list[str]) -> list[str]:
    """The classes the folder holds: its class file's, else the folders of ``train/``."""
    layout, train_dir = source.layout, source.path / "train"
    if layout.class_file is None:
        return _subfolders(train_dir, problems) or []
    listing = source.path / layout.class_file
    try:
        return [w.strip() for w in listing.read_text().split() if w.strip()]
    except OSError as err:
        problems.append(f"{listing} cannot be read ({err.strerror or err}); {source.how()}")
        return _subfolders(train_dir, problems) or []


def _asked_classes(source: FolderSource, problems: list[str]) -> list[str] | None:
    """The classes the dataset or the recipe asks for, in their order (None: all found)."""
    if source.layout.fixed_classes is not None:
        return list(_class_file_lines(source.layout.fixed_classes))
    classes = source.classes
    if classes is None or not isinstance(classes, str):
        return list(classes) if classes is not None else None
    try:
        return list(_class_file_lines(Path(classes).expanduser()))
    except OSError as err:
        problems.append(f"data.classes: the class list {classes} cannot be read ({err.strerror or err})")
        return None


def _chosen_classes(source: FolderSource, found: list[str], problems: list[str]) -> list[str]:
    """The classes asked for that the folder holds (a problem names those it lacks)."""
    wanted = _asked_classes(source, problems)
    train_dir = source.path / "train"
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
    return wanted


def _train_split(source: FolderSource, classes: list[str], problems: list[str]) -> FolderSplit:
    paths, labels = _by_class(source.path / "train", classes, "train", problems, source.layout.inner)
    return _split(source, "train", paths, labels, classes)


def _split(source: FolderSource, which: str, paths: list[str], labels: list[int], classes: list[str]) -> FolderSplit:
    return FolderSplit(
        f"{source.name}:{which}", str(source.path), tuple(paths), np.asarray(labels, dtype=np.int64), tuple(classes)
    )


def _val_split(source: FolderSource, classes: list[str], found: list[str], problems: list[str]) -> FolderSplit | None:
    """``val/`` by class, or flat with labels (None when it cannot be listed)."""
    val_dir, inner = source.path / "val", source.layout.inner
    val_classes = _subfolders(val_dir, problems)
    if val_classes is None:
        return None
    flat_names = _scan(_inside(val_dir, inner), [])
    if source.layout.val_annotations is not None or (not val_classes and flat_names):
        labelled = _flat_val(source, flat_names or [], classes, problems)
        if labelled is None:
            return None
        paths, labels = labelled
    else:
        paths, labels = _val_by_class(val_dir, classes, found, val_classes, problems)
    return _split(source, "val", paths, labels, classes)


def _val_label_source(source: FolderSource, problems: list[str]) -> Path | None:
    """The file (or devkit folder) labelling a flat ``val/``: the layout's, the recipe's, else
    the first found beside ``val/``."""
    path, val_dir = source.path, source.path / "val"
    if source.layout.val_annotations is not None:
        return path / source.layout.val_annotations
    if source.val_labels:
        return Path(source.val_labels).expanduser()
    candidates = [
        path / "ILSVRC2012_devkit_t12",
        path / "LOC_val_solution.csv",
        path / "val_labels.txt",
        val_dir / "val_labels.txt",
    ]
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        problems.append(
            f"{val_dir} is flat (no class folders) and no validation labels were "
            f"found (looked for {', '.join(str(c) for c in candidates)}); set "
            "data.val_labels to the devkit folder or a 'filename label' file"
        )
    return found


def _flat_val(
    source: FolderSource, names: list[str], classes: list[str], problems: list[str]
) -> tuple[list[str], list[int]] | None:
    """The images of a flat ``val/`` with their labels; every class must have one."""
    where = _val_label_source(source, problems)
    truth = _read_val_labels(where, problems) if where is not None else None
    if truth is None:
        return None
    inner = source.layout.inner
    vdir = _inside(source.path / "val", inner)
    index = {c: i for i, c in enumerate(classes)}
    paths, labels, unlabelled = [], [], []
    for name in names:
        cls = truth.get(name, truth.get(name.rsplit(".", 1)[0]))
        if cls is None:
            unlabelled.append(name)
        elif cls in index:  # a class left out (imagenet100, data.classes) drops its images
            paths.append(f"val/{inner}/{name}" if inner else f"{vdir.name}/{name}")
            labels.append(index[cls])
    if unlabelled:
        problems.append(
            f"{len(unlabelled)} images of {vdir} have no label in the validation "
            f"labels (first: {', '.join(unlabelled[:3])})"
        )
    present = set(labels)
    empty = [classes[i] for i in range(len(classes)) if i not in present]
    if empty:
        problems.append(f"{len(empty)} classes have no validation image (first: {', '.join(empty[:5])})")
    return paths, labels


def _val_by_class(
    val_dir: Path, classes: list[str], found: list[str], val_classes: list[str], problems: list[str]
) -> tuple[list[str], list[int]]:
    """``val/<class>/*`` labelled by the train class list; a problem names classes that differ."""
    extra = sorted(set(val_classes) - set(found))
    lacking = [c for c in classes if c not in val_classes]
    if extra or lacking:
        parts = [
            f"only in val: {_first(extra)}" if extra else "",
            f"only in train: {_first(lacking)}" if lacking else "",
        ]
        problems.append("train and val hold different classes: " + "; ".join(p for p in parts if p))
    names = [c for c in classes if c in val_classes]
    paths, labels = _by_class(val_dir, names, "val", problems)
    index = {c: i for i, c in enumerate(classes)}
    remap = np.asarray([index[c] for c in names], dtype=np.int64)
    return paths, (list(remap[np.asarray(labels, dtype=np.int64)]) if labels else [])


def _first(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"


@lru_cache(maxsize=8)
def _cached(source: FolderSource) -> tuple[dict[str, FolderSplit], tuple[str, ...]]:
    splits, problems = _read_layout(source)
    return splits, tuple(problems)
