"""The vision domain's datasets streamed from disk (``dataset_table.py``, storage ``stream``:
``imagefolder``, ``imagenet``, ``imagenet100``, ``tiny-imagenet``) behind the same calls as
``memory_storage.py``: the training batches stream (``streaming.py``), the workers cropping as
the recipe's view family says (``views.training_views``); the online monitor and the geometry
diagnostics read small fixed subsets decoded into memory once; the final probes stream the whole
train and val splits through the frozen backbone in chunks (``toolkit.evaluation.streamed``), so
memory is bounded by a chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from domains.vision import datasets as ds
from domains.vision.augment import AugmentSpec, BatchAugment
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
    "streamed_probes",
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


def _feature_chunks(
    fn: Any,
    split: FolderSplit,
    crop: CropSpec,
    normalize: BatchAugment,
    streams: FolderStreams,
    batch_size: int,
    seed: int,
    epoch: int = 0,
    shuffle: bool = False,
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(features, labels)`` of ``split`` batch by batch through ``fn`` (no grad)."""
    cfg = streams.loader
    loader = StreamBatches(
        split,
        crop,
        batch_size=min(batch_size, len(split)),
        seed=seed,
        shuffle=shuffle,
        drop_last=False,
        workers=auto_workers(cfg.workers),
        prefetch=cfg.prefetch,
        decode=choose_decode(cfg.decode, streams.device)[0],
        device=streams.device,
        bad_image_limit=cfg.bad_image_limit,
        rank=0,
        world_size=1,
    )
    loader.set_epoch(epoch)
    for batch in loader.iter_from(0):
        x = batch["x"].to(streams.device, non_blocking=True).flatten(0, 1)
        with torch.no_grad():
            feats = fn(normalize.normalize(x.float().div_(255.0)) if crop.mode == "center" else normalize(x))
        yield feats.float(), batch["y"].to(streams.device)
    loader.close()


def streamed_probes(
    fn: Any,
    streams: FolderStreams,
    aug: BatchAugment,
    cfg: EvaluationConfig,
    seed: int,
    suffix: str = "",
    knn: bool = True,
) -> dict[str, float]:
    """The papers' protocol on frozen features, streamed: a linear layer trained with SGD on the
    device (random-resized crops and flips each epoch with ``linear.augment``,
    centre crops otherwise) reporting top-1 / top-5, and the weighted kNN (k, t) and 5-NN,
    over the whole train and val splits, in chunks."""
    from toolkit.evaluation.probes import topk_accuracy
    from toolkit.evaluation.streamed import chunked_knn_scores, streamed_linear_probe

    out: dict[str, float] = {}
    center = CropSpec(streams.size, views=1, mode="center")
    bs = cfg.batch_size
    nc = streams.train.num_classes
    if cfg.knn.enabled and knn:
        test_x, test_y = zip(*_feature_chunks(fn, streams.val, center, aug, streams, bs, seed))
        tx, ty = torch.cat(test_x), torch.cat(test_y)
        classifiers = [(cfg.knn.k, True)] + ([(5, False)] if cfg.knn.five_nn else [])
        scores = chunked_knn_scores(
            _feature_chunks(fn, streams.train, center, aug, streams, bs, seed),
            tx,
            nc,
            classifiers,
            temperature=cfg.knn.temperature,
            device=streams.device,
        )
        out[f"knn_top1{suffix}"] = topk_accuracy(scores[0].cpu(), ty.cpu(), 1)
        if cfg.knn.five_nn:
            out[f"knn5_top1{suffix}"] = topk_accuracy(scores[1].cpu(), ty.cpu(), 1)
    lin = cfg.linear
    if lin.enabled:
        random_crop = CropSpec(streams.size, views=1, mode="random", scale=(0.08, 1.0))
        train_aug = BatchAugment(
            AugmentSpec(streams.size, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.5, jitter_p=0.0, grayscale_p=0.0),
            aug.mean,
            aug.std,
        )

        def train_epoch(epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
            if lin.augment:
                return _feature_chunks(
                    fn, streams.train, random_crop, train_aug, streams, lin.batch_size, seed + 1, epoch, shuffle=True
                )
            return _feature_chunks(
                fn, streams.train, center, aug, streams, lin.batch_size, seed + 1, epoch, shuffle=True
            )

        def test_chunks() -> Iterator[tuple[Tensor, Tensor]]:
            return _feature_chunks(fn, streams.val, center, aug, streams, bs, seed)

        with torch.no_grad():
            dim = fn(torch.zeros(2, 3, streams.size, streams.size, device=streams.device)).shape[1]
        with torch.enable_grad():
            res = streamed_linear_probe(
                train_epoch,
                test_chunks,
                nc,
                dim,
                epochs=lin.epochs,
                lr=lin.lr or 0.1,
                momentum=lin.momentum,
                weight_decay=lin.weight_decay,
                milestones=tuple(lin.milestones),
                gamma=lin.gamma,
                final_lr=lin.final_lr,
                standardize=lin.standardize,
                device=streams.device,
                topk=(1, 5) if nc > 5 else (1,),
            )
        out[f"linear_top1{suffix}"] = res["top1"]
        if "top5" in res:
            out[f"linear_top5{suffix}"] = res["top5"]
    return out
