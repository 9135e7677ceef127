"""The streamed workers crop as the recipe says (issue 46 item 1): for every shipped recipe of a
streamed dataset, a few thousand crop boxes drawn through the workers' own code
(``decode.crop_boxes`` with the ``CropSpec`` the domain hands the workers) have the area-fraction
and log-aspect distributions of torchvision's ``RandomResizedCrop`` with the recipe's scale and
ratio (two-sample Kolmogorov-Smirnov tests against the rule written plainly below), and the
device does the rest of the same family. In memory, the device applies the whole family."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ks_2samp

from domains.vision import VisionDomain
from domains.vision.dataset_table import streamed
from domains.vision.decode import crop_boxes
from domains.vision.views import crop_rest, training_views
from toolkit import objective as objective_mod
from toolkit import recipe as rc

ROOT = Path(__file__).resolve().parents[2] / "recipes" / "vision"
SHAPES = ((500, 375), (64, 64), (300, 500))  # an ImageNet photo, a Tiny ImageNet image, a portrait
IMAGES = 1000  # per shape: with 2 views, 6,000 boxes a recipe


def _validate(path: Path, overrides: list[str] | None = None) -> rc.Recipe:
    raw = rc.apply_overrides(rc.load_yaml(path), overrides or [], str(path))
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, str(path), overrides or [])


ALL = sorted(p for p in ROOT.rglob("*.yaml") if "tables" not in p.parts)
STREAMED = [p for p in ALL if _validate(p).data.dataset in streamed()]
IN_MEMORY = [p for p in ALL if p not in STREAMED]


def torchvision_rrc(width: int, height: int, scale, ratio, rng: random.Random) -> tuple[int, int]:
    """``torchvision.transforms.RandomResizedCrop.get_params``' width and height, written plainly:
    ten tries of area ``U(scale)`` and log aspect ``U(log ratio)``; else the whole image clipped
    to the ratio range."""
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return w, h
    in_ratio = width / height
    if in_ratio < min(ratio):
        return width, int(round(width / min(ratio)))
    if in_ratio > max(ratio):
        return int(round(height * max(ratio))), height
    return width, height


def _stats(sizes, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    wh = np.asarray(sizes, dtype=np.float64)
    return wh[:, 0] * wh[:, 1] / (width * height), np.log(wh[:, 0] / wh[:, 1])


def _worker_sizes(spec, width: int, height: int, seed: int) -> list[tuple[float, float]]:
    sizes = []
    for i in range(IMAGES):
        rng = np.random.default_rng([seed, 0, i, 0])  # as a worker seeds an image's draws
        sizes += [(b[2] - b[0], b[3] - b[1]) for b in crop_boxes(width, height, spec, rng)]
    return sizes


def test_every_streamed_dataset_has_shipped_recipes():
    assert {_validate(p).data.dataset for p in STREAMED} == set(streamed())
    assert len(STREAMED) >= 10, [p.name for p in STREAMED]


@pytest.mark.parametrize("path", STREAMED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_workers_draw_the_recipes_random_resized_crop(path):
    recipe = _validate(path)
    views = training_views(recipe)
    family = views.family.spec
    assert views.crop is not None and views.crop.mode == "random" and views.crop.views == recipe.objective.views
    assert views.device.spec == crop_rest(family) and views.crop.size == family.size
    ref_rng = random.Random(7)
    for width, height in SHAPES:
        sizes = _worker_sizes(views.crop, width, height, recipe.seed)
        ref = [torchvision_rrc(width, height, family.scale, family.ratio, ref_rng) for _ in sizes]
        (area, aspect), (ref_area, ref_aspect) = _stats(sizes, width, height), _stats(ref, width, height)
        for name, got, want in (("area fraction", area, ref_area), ("log aspect", aspect, ref_aspect)):
            p = ks_2samp(got, want).pvalue
            assert p > 1e-3, f"{path.name} at {width}x{height}: {name} of the workers' crops p={p:.2g}"
        # and tells the workers of before (scale 1, ratio 1: the whole image) from the family
        whole = _worker_sizes(replace(views.crop, scale=(1.0, 1.0), ratio=(1.0, 1.0)), width, height, 0)
        assert ks_2samp(_stats(whole, width, height)[0], ref_area).pvalue < 1e-6


@pytest.mark.parametrize("path", IN_MEMORY, ids=lambda p: str(p.relative_to(ROOT)))
def test_in_memory_the_device_applies_the_whole_family(path):
    views = training_views(_validate(path))
    assert views.crop is None and views.device is views.family


def test_the_domain_hands_its_workers_the_recipes_crop(photo_folder):
    """What build_data gives the streamed batches is training_views' crop (the wiring that lost
    the crop before), and the domain's device views are the rest of the same family."""
    recipe = _validate(
        ROOT / "imagefolder.yaml",
        [f"data.path={photo_folder}", "data.loader.workers=0", "evaluation.monitor.train_samples=8"],
    )
    domain = VisionDomain(recipe)
    bundle = domain.build_data(recipe)
    views = training_views(recipe)
    assert bundle.train.spec == views.crop and bundle.train.dataset.spec == views.crop
    assert views.crop.scale == (0.2, 1.0) and views.crop.ratio == (3 / 4, 4 / 3)  # the recipe's moco_v2
    assert domain.augment.spec == crop_rest(views.family.spec)
    bundle.train.close()
