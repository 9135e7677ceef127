"""The vision domain's datasets streamed from disk (``dataset_table.py``, storage ``stream``:
``imagefolder``, ``imagenet``, ``imagenet100``, ``tiny-imagenet``) behind the same calls as
``memory_storage.py``: the training batches stream (``streaming.py``), the workers cropping as
the recipe's view family says (``views.training_views``); the online monitor and the geometry
diagnostics read small fixed subsets decoded into memory once; the final probes (``streamed_eval.py``) stream the
whole train and val splits through the frozen backbone once and probe the features they keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from domains.vision import datasets as ds
from domains.vision.config import DataConfig, EvaluationConfig
from domains.vision.dataset_table import folder_source
from domains.vision.image_folders import FolderSource, FolderSplit
from domains.vision.streaming import CropSpec, StreamBatches, auto_workers, choose_decode, materialize
from domains.vision.views import TrainingViews

__all__ = [
    "FolderStreams",
    "training_device",
    "source",
    "check_data",
    "check_sections",
    "training_batches",
    "eval_splits",
    "monitor_splits",
]


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


def source(cfg: DataConfig) -> FolderSource:
    """The recipe's dataset folder as one object (``data.path`` / ``root`` / ``classes`` / ``val_labels``)."""
    return folder_source(cfg.dataset, cfg.path, cfg.root, cfg.classes, cfg.val_labels)


def check_data(recipe: Any) -> list[tuple[str, str]]:
    """Every problem of the dataset's folder, under the recipe key it concerns."""
    cfg: DataConfig = recipe.data
    key = "data.path" if cfg.path else "data.dataset"
    return [(key, p) for p in source(cfg).problems()]


def check_sections(data: DataConfig, ev: EvaluationConfig) -> list[tuple[str, str]]:
    """The probes of a streamed dataset: an SGD linear layer, no raw-pixel baseline."""
    problems = []
    if ev.linear.enabled and ev.linear.solver != "sgd":
        problems.append(
            (
                "evaluation.linear.solver",
                f"{data.dataset} is streamed from disk and its features are never all in "
                f"memory: the linear probe trains with sgd (the papers' protocol; lr, epochs, "
                f"milestones or final_lr), got {ev.linear.solver!r}",
            )
        )
    if "raw_pixels" in ev.baselines:
        problems.append(
            (
                "evaluation.baselines",
                f"raw_pixels probes every pixel of the images in memory; not for the streamed "
                f"dataset {data.dataset} (got {ev.baselines})",
            )
        )
    return problems


def training_batches(recipe: Any, views: TrainingViews) -> tuple[StreamBatches, int]:
    """The streamed pretraining batches (``{"x": uint8 [n, V, 3, S, S], "y", "index"}``), each
    view cropped by a worker as ``views.crop`` says, and their number of images."""
    cfg: DataConfig = recipe.data
    if views.crop is None:
        raise ValueError(f"dataset {cfg.dataset!r} is streamed: its views need a worker crop, got none")
    train = ds.seeded_subset(source(cfg).split("train"), cfg.train_subset, ds.SUBSET_SEEDS[0])
    dev = training_device(recipe)
    workers = auto_workers(cfg.loader.workers)
    decode, why = choose_decode(cfg.loader.decode, dev, train, views.crop, workers)
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
        views.crop,
        recipe.budget.batch_size,
        seed=recipe.seed,
        drop_last=cfg.drop_last,
        workers=workers,
        prefetch=cfg.loader.prefetch,
        decode=decode,
        device=dev,
        bad_image_limit=cfg.loader.bad_image_limit,
    )
    return batches, len(train)


def eval_splits(recipe: Any, size: int) -> tuple[ds.ImageSplit, ds.ImageSplit, int, FolderStreams]:
    """The monitor's and the diagnostics' decoded subsets of train and val (centre views of
    ``size``), the number of classes, and the whole labelled splits the final probes stream."""
    small_tr, small_te, train, val = monitor_splits(recipe, size)
    streams = FolderStreams(train, val, size, recipe.data.loader, training_device(recipe))
    return small_tr, small_te, train.num_classes, streams


def monitor_splits(recipe: Any, size: int) -> tuple[ds.ImageSplit, ds.ImageSplit, FolderSplit, FolderSplit]:
    """Centre views of fixed subsets of train and val decoded into memory (the online kNN and
    the diagnostics read these), and the full labelled file lists (the final probes)."""
    cfg: DataConfig = recipe.data
    ev: EvaluationConfig = recipe.evaluation
    folder = source(cfg)
    train = ds.seeded_subset(folder.split("train"), ev.probe_train_subset, ds.SUBSET_SEEDS[1])
    val = ds.seeded_subset(folder.split("val"), ev.test_subset, ds.SUBSET_SEEDS[2])
    crop = CropSpec(size, views=1, mode="center")
    workers = min(auto_workers(cfg.loader.workers), 4)
    n_tr = min(len(train), ev.monitor.train_samples)
    n_te = min(len(val), max(ev.monitor.test_samples, ev.diagnostics.samples if ev.diagnostics.enabled else 0))
    small_tr = ds.seeded_subset(train, n_tr, ds.SUBSET_SEEDS[1] + 1)
    small_te = ds.seeded_subset(val, n_te, ds.SUBSET_SEEDS[2] + 1)
    xs = [materialize(s, crop, workers=workers) for s in (small_tr, small_te)]
    splits = [ds.ImageSplit(s.name, x, y, s.num_classes) for s, (x, y) in zip((small_tr, small_te), xs)]
    return splits[0], splits[1], train, val
