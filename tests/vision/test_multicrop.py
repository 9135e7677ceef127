"""Multi-crop (``data.local_crops``, SwAV / DINO): the recipe section and its refusals, the local
views in memory and streamed (shapes, the family at the local size and scale, seeding), and that
without local crops nothing changes."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from domains.vision import VisionDomain
from domains.vision.config import local_crop_size
from domains.vision.decode import CropSpec, draw_boxes
from domains.vision.image_folders import FolderSource
from domains.vision.streaming import StreamBatches, StreamedImages
from domains.vision.views import crop_rest, training_views, view_family
from tests.vision.test_domain import BASE
from toolkit import objective as objective_mod
from toolkit import recipe as rc

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "vision"


def _validate(raw):
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, domain_check=VisionDomain.check)


def _memory(fmnist_root, local=None, encoder=None):
    raw = copy.deepcopy(BASE)
    raw["data"]["root"] = str(fmnist_root)
    if local is not None:
        raw["data"]["local_crops"] = local
    if encoder is not None:
        raw["encoder"] = encoder
    return raw


def _streamed(photo_folder, *sets):
    path = RECIPES / "imagefolder.yaml"
    overrides = [
        f"data.path={photo_folder}",
        "data.augment.size=24",
        "data.augment.blur_kernel=3",
        "data.loader.workers=0",
        "evaluation.monitor.train_samples=8",
        "evaluation.monitor.test_samples=4",
        "evaluation.diagnostics.samples=4",
        *sets,
    ]
    raw = rc.apply_overrides(rc.load_yaml(path), overrides, str(path))
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, str(path), overrides, VisionDomain.check)


def test_the_section_defaults_and_the_resolved_size(fmnist_root):
    off = _validate(_memory(fmnist_root))
    assert off.data.local_crops.number == 0 and off.data.local_crops.size is None
    assert off.data.local_crops.scale == (0.05, 0.4)
    on = _validate(_memory(fmnist_root, {"number": 6}))
    assert on.data.local_crops.size == 12  # the resolved recipe says what runs: 28 * 96 / 224 = 12
    assert [local_crop_size(s) for s in (28, 32, 64, 96, 224, 10, 4)] == [12, 12, 28, 40, 96, 4, 2]
    mine = _validate(_memory(fmnist_root, {"number": 2, "size": 8, "scale": [0.1, 0.3]}))
    assert mine.data.local_crops.size == 8 and mine.data.local_crops.scale == (0.1, 0.3)


@pytest.mark.parametrize(
    "local,encoder,message",
    [
        ({"number": 2, "scale": [0.5, 0.2]}, None, r"data.local_crops.scale: .*0 < lo <= hi <= 1, got \[0.5, 0.2\]"),
        ({"number": 2, "scale": [0.0, 0.4]}, None, r"data.local_crops.scale: .*0 < lo <= hi <= 1"),
        ({"number": -1}, None, r"data.local_crops.number: .*greater than or equal to 0 \(got -1\)"),
        ({"number": 2, "size": 0}, None, r"data.local_crops.size: .*greater than or equal to 1"),
        ({"number": 2, "size": 40}, None, r"data.local_crops.size must be at most the view size \(28 px.*got 40"),
        ({"number": 2, "sizes": 8}, None, r"data.local_crops.sizes: unknown key"),
        (
            {"number": 2},
            {"arch": "small_alexnet", "head": {"hidden": [], "out_dim": 8}},
            r"data.local_crops.size: local crops of 12 px through encoder.arch small_alexnet: "
            r"small_alexnet takes only its training view size \(28\), got 12",
        ),
        (
            {"number": 2},
            {"arch": "resnet18", "feature": "prepool"},
            r"data.local_crops.size: .*feature: prepool flattens the feature map of 28 px views",
        ),
        (
            {"number": 2, "size": 14},
            {"arch": "vit_tiny", "patch_size": 4, "depth": 1},
            r"data.local_crops.size: .*vit_tiny: must be a multiple of encoder.patch_size \(4\), got 14",
        ),
        (
            {"number": 2, "size": 6},
            {"arch": "convnet", "blocks": 4},
            r"data.local_crops.size: .*convnet with 4 blocks needs inputs of at least 8 px, got 6",
        ),
    ],
)
def test_refusals_name_the_key_the_value_and_what_is_expected(fmnist_root, local, encoder, message):
    with pytest.raises(rc.RecipeError, match=message):
        _validate(_memory(fmnist_root, local, encoder))


@pytest.mark.parametrize("encoder", [{"arch": "resnet18"}, {"arch": "vit_tiny", "patch_size": 4, "depth": 1}])
def test_size_agnostic_encoders_take_the_local_crops(fmnist_root, encoder):
    recipe = _validate(_memory(fmnist_root, {"number": 2, "size": 12}, {**encoder, "head": {"out_dim": 8}}))
    dom = VisionDomain(recipe)
    data = dom.build_data(recipe)
    enc = dom.build_encoder(recipe).eval()
    batch = next(iter(data.train))
    with torch.no_grad():
        z = enc(dom.make_local_views(batch, torch.Generator().manual_seed(0)).flatten(0, 1))
    assert z.shape == (16 * 2, 8)


def test_in_memory_local_views_are_the_family_at_the_local_size_and_scale(fmnist_root):
    recipe = _validate(_memory(fmnist_root, {"number": 4, "size": 12, "scale": [0.05, 0.4]}))
    dom = VisionDomain(recipe)
    data = dom.build_data(recipe)
    family = view_family(recipe.data).spec
    assert dom.local_augment.spec == replace(family, size=12, scale=(0.05, 0.4))
    batch = next(iter(data.train))
    gen = torch.Generator().manual_seed(0)
    dom.make_views(batch, 2, gen)
    state = gen.get_state()
    local = dom.make_local_views(batch, gen)
    assert local.shape == (16, 4, 1, 12, 12) and local.dtype == torch.float32
    assert not torch.allclose(local[:, 0], local[:, 1])  # each local crop its own draw
    # the same draws, written out: parameters for N * L copies of the images, then applied
    again = torch.Generator().manual_seed(0)
    again.set_state(state)
    params = dom.local_augment.sample(16 * 4, 28, 28, again)
    copies = batch["x"].repeat_interleave(4, dim=0)
    assert torch.equal(local.flatten(0, 1), dom.local_augment.apply(copies, params))
    # the boxes cover 5% to 40% of the image, up to the rounding of a few-pixel side
    many = dom.local_augment.sample(4000, 28, 28, torch.Generator().manual_seed(1)).boxes
    area = many[:, 2] * many[:, 3] / 28**2
    assert float(area.min()) >= 0.05 * 0.7 and float(area.max()) <= 0.4 * 1.15
    assert abs(float(area.mean()) - 0.225) < 0.01  # U(0.05, 0.4) on average


def test_the_same_generator_state_gives_the_same_local_views(fmnist_root):
    recipe = _validate(_memory(fmnist_root, {"number": 3}))
    dom = VisionDomain(recipe)
    batch = next(iter(dom.build_data(recipe).train))
    a = dom.make_local_views(batch, torch.Generator().manual_seed(5))
    b = dom.make_local_views(batch, torch.Generator().manual_seed(5))
    c = dom.make_local_views(batch, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.allclose(a, c)


def test_without_local_crops_nothing_changes(fmnist_root):
    """number 0 (or no section): no local views, nothing drawn, and the global views are those of
    the recipe without the section, bit for bit; with local crops too (drawn after them)."""
    views, states = {}, {}
    for name, local in (("none", None), ("zero", {"number": 0}), ("six", {"number": 6})):
        recipe = _validate(_memory(fmnist_root, local))
        dom = VisionDomain(recipe)
        batch = next(iter(dom.build_data(recipe).train))
        gen = torch.Generator().manual_seed(3)
        views[name] = dom.make_views(batch, 2, gen)
        before = gen.get_state()
        out = dom.make_local_views(batch, gen)
        states[name] = torch.equal(before, gen.get_state())
        assert (out is None) == (name != "six")
    assert torch.equal(views["none"], views["zero"]) and torch.equal(views["none"], views["six"])
    assert states == {"none": True, "zero": True, "six": False}


def test_streamed_local_crops_are_cut_by_the_workers(photo_folder):
    recipe = _streamed(photo_folder, "data.local_crops.number=3", "data.local_crops.size=8")
    views = training_views(recipe)
    crop = views.crop
    assert (crop.local_views, crop.local_size, crop.local_scale) == (3, 8, (0.05, 0.4))
    assert views.local.spec == crop_rest(replace(views.family.spec, size=8, scale=(0.05, 0.4)))
    dom = VisionDomain(recipe)
    bundle = dom.build_data(recipe)
    batch = next(bundle.train.iter_from(0))
    assert batch["x"].shape == (16, 2, 3, 24, 24) and batch["x_local"].shape == (16, 3, 3, 8, 8)
    assert batch["x_local"].dtype == torch.uint8
    gen = torch.Generator().manual_seed(0)
    local = dom.make_local_views(batch, gen)
    assert local.shape == (16, 3, 3, 8, 8) and local.dtype == torch.float32
    # the device's part: the rest of the family on the workers' crops, from the same generator
    again = dom.local_augment(batch["x_local"].flatten(0, 1), torch.Generator().manual_seed(0))
    assert torch.equal(local.flatten(0, 1), again)
    # the global crops are those of the recipe without local crops, bit for bit
    plain = _streamed(photo_folder)
    plain_dom = VisionDomain(plain)
    plain_batch = next(plain_dom.build_data(plain).train.iter_from(0))
    assert "x_local" not in plain_batch and plain_dom.make_local_views(plain_batch, gen) is None
    assert torch.equal(batch["x"], plain_batch["x"]) and torch.equal(batch["index"], plain_batch["index"])
    bundle.train.close()


def test_streamed_local_crops_are_seeded_and_at_their_scale(photo_folder):
    split = FolderSource("imagefolder", str(photo_folder)).split("train")
    spec = CropSpec(24, views=2, local_views=4, local_size=8, local_scale=(0.05, 0.4))
    a, b = StreamedImages(split, spec, seed=3), StreamedImages(split, spec, seed=3)
    first = a[(1, 5, 7)]
    assert first["x_local"].shape == (4, 3, 8, 8)
    assert np.array_equal(first["x_local"], b[(1, 5, 7)]["x_local"])
    assert not np.array_equal(first["x_local"], a[(2, 5, 7)]["x_local"])
    # the global boxes are a spec's without local crops; the local ones follow from the same stream
    areas = []
    for i in range(500):
        boxes, local = draw_boxes(500, 375, spec, np.random.default_rng([3, 0, i, 0]))
        plain, none = draw_boxes(500, 375, replace(spec, local_views=0), np.random.default_rng([3, 0, i, 0]))
        assert boxes == plain and none == [] and len(local) == 4
        areas += [(r - le) * (bo - t) / (500 * 375) for le, t, r, bo in local]
    assert min(areas) >= 0.05 * 0.98 and max(areas) <= 0.4 * 1.02 and abs(np.mean(areas) - 0.225) < 0.01
    # the same crops through 0 and 2 worker processes, and decoded on the device
    one = [bt["x_local"] for bt in StreamBatches(split, spec, 8, seed=3, workers=0, rank=0, world_size=1).iter_from(3)]
    two = [bt["x_local"] for bt in StreamBatches(split, spec, 8, seed=3, workers=2, rank=0, world_size=1).iter_from(3)]
    assert len(one) == len(two) > 0 and all(torch.equal(x, y) for x, y in zip(one, two))
    dev = StreamBatches(split, spec, 8, seed=3, rank=0, world_size=1, decode="device", device=torch.device("cpu"))
    on_device = next(dev.iter_from(3))
    assert on_device["x_local"].shape == one[0].shape and on_device["x_local"].dtype == torch.uint8
    assert (on_device["x_local"].float() - one[0].float()).abs().mean() < 6.0  # two resamplers, the same boxes


def test_the_contrastive_batch_appends_the_local_embeddings(fmnist_root):
    recipe = _validate(_memory(fmnist_root, {"number": 4}))
    dom = VisionDomain(recipe)
    batch = next(iter(dom.build_data(recipe).train))
    enc = dom.build_encoder(recipe)
    cb = dom.contrastive_batch(batch, enc, None, {"views"}, 2, 0, torch.Generator().manual_seed(0))
    assert cb.views.shape == (16, 2 + 4, 8)
    assert cb.global_views == 2 and cb.num_global == 2
    # the global views' embeddings are those of the global views alone
    alone = dom.contrastive_batch(batch, enc, None, {"views"}, 2, 0, torch.Generator().manual_seed(0))
    assert torch.equal(alone.views[:, :2], cb.views[:, :2])
