"""The vision domain's datasets stored in memory (``dataset_table.py``, storage ``memory``):
every image a uint8 tensor (``datasets.py``), training batches drawn from them
(``TensorBatches``), the whole view family applied on the device, and the probes' labelled
splits in memory. ``stream_storage.py`` answers the same calls for the streamed datasets."""

from __future__ import annotations

from typing import Any

from domains.vision import datasets as ds
from domains.vision.config import DataConfig, EvaluationConfig
from domains.vision.views import TrainingViews

__all__ = ["check_data", "check_sections", "load_train", "training_batches", "eval_splits"]


def check_data(recipe: Any) -> list[tuple[str, str]]:
    """The dataset's files are where torchvision reads them (MNIST / Fashion-MNIST fetched)."""
    cfg: DataConfig = recipe.data
    problem = ds.unavailable(cfg.dataset, cfg.root, cfg.download)
    return [("data.dataset", problem)] if problem else []


def check_sections(data: DataConfig, ev: EvaluationConfig) -> list[tuple[str, str]]:
    """Every evaluation setting applies to images in memory."""
    return []


def load_train(recipe: Any) -> ds.ImageSplit:
    """The pretraining images (imbalanced / subset as the recipe says)."""
    cfg: DataConfig = recipe.data
    split = ds.load_split(cfg.dataset, cfg.train_split, cfg.root, download=cfg.download, verify=cfg.verify)
    if cfg.imbalance is not None:
        split = split.subset(ds.imbalanced_indices(split.labels, cfg.imbalance, split.num_classes, cfg.imbalance_seed))
    return ds.seeded_subset(split, cfg.train_subset, ds.SUBSET_SEEDS[0])


def training_batches(recipe: Any, views: TrainingViews) -> tuple[Any, int]:
    """Seeded batches of whole images (``{"x": uint8 [n, C, H, W], "y"}``) and their number."""
    from toolkit.training.batches import TensorBatches

    train = load_train(recipe)
    batches = TensorBatches(
        {"x": train.images, "y": train.labels},
        recipe.budget.batch_size,
        seed=recipe.seed,
        drop_last=recipe.data.drop_last,
    )
    return batches, len(train)


def eval_splits(recipe: Any, size: int) -> tuple[ds.ImageSplit, ds.ImageSplit, int, None]:
    """The probes' labelled training and test images (fixed subsets as the recipe says; the
    probes resize them to ``size``), the number of classes, and no stream."""
    cfg: DataConfig = recipe.data
    ev: EvaluationConfig = recipe.evaluation
    probe = ds.load_split(cfg.dataset, "train", cfg.root, download=cfg.download, verify=cfg.verify)
    test = ds.load_split(cfg.dataset, "test", cfg.root, download=cfg.download, verify=cfg.verify)
    probe = ds.seeded_subset(probe, ev.probe_train_subset, ds.SUBSET_SEEDS[1])
    test = ds.seeded_subset(test, ev.test_subset, ds.SUBSET_SEEDS[2])
    return probe, test, probe.num_classes, None
