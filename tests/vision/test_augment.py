"""Batched augmentations: shapes, per-sample randomness, seeding, and agreement with
torchvision's per-image transforms (the reference) sample by sample."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torchvision.transforms.functional as TF

from domains.vision import augment as A
from domains.vision.augment import AugmentSpec, BatchAugment, preset

IDENTITY = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def _images(n=8, c=3, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, size, size), generator=g, dtype=torch.uint8)


def test_output_shape_dtype_and_normalisation():
    aug = BatchAugment(preset("cacr_cifar"), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    out = aug(_images(), torch.Generator().manual_seed(0))
    assert out.shape == (8, 3, 32, 32) and out.dtype == torch.float32
    grey = BatchAugment(preset("grey"), (0.286,), (0.353,))
    assert grey(_images(5, 1, 28)).shape == (5, 1, 28, 28)
    stl = BatchAugment(preset("cacr_stl10"), *IDENTITY)
    assert stl(_images(3, 3, 96)).shape == (3, 3, 64, 64)


def test_natural_view_is_the_normalised_image():
    x = _images(4)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    nat = BatchAugment(preset("cacr_cifar"), mean, std).natural(x)
    for c in range(3):
        ref = (x[:, c].float() / 255 - mean[c]) / std[c]
        assert torch.allclose(nat[:, c], ref, atol=1e-6)


def test_each_sample_gets_its_own_crop():
    aug = BatchAugment(preset("cacr_cifar"), *IDENTITY)
    p = aug.sample(64, 32, 32, torch.Generator().manual_seed(1))
    assert len({tuple(b.tolist()) for b in p.boxes}) > 32  # boxes differ across the batch
    same = _images(1).expand(16, 3, 32, 32)  # one image repeated: views must still differ
    out = aug(same, torch.Generator().manual_seed(2))
    assert not torch.allclose(out[0], out[1])


def test_same_seed_same_views_other_seed_other_views():
    aug = BatchAugment(preset("moco_v2", size=32), *IDENTITY)
    x = _images(6)
    a = aug(x, torch.Generator().manual_seed(5))
    b = aug(x, torch.Generator().manual_seed(5))
    c = aug(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.allclose(a, c)


def test_crop_boxes_follow_random_resized_crop():
    spec = preset("cacr_cifar")
    p = BatchAugment(spec, *IDENTITY).sample(4000, 32, 32, torch.Generator().manual_seed(3))
    i, j, h, w = p.boxes.unbind(1)
    assert bool(((i >= 0) & (j >= 0) & (i + h <= 32) & (j + w <= 32)).all())
    area = h * w / 1024.0
    assert area.min() >= 0.2 * 0.8 and area.max() <= 1.0  # scale (0.2, 1), up to rounding
    aspect = w / h
    assert aspect.min() >= 3 / 4 * 0.8 and aspect.max() <= 4 / 3 * 1.25
    flips = (p.theta[:, 0, 0] < 0).float().mean()
    assert abs(float(flips) - 0.5) < 0.05


def test_crop_and_flip_match_torchvision_per_sample():
    spec = preset("cacr_cifar", jitter_p=0.0, grayscale_p=0.0)
    aug = BatchAugment(spec, *IDENTITY)
    x = _images(12)
    p = aug.sample(12, 32, 32, torch.Generator().manual_seed(4))
    out = aug.apply(x, p)
    for n in range(12):
        i, j, h, w = (int(v) for v in p.boxes[n])
        ref = TF.resized_crop(x[n].float() / 255, i, j, h, w, [32, 32], antialias=False)
        if p.theta[n, 0, 0] < 0:
            ref = TF.hflip(ref)
        # interior pixels agree exactly; on the border torchvision clamps to the crop while the
        # batched grid reads the true neighbouring pixels
        assert torch.allclose(out[n, :, 2:-2, 2:-2], ref[:, 2:-2, 2:-2], atol=1e-5)


@pytest.mark.parametrize(
    "k,tv", [(0, TF.adjust_brightness), (1, TF.adjust_contrast), (2, TF.adjust_saturation), (3, TF.adjust_hue)]
)
def test_each_jitter_operation_matches_torchvision(k, tv):
    img = torch.rand(5, 3, 12, 12, generator=torch.Generator().manual_seed(k))
    factors = torch.tensor([0.6, 0.9, 1.0, 1.2, 1.4]) if k < 3 else torch.tensor([-0.4, -0.1, 0.0, 0.2, 0.45])
    out = A._OPS[k](img.clone(), factors)
    for n in range(5):
        assert torch.allclose(out[n], tv(img[n], float(factors[n])), atol=1e-5)


def test_jitter_applies_operations_in_each_samples_order():
    img = torch.rand(6, 3, 10, 10, generator=torch.Generator().manual_seed(9))
    factors = torch.tensor([[1.3, 0.7, 1.4, 0.1]]).repeat(6, 1)
    orders = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1], [0, 2, 3, 1], [3, 0, 1, 2]])
    out = A._jitter(img, factors, orders)
    tvs = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    for n in range(6):
        ref = img[n]
        for op in orders[n].tolist():
            ref = tvs[op](ref, float(factors[n, op]))
        assert torch.allclose(out[n], ref, atol=1e-5)


def test_grayscale_and_blur_match_torchvision():
    img = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    gray = A._gray(img).expand_as(img)
    for n in range(4):
        assert torch.allclose(gray[n], TF.rgb_to_grayscale(img[n], 3), atol=1e-6)
    sigma = torch.tensor([0.5, 1.0, 2.0, 0.0])
    out = A._blur(img, sigma, 5)
    for n in range(3):
        assert torch.allclose(out[n], TF.gaussian_blur(img[n], [5, 5], [float(sigma[n])] * 2), atol=1e-5)
    assert torch.allclose(out[3], img[3])  # sigma 0: no blur


def test_grey_images_ignore_colour_operations():
    """One-channel images: brightness and contrast apply, saturation, hue and grayscale are
    identities, as torchvision's functional ops define them for 1-channel tensors."""
    aug = BatchAugment(preset("cacr_cifar", grayscale_p=1.0), (0.0,), (1.0,))
    x = _images(4, 1, 32)
    p = aug.sample(4, 32, 32, torch.Generator().manual_seed(0))
    assert bool(p.gray.all()) and bool((p.jitter[:, 2:] != torch.tensor([1.0, 0.0])).all())
    out = aug.apply(x, p)
    assert out.shape == (4, 1, 32, 32)
    neutral = torch.tensor([1.0, 1.0, 1.0, 0.0]).repeat(4, 1)
    cropped = aug.apply(
        x, dataclasses.replace(p, jitter=neutral, gray=torch.zeros(4, dtype=torch.bool), sigma=torch.zeros(4))
    )
    tvs = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    for n in range(4):
        ref = cropped[n]
        for op in p.order[n].tolist():
            ref = tvs[op](ref, float(p.jitter[n, op]))
        assert torch.allclose(out[n], ref, atol=1e-5)


def test_bad_specs_raise_naming_the_field():
    with pytest.raises(ValueError, match="scale"):
        AugmentSpec(32, scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="grayscale_p"):
        AugmentSpec(32, grayscale_p=1.5)
    with pytest.raises(ValueError, match="preset"):
        preset("imagenet_fancy")
    with pytest.raises(ValueError, match="blur_kernel"):
        AugmentSpec(32, blur_kernel=4)
