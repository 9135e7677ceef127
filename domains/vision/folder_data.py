"""The vision domain's folder datasets (``imagefolder``, ``imagenet``, ``imagenet100``,
``tiny-imagenet``) behind the same faces as the in-memory ones: the training batches stream
(``streaming.py``); the online monitor and the geometry diagnostics read small fixed subsets
decoded into memory once; the final probes (``streamed_eval.py``) stream the whole train and
val splits through the frozen backbone once and probe the features they keep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from domains.vision import datasets as ds
from domains.vision.augment import AugmentSpec
from domains.vision.config import DataConfig, EvaluationConfig
from domains.vision.folders import FolderSplit, find_problems, load_folder_split
from domains.vision.streaming import CropSpec, StreamBatches, auto_workers, choose_decode, materialize

__all__ = [
    "FolderStreams",
    "training_device",
    "folder_problems",
    "load_folder",
    "train_batches",
    "crop_rest",
    "needs_natural",
    "monitor_splits",
]

IMAGENET_NORMALIZATION = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass
class FolderStreams:
    """What the streamed probes read: the labelled splits as file lists, the eval view size and
    the loader settings."""

    train: FolderSplit
    val: FolderSplit
    size: int
    loader: Any
    device: torch.device


def training_device(recipe: Any) -> torch.device:
    """The device this process trains on (``recipe.device``; under DDP on CUDA, this rank's)."""
    from toolkit.training.trainer import select_device

    dev = select_device(recipe.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def folder_problems(cfg: DataConfig) -> list[tuple[str, str]]:
    """Every problem of the dataset's folder, under the recipe key it concerns."""
    problems = find_problems(cfg.dataset, cfg.path, cfg.root, cfg.classes, cfg.val_labels)
    key = "data.path" if cfg.path else "data.dataset"
    return [(key, p) for p in problems]


def load_folder(cfg: DataConfig, split: str) -> FolderSplit:
    return load_folder_split(cfg.dataset, split, cfg.path, cfg.root, cfg.classes, cfg.val_labels)


def crop_rest(spec: AugmentSpec) -> AugmentSpec:
    """The part of a view family left for the device once a worker cropped: the crop of a
    square ``size`` input at scale 1 and ratio 1 is the whole input (identity resampling), so
    flip, jitter, grayscale, blur and normalisation run as for in-memory data."""
    return replace(spec, scale=(1.0, 1.0), ratio=(1.0, 1.0))


def needs_natural(recipe: Any) -> bool:
    """Whether the objective reads the un-augmented view (CPCL's projection term)."""
    from toolkit.losses.base import LOSSES

    name = recipe.objective.loss.name
    return name in LOSSES and "natural" in LOSSES.get(name).needs


def train_batches(recipe: Any, spec: AugmentSpec, device: torch.device | None) -> tuple[StreamBatches, FolderSplit]:
    """The streamed pretraining batches (``{"x": uint8 [n, V, 3, S, S], "y", "index"}``)."""
    cfg: DataConfig = recipe.data
    train = ds.seeded_subset(load_folder(cfg, "train"), cfg.train_subset, ds.SUBSET_SEEDS[0])
    crop = CropSpec(
        spec.size, views=recipe.objective.views, scale=spec.scale, ratio=spec.ratio, natural=needs_natural(recipe)
    )
    dev = device or torch.device("cpu")
    workers = auto_workers(cfg.loader.workers)
    decode, why = choose_decode(cfg.loader.decode, dev, train, crop, workers)
    where = f"on {dev} (torchvision decode_jpeg)" if decode == "device" else "in the workers (libjpeg-turbo / PIL)"
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0:
        print(
            f"[ctk] streaming {len(train):,} images of {train.name} from {train.root}: {workers} worker "
            f"processes, decoding {where}; {why}",
            flush=True,
        )
    batches = StreamBatches(
        train,
        crop,
        recipe.budget.batch_size,
        seed=recipe.seed,
        drop_last=cfg.drop_last,
        workers=workers,
        prefetch=cfg.loader.prefetch,
        decode=decode,
        device=dev,
        bad_image_limit=cfg.loader.bad_image_limit,
    )
    return batches, train


def monitor_splits(recipe: Any, size: int) -> tuple[ds.ImageSplit, ds.ImageSplit, FolderSplit, FolderSplit]:
    """Centre views of fixed subsets of train and val decoded into memory (the online kNN and
    the diagnostics read these), and the full labelled file lists (the final probes)."""
    cfg: DataConfig = recipe.data
    ev: EvaluationConfig = recipe.evaluation
    train = ds.seeded_subset(load_folder(cfg, "train"), ev.probe_train_subset, ds.SUBSET_SEEDS[1])
    val = ds.seeded_subset(load_folder(cfg, "val"), ev.test_subset, ds.SUBSET_SEEDS[2])
    crop = CropSpec(size, views=1, mode="center")
    workers = min(auto_workers(cfg.loader.workers), 4)
    n_tr = min(len(train), ev.monitor.train_samples)
    n_te = min(len(val), max(ev.monitor.test_samples, ev.diagnostics.samples if ev.diagnostics.enabled else 0))
    small_tr = ds.seeded_subset(train, n_tr, ds.SUBSET_SEEDS[1] + 1)
    small_te = ds.seeded_subset(val, n_te, ds.SUBSET_SEEDS[2] + 1)
    xs = [materialize(s, crop, workers=workers) for s in (small_tr, small_te)]
    splits = [ds.ImageSplit(s.name, x, y, s.num_classes) for s, (x, y) in zip((small_tr, small_te), xs)]
    return splits[0], splits[1], train, val
