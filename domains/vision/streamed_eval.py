"""The final probes of the folder datasets (``imagefolder``, ``imagenet``, ...), whose splits are
streamed from disk: the papers' protocol on frozen features, a linear layer trained with SGD on
the device (top-1 / top-5), the weighted kNN (k, t) and the 5-NN, over the whole train and val
splits.

Each split goes through the frozen backbone ONCE, as centre views
(:func:`toolkit.evaluation.features.cache_features`: on the device or in memory when the
features fit, else in a file of float16 rows under ``$TMPDIR``), and every epoch of the linear
probe, its standardisation statistics, the kNN and the test scoring read those features. The
probe's epoch ``e`` visits the rows in the permutation the streaming loader would draw for it
(``StreamBatches.order``), so the mini-batches are those of re-streaming the images. Only
``linear.augment`` (random-resized crops and flips, new each epoch) streams the training images
through the backbone every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from domains.vision.augment import AugmentSpec, BatchAugment
from domains.vision.config import EvaluationConfig
from domains.vision.image_folders import FolderSplit
from domains.vision.stream_storage import FolderStreams
from domains.vision.streaming import CropSpec, StreamBatches, auto_workers, choose_decode

__all__ = ["streamed_probes", "feature_chunks", "epoch_order"]


def _loader(
    split: FolderSplit, crop: CropSpec, streams: FolderStreams, batch_size: int, seed: int, shuffle: bool
) -> StreamBatches:
    cfg = streams.loader
    return StreamBatches(
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


def feature_chunks(
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
    loader = _loader(split, crop, streams, batch_size, seed, shuffle)
    loader.set_epoch(epoch)
    for batch in loader.iter_from(0):
        x = batch["x"].to(streams.device, non_blocking=True).flatten(0, 1)
        with torch.no_grad():
            feats = fn(normalize.normalize(x.float().div_(255.0)) if crop.mode == "center" else normalize(x))
        yield feats.float(), batch["y"].to(streams.device)
    loader.close()


def epoch_order(split: FolderSplit, streams: FolderStreams, seed: int) -> Callable[[int], np.ndarray]:
    """The permutation of ``split`` that a shuffled loader of ``seed`` reads in epoch ``e``."""
    loader = _loader(split, CropSpec(streams.size, views=1, mode="center"), streams, 1, seed, shuffle=True)
    return loader.order


def streamed_probes(
    fn: Any,
    streams: FolderStreams,
    aug: BatchAugment,
    cfg: EvaluationConfig,
    seed: int,
    suffix: str = "",
    knn: bool = True,
    *,
    cache: bool = True,
    memory_limit: int | None = None,
) -> dict[str, float]:
    """The probes of the module doc on the backbone ``fn``: ``knn_top1``, ``knn5_top1``,
    ``linear_top1`` (``linear_top5`` above five classes), each name ending in ``suffix``.
    ``cache=False`` streams the images through ``fn`` for every pass instead (what the cache
    is checked against); ``memory_limit``: bytes the cached features may take on the device or
    in memory (default: half of what is free)."""
    from toolkit.evaluation.features import cache_features
    from toolkit.evaluation.knn import topk_accuracy
    from toolkit.evaluation.streamed import chunked_knn_scores

    out: dict[str, float] = {}
    center = CropSpec(streams.size, views=1, mode="center")
    bs = cfg.batch_size
    nc = streams.train.num_classes
    lin = cfg.linear
    do_knn = cfg.knn.enabled and knn
    caches = []

    def centred(split: FolderSplit, batch: int = bs, seed_: int = seed, epoch: int = 0, shuffle: bool = False) -> Any:
        return feature_chunks(fn, split, center, aug, streams, batch, seed_, epoch, shuffle)

    train_cache = test_cache = None
    try:
        if cache and (do_knn or (lin.enabled and not lin.augment)):
            train_cache = cache_features(
                centred(streams.train), len(streams.train), device=streams.device, memory_limit=memory_limit
            )
            caches.append(train_cache)
        if cache and (do_knn or lin.enabled):
            test_cache = cache_features(
                centred(streams.val), len(streams.val), device=streams.device, memory_limit=memory_limit
            )
            caches.append(test_cache)

        def train_centred() -> Any:
            return train_cache.chunks(bs) if train_cache is not None else centred(streams.train)

        def test_chunks() -> Any:
            return test_cache.chunks(bs) if test_cache is not None else centred(streams.val)

        if do_knn:
            tx, ty = test_cache.tensors() if test_cache is not None else (torch.cat(t) for t in zip(*test_chunks()))
            classifiers = [(cfg.knn.k, True)] + ([(5, False)] if cfg.knn.five_nn else [])
            scores = chunked_knn_scores(
                train_centred(), tx, nc, classifiers, temperature=cfg.knn.temperature, device=streams.device
            )
            out[f"knn_top1{suffix}"] = topk_accuracy(scores[0].cpu(), ty.cpu(), 1)
            if cfg.knn.five_nn:
                out[f"knn5_top1{suffix}"] = topk_accuracy(scores[1].cpu(), ty.cpu(), 1)
        if lin.enabled:
            res = _linear(fn, streams, aug, cfg, seed, train_cache, test_chunks)
            out[f"linear_top1{suffix}"] = res["top1"]
            if "top5" in res:
                out[f"linear_top5{suffix}"] = res["top5"]
    finally:
        for c in caches:
            c.close()
    return out


def _linear(
    fn: Any,
    streams: FolderStreams,
    aug: BatchAugment,
    cfg: EvaluationConfig,
    seed: int,
    train_cache: Any,
    test_chunks: Callable[[], Any],
) -> dict[str, float]:
    """The SGD probe: its epochs read ``train_cache`` (in the loader's order for each epoch), or
    stream the images (``linear.augment``, or no cache)."""
    from toolkit.evaluation.streamed import streamed_linear_probe

    lin = cfg.linear
    nc = streams.train.num_classes
    train_seed = seed + 1
    if lin.augment:
        crop = CropSpec(streams.size, views=1, mode="random", scale=(0.08, 1.0))
        spec = AugmentSpec(streams.size, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.5, jitter_p=0.0, grayscale_p=0.0)
        normalize = BatchAugment(spec, aug.mean, aug.std)
    else:
        crop, normalize = CropSpec(streams.size, views=1, mode="center"), aug

    if train_cache is not None and not lin.augment:
        train_epoch = train_cache.epochs(lin.batch_size, epoch_order(streams.train, streams, train_seed))
        dim = train_cache.dim
    else:

        def train_epoch(epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
            return feature_chunks(
                fn, streams.train, crop, normalize, streams, lin.batch_size, train_seed, epoch, shuffle=True
            )

        with torch.no_grad():
            dim = fn(torch.zeros(2, 3, streams.size, streams.size, device=streams.device)).shape[1]
    with torch.enable_grad():
        return streamed_linear_probe(
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
