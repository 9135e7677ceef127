"""Small real-data fixtures in CIFAR's own on-disk format, so that torchvision's real CIFAR
loaders can be exercised offline.

foolbox 3.3.4 ships the first 20 test images of CIFAR-10 and of CIFAR-100 as PNGs
(``cifar10_<i>_<label>.png``, ``cifar100_<i>_<label>.png``; ``domains.vision.catalogue.locate
("foolbox-samples")``). :func:`write_cifar_fixture` writes them as the python-pickle batches
of ``cifar-10-batches-py`` (``data_batch_1..5``, ``test_batch``, ``batches.meta``) and
``cifar-100-python`` (``train``, ``test``, ``meta``): rows of 3072 bytes, the red plane then
green then blue, each row-major. The first ``num_train`` images go to the training files (spread
over the five CIFAR-10 batches), the rest to the test file.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np

__all__ = [
    "find_foolbox_pngs",
    "write_cifar_fixture",
    "packaged_photos",
    "write_photo_folder",
    "PHOTO_SIZES",
    "write_png_folder",
]

_NAME = re.compile(r"^(cifar10|cifar100)_(\d+)_(\d+)\.png$")


def find_foolbox_pngs(folder: str | Path, dataset: str) -> list[tuple[int, int, Path]]:
    """``(position, label, path)`` of foolbox's ``dataset`` PNGs under ``folder``, in order."""
    found = []
    for path in Path(folder).rglob(f"{dataset}_*.png"):
        m = _NAME.match(path.name)
        if m and m.group(1) == dataset:
            found.append((int(m.group(2)), int(m.group(3)), path))
    if not found:
        raise FileNotFoundError(
            f"no {dataset}_<i>_<label>.png files under {folder} (expected "
            "foolbox 3.3.4's data folder; domains.vision.catalogue.locate('foolbox-samples'))"
        )
    return sorted(found)


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    if arr.shape != (32, 32, 3):
        raise ValueError(f"{path} is {arr.shape}, expected a 32x32 RGB CIFAR image")
    return arr


def _rows(images: np.ndarray) -> np.ndarray:
    """[N, 32, 32, 3] HWC -> [N, 3072] CIFAR rows (planes R, G, B, each row-major)."""
    return images.transpose(0, 3, 1, 2).reshape(len(images), -1).copy()


def _dump(obj: dict, path: Path) -> None:
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def write_cifar_fixture(png_folder: str | Path, root: str | Path, num_train: int = 15) -> dict:
    """Write both CIFAR fixtures under ``root``; return what was written per dataset as
    ``{"cifar10": (train_images HWC, train_labels, test_images, test_labels), ...}``."""
    root = Path(root)
    written = {}
    for dataset in ("cifar10", "cifar100"):
        items = find_foolbox_pngs(png_folder, dataset)
        if not 0 < num_train < len(items):
            raise ValueError(f"num_train must lie in [1, {len(items) - 1}], got {num_train!r}")
        images = np.stack([_read_png(p) for _, _, p in items])
        labels = [lab for _, lab, _ in items]
        names = [p.name for _, _, p in items]
        tr, te = slice(0, num_train), slice(num_train, None)
        if dataset == "cifar10":
            out = root / "cifar-10-batches-py"
            out.mkdir(parents=True, exist_ok=True)
            chunks = np.array_split(np.arange(num_train), 5)
            for b, idx in enumerate(chunks, start=1):
                _dump(
                    {
                        "batch_label": f"training batch {b} of 5 (fixture)",
                        "labels": [labels[i] for i in idx],
                        "data": _rows(images[idx]),
                        "filenames": [names[i] for i in idx],
                    },
                    out / f"data_batch_{b}",
                )
            _dump(
                {
                    "batch_label": "testing batch 1 of 1 (fixture)",
                    "labels": labels[te],
                    "data": _rows(images[te]),
                    "filenames": names[te],
                },
                out / "test_batch",
            )
            _dump(
                {
                    "label_names": [
                        "airplane",
                        "automobile",
                        "bird",
                        "cat",
                        "deer",
                        "dog",
                        "frog",
                        "horse",
                        "ship",
                        "truck",
                    ],
                    "num_cases_per_batch": 10000,
                    "num_vis": 3072,
                },
                out / "batches.meta",
            )
        else:
            out = root / "cifar-100-python"
            out.mkdir(parents=True, exist_ok=True)
            for part, sl in (("train", tr), ("test", te)):
                _dump(
                    {
                        "batch_label": f"{part} (fixture)",
                        "fine_labels": labels[sl],
                        "coarse_labels": [0] * len(labels[sl]),
                        "data": _rows(images[sl]),
                        "filenames": names[sl],
                    },
                    out / part,
                )
            _dump(
                {
                    "fine_label_names": [f"class_{i}" for i in range(100)],
                    "coarse_label_names": [f"superclass_{i}" for i in range(20)],
                },
                out / "meta",
            )
        written[dataset] = (images[tr], labels[tr], images[te], labels[te])
    return written


