"""Loaders on real fixtures: CIFAR-10/100 written in CIFAR's format from foolbox's real test
images, Fashion-MNIST from Debian's original IDX files; class-imbalanced subsets."""

from __future__ import annotations

import gzip
import math
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from domains.vision.datasets import DatasetMissing, imbalanced_indices, load_split
from domains.vision.fixtures import find_foolbox_pngs


def _png_tensor(path) -> torch.Tensor:
    arr = np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_cifar_loader_reads_the_real_images(cifar_root, foolbox_dir, dataset):
    root, _ = cifar_root
    pngs = find_foolbox_pngs(foolbox_dir, dataset)
    train = load_split(dataset, "train", root, verify=False)
    test = load_split(dataset, "test", root, verify=False)
    assert train.images.shape == (15, 3, 32, 32) and train.images.dtype == torch.uint8
    assert test.images.shape == (5, 3, 32, 32)
    assert train.num_classes == (10 if dataset == "cifar10" else 100)
    both_images = torch.cat([train.images, test.images])
    both_labels = torch.cat([train.labels, test.labels]).tolist()
    for k, (pos, label, path) in enumerate(pngs):
        assert pos == k
        assert both_labels[k] == label  # the label in foolbox's file name
        assert torch.equal(both_images[k], _png_tensor(path))


def test_cifar_md5_check_is_kept_for_real_data(cifar_root):
    root, _ = cifar_root
    with pytest.raises(DatasetMissing, match="cifar-10-batches-py"):
        load_split("cifar10", "train", root)  # the fixture's files are not the real ones


def test_missing_dataset_says_which_where_and_how(tmp_path):
    with pytest.raises(DatasetMissing) as err:
        load_split("stl10", "train+unlabeled", tmp_path)
    msg = str(err.value)
    assert "'stl10'" in msg and str(tmp_path / "stl10_binary") in msg and "download" in msg
    with pytest.raises(DatasetMissing, match="cifar-100-python"):
        load_split("cifar100", "test", tmp_path)


def test_bad_arguments_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_split("svhn", "train", tmp_path)
    with pytest.raises(ValueError, match="split of cifar10"):
        load_split("cifar10", "unlabeled", tmp_path)


def _read_idx(path) -> np.ndarray:
    """Plain IDX reader (LeCun's format): magic, dims, big-endian sizes, then uint8 data."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    _, _, dtype, ndim = struct.unpack(">BBBB", raw[:4])
    assert dtype == 0x08
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def test_fashion_mnist_matches_the_idx_files(fmnist_root):
    test = load_split("fashion-mnist", "test", fmnist_root)
    assert test.images.shape == (10000, 1, 28, 28) and test.images.dtype == torch.uint8
    raw = fmnist_root / "FashionMNIST" / "raw"
    images = _read_idx(raw / "t10k-images-idx3-ubyte")
    labels = _read_idx(raw / "t10k-labels-idx1-ubyte")
    assert torch.equal(test.images[:, 0], torch.from_numpy(images.copy()))
    assert test.labels.tolist() == labels.tolist()
    assert torch.bincount(test.labels).tolist() == [1000] * 10  # Fashion-MNIST is balanced


def test_imbalanced_counts_follow_the_rules():
    labels = torch.arange(10).repeat_interleave(100)  # 100 images per class
    lin = imbalanced_indices(labels, "linear", 10, seed=3)
    counts = torch.bincount(labels[lin], minlength=10).tolist()
    assert counts == [int(l / 10 * 100) for l in range(1, 11)]
    exp = imbalanced_indices(labels, "exponential", 10, seed=3)
    counts = torch.bincount(labels[exp], minlength=10).tolist()
    assert counts == [int(math.exp(l) / math.exp(10) * 100) for l in range(1, 11)]
    assert counts[-1] == 100 and counts[-2] == 36 and counts[0] == 0


def test_imbalanced_subset_is_fixed_by_its_seed():
    labels = torch.randint(0, 10, (2000,), generator=torch.Generator().manual_seed(0))
    a = imbalanced_indices(labels, "linear", 10, seed=2021)
    b = imbalanced_indices(labels, "linear", 10, seed=2021)
    c = imbalanced_indices(labels, "linear", 10, seed=7)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len(set(a.tolist())) == a.numel()  # no duplicates
    with pytest.raises(ValueError, match="imbalance rule"):
        imbalanced_indices(labels, "step")
