"""A recipe's view family, from one function for both storages of ``dataset_table.py``.

:func:`view_family` is the recipe's whole family (its ``data.augment`` preset, default by
dataset, with any field overridden; the dataset's normalisation). :func:`training_views` splits
it between who draws what: an in-memory dataset's batch gets the whole family on the device; a
streamed dataset's workers draw the family's ``RandomResizedCrop`` (its scale and ratio, on the
file's own pixels) and the device does the rest of the same family (:func:`crop_rest`: flip,
jitter, grayscale, blur, normalisation). Both read the one family, so the two paths cannot draw
different crops.

Multi-crop (``data.local_crops``, SwAV / DINO): :func:`local_family` is the same family at the
local size and scale. In memory the device applies it whole to the batch's images; streamed, the
workers cut the local crops with the rest of an image's crops (``CropSpec.local_views``) and the
device does the rest of the local family (``TrainingViews.local``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from domains.vision.augment import AugmentSpec, BatchAugment, preset
from domains.vision.config import DataConfig, EvaluationConfig, local_crop_size
from domains.vision.dataset_table import entry
from domains.vision.decode import CropSpec

__all__ = [
    "TrainingViews",
    "view_family",
    "local_family",
    "training_views",
    "crop_rest",
    "eval_augment",
    "needs_natural",
]


@dataclass(frozen=True)
class TrainingViews:
    """Who draws which part of the view family: ``device`` is applied to a training batch on the
    training device; ``crop`` is what the streamed workers cut from each file (None in memory);
    ``local`` is applied to the local crops on the device (the whole local family in memory, its
    rest once the workers cropped; None without local crops)."""

    family: BatchAugment
    device: BatchAugment
    crop: CropSpec | None = None
    local: BatchAugment | None = None


def view_family(cfg: DataConfig) -> BatchAugment:
    """The recipe's whole view family, random-resized crop included."""
    e = entry(cfg.dataset)
    a = cfg.augment
    spec = preset(a.preset or e.preset, **a.model_dump(exclude={"preset"}))
    mean, std = e.normalization
    return BatchAugment(spec, mean, std)


def local_family(cfg: DataConfig) -> BatchAugment | None:
    """Multi-crop's local crops: the recipe's view family at ``local_crops.size`` and ``scale``
    (None when ``local_crops.number`` is 0)."""
    local = cfg.local_crops
    if local.number == 0:
        return None
    family = view_family(cfg)
    size = local.size if local.size is not None else local_crop_size(cfg.view_size)
    return BatchAugment(replace(family.spec, size=size, scale=tuple(local.scale)), family.mean, family.std)


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


def training_views(recipe: Any) -> TrainingViews:
    """The recipe's view family split between the workers and the device (module doc)."""
    family = view_family(recipe.data)
    local = local_family(recipe.data)
    if entry(recipe.data.dataset).storage == "memory":
        return TrainingViews(family, family, local=local)
    spec = family.spec
    crop = CropSpec(
        spec.size,
        views=recipe.objective.views,
        scale=spec.scale,
        ratio=spec.ratio,
        natural=needs_natural(recipe),
        local_views=recipe.data.local_crops.number,
        local_size=local.spec.size if local is not None else 0,
        local_scale=local.spec.scale if local is not None else (0.05, 0.4),
    )
    rest = None if local is None else BatchAugment(crop_rest(local.spec), local.mean, local.std)
    return TrainingViews(family, BatchAugment(crop_rest(spec), family.mean, family.std), crop, rest)


def eval_augment(train: BatchAugment, ev: EvaluationConfig) -> BatchAugment:
    """The view family at ``evaluation.image_size`` (the training one where it is unset)."""
    if ev.image_size is None or ev.image_size == train.spec.size:
        return train
    return BatchAugment(replace(train.spec, size=ev.image_size), train.mean, train.std)