# -- a small real image folder (train/ and val/ by class) from photos that ship in packages ----

PHOTO_SIZES = ((500, 375), (375, 500), (500, 333), (500, 400), (333, 500), (640, 480))


def packaged_photos(foolbox_folder: str | Path | None = None) -> list[Path]:
    """Real photos on this machine without a network: scikit-learn's two sample photos
    (``china.jpg``, ``flower.jpg``, 640x427) and foolbox's 20 ImageNet validation photos
    (``imagenet_<i>_<label>.jpg``, 512x512; ``domains.vision.catalogue.locate("foolbox-samples")``)."""
    import sklearn.datasets

    images = Path(sklearn.datasets.__file__).with_name("images")
    photos = [images / "china.jpg", images / "flower.jpg"]
    if foolbox_folder is None:
        from domains.vision.catalogue import locate

        foolbox_folder = locate("foolbox-samples")
    photos += sorted(Path(foolbox_folder).glob("imagenet_*.jpg"))
    return photos


def write_photo_folder(
    out: str | Path,
    classes: int = 6,
    train_per_class: int = 8,
    val_per_class: int = 3,
    seed: int = 0,
    foolbox_folder: str | Path | None = None,
) -> dict[str, list[Path]]:
    """Write an ImageFolder layout under ``out``: one class per packaged photo (the first
    ``classes`` of :func:`packaged_photos`), each image a different random crop of its photo
    (40-90% of the area) resized to one of ImageNet's typical sizes (``PHOTO_SIZES``) and
    re-encoded: JPEGs of quality 70-95, plus one PNG and one WebP per class in train.
    Deterministic in ``seed``. Returns the files written per split."""
    from PIL import Image

    photos = packaged_photos(foolbox_folder)
    if not 1 <= classes <= len(photos):
        raise ValueError(f"classes must lie in [1, {len(photos)}] (packaged photos), got {classes!r}")
    rng = np.random.default_rng(seed)
    written: dict[str, list[Path]] = {"train": [], "val": []}
    for photo in photos[:classes]:
        name = photo.stem
        with Image.open(photo) as im:
            src = im.convert("RGB")
        for split, count in (("train", train_per_class), ("val", val_per_class)):
            folder = Path(out) / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                frac = rng.uniform(0.4, 0.9)
                w = int(src.width * np.sqrt(frac))
                h = int(src.height * np.sqrt(frac))
                left = int(rng.integers(0, src.width - w + 1))
                top = int(rng.integers(0, src.height - h + 1))
                size = PHOTO_SIZES[int(rng.integers(0, len(PHOTO_SIZES)))]
                img = src.crop((left, top, left + w, top + h)).resize(size, Image.BICUBIC)
                ext = {0: ".png", 1: ".webp"}.get(k, ".jpg") if split == "train" else ".jpg"
                path = folder / f"{name}_{k:02d}{ext}"
                if ext == ".jpg":
                    img.save(path, quality=int(rng.integers(70, 96)))
                else:
                    img.save(path)
                written[split].append(path)
    return written


def write_png_folder(out: str | Path, splits: dict, class_names: list[str]) -> dict[str, int]:
    """Write in-memory image splits (``{"train": split, "val": split}``, each with uint8
    ``images [N, C, H, W]`` and ``labels [N]``) as an ImageFolder layout of PNGs under ``out``:
    grayscale ('L' mode) for one channel, RGB for three. Class folders are named
    ``<label>_<name>`` (characters other than letters and digits as '-'), so that their sorted
    order is the label order (up to ten classes); the files ``<index>.png`` in split order."""
    from PIL import Image

    if len(class_names) > 10:
        raise ValueError(f"write_png_folder keeps the label order for up to 10 classes, got {len(class_names)}")
    folders = [f"{i}_{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}" for i, name in enumerate(class_names)]
    counts = {}
    for split, data in splits.items():
        for folder in folders:
            (Path(out) / split / folder).mkdir(parents=True, exist_ok=True)
        images, labels = data.images.numpy(), data.labels.numpy()
        for i, (img, label) in enumerate(zip(images, labels)):
            arr = img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0)
            Image.fromarray(arr, "L" if img.shape[0] == 1 else "RGB").save(
                Path(out) / split / folders[int(label)] / f"{i:06d}.png"
            )
        counts[split] = len(images)
    return counts


if __name__ == "__main__":  # python -m domains.vision.fixtures photos DEST
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "photos":
        sys.exit("usage: python -m domains.vision.fixtures photos DEST  (writes DEST/train and DEST/val)")
    files = write_photo_folder(sys.argv[2])
    print(f"wrote {len(files['train'])} training and {len(files['val'])} validation images under {sys.argv[2]}")
