"""Shared fixtures of the vision tests: real data through the offline data provider."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def foolbox_dir() -> Path:
    from domains.vision.catalogue import locate

    return Path(locate("foolbox-samples"))


@pytest.fixture(scope="session")
def cifar_root(tmp_path_factory, foolbox_dir) -> tuple[Path, dict]:
    """CIFAR-10 / CIFAR-100 in their own file format, from foolbox's 20 real test images each
    (15 written as training images, 5 as test images)."""
    from domains.vision.fixtures import write_cifar_fixture

    root = tmp_path_factory.mktemp("cifar")
    written = write_cifar_fixture(foolbox_dir, root, num_train=15)
    return root, written


@pytest.fixture(scope="session")
def fmnist_root() -> Path:
    """The data root under which ``FashionMNIST/raw`` holds the decompressed IDX files."""
    from domains.vision.catalogue import locate

    return Path(locate("fashion-mnist")).parent


@pytest.fixture(scope="session")
def photo_folder(tmp_path_factory, foolbox_dir) -> Path:
    """A small real image folder (train/ and val/ by class): 6 packaged photos, each class a set
    of different crops of its photo re-encoded at ImageNet's typical sizes (JPEG, PNG, WebP)."""
    from domains.vision.fixtures import write_photo_folder

    root = tmp_path_factory.mktemp("photos")
    write_photo_folder(root, classes=6, train_per_class=8, val_per_class=3, foolbox_folder=foolbox_dir)
    return root
