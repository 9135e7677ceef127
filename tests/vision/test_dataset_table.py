"""The table of vision datasets (issue 46 item 2): every shipped dataset is one entry, whatever
reads a dataset reads the table, and a dataset added in one place (a monkeypatched entry) is
accepted by the recipe and built by the domain, in memory and streamed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torchvision.datasets as tvd
import yaml
from pydantic import ValidationError

from domains.vision import VisionDomain, dataset_table
from domains.vision.augment import PRESETS
from domains.vision.config import DataConfig
from domains.vision.dataset_table import DEFAULT_FOLDERS, IMAGENET_NORMALIZATION, VisionDataset
from domains.vision.image_folders import FolderLayout
from domains.vision.streaming import StreamBatches
from domains.vision.views import training_views
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.studies.reproduce import load_table

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes" / "vision"


def _validate(path: Path, overrides: list[str]) -> rc.Recipe:
    raw = rc.apply_overrides(rc.load_yaml(path), overrides, str(path))
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, str(path), overrides)


def _shipped() -> set[str]:
    """Every dataset a shipped vision recipe or table row names."""
    names = set()
    for path in RECIPES.rglob("*.yaml"):
        if "tables" in path.parts:
            for row in load_table(path).rows:
                names.add(_validate(row.recipe, row.overrides).data.dataset)
        else:
            names.add((yaml.safe_load(path.read_text()).get("data") or {}).get("dataset", "fashion-mnist"))
    return names


def test_every_shipped_dataset_is_one_complete_entry():
    shipped = _shipped()
    assert shipped <= set(dataset_table.DATASETS), shipped - set(dataset_table.DATASETS)
    assert {"cifar10", "cifar100", "stl10", "imagenet", "imagenet100", "tiny-imagenet"} <= shipped
    for name, e in dataset_table.DATASETS.items():
        assert e.name == name and e.storage in ("memory", "stream") and e.preset in PRESETS, name
        mean, std = e.normalization
        assert len(mean) == len(std) in (1, 3) and min(std) > 0, name
        assert e.how_to_get, name
        if e.storage == "memory":
            assert hasattr(tvd, str(e.layout)) and e.looked_for and e.num_classes, name
        else:
            assert isinstance(e.layout, FolderLayout) and "{path}" in e.how_to_get, name
    assert DEFAULT_FOLDERS == {
        "imagenet": ("imagenet",),
        "imagenet100": ("imagenet100", "imagenet"),
        "tiny-imagenet": ("tiny-imagenet-200",),
    }


def test_the_recipes_choices_are_the_tables_with_pydantics_words():
    with pytest.raises(ValidationError) as err:
        DataConfig(dataset="imagenett")
    choices = ", ".join(repr(n) for n in list(dataset_table.DATASETS)[:-1])
    expected = f"Input should be {choices} or {list(dataset_table.DATASETS)[-1]!r}"
    assert err.value.errors()[0]["msg"] == expected and err.value.errors()[0]["type"] == "literal_error"
    assert expected == (
        "Input should be 'cifar10', 'cifar100', 'stl10', 'mnist', 'fashion-mnist', 'imagefolder', "
        "'imagenet', 'imagenet100' or 'tiny-imagenet'"
    )
    with pytest.raises(ValidationError, match="data.path applies to imagefolder, imagenet, imagenet100, tiny-imagenet"):
        DataConfig(dataset="cifar10", path="/x")
    with pytest.raises(ValidationError, match="train_split 'unlabeled' exists only for stl10"):
        DataConfig(dataset="cifar10", train_split="unlabeled")
    with pytest.raises(ValidationError, match="dataset 'imagefolder' needs data.path"):
        DataConfig(dataset="imagefolder")


def test_a_dataset_added_in_one_place_is_accepted_and_built(monkeypatch, tmp_path, photo_folder, fmnist_root):
    """One entry each: a folder dataset read from its default folder under the data root with its
    own default views, and an in-memory one through a torchvision class."""
    mine = VisionDataset(
        "my-photos",
        "stream",
        FolderLayout(),
        IMAGENET_NORMALIZATION,
        "simclr_tiny",
        "put them under {path}",
        folders=("my-photos",),
    )
    grey = VisionDataset(
        "fashion-again", "memory", "FashionMNIST", ((0.5,), (0.5,)), "grey", "copy it", "{root}/x", num_classes=10
    )
    monkeypatch.setitem(dataset_table.DATASETS, "my-photos", mine)
    monkeypatch.setitem(dataset_table.DATASETS, "fashion-again", grey)
    root = tmp_path / "root"
    shutil.copytree(photo_folder, root / "my-photos")
    recipe = _validate(
        RECIPES / "imagefolder.yaml",
        [
            "data.dataset=my-photos",
            "data.path=null",
            f"data.root={root}",
            "data.augment={}",
            "data.loader.workers=0",
            "evaluation.monitor.train_samples=8",
        ],
    )
    domain = VisionDomain(recipe)
    assert domain.check_data(recipe) == []
    bundle = domain.build_data(recipe)
    assert isinstance(bundle.train, StreamBatches) and bundle.train.split.root == str(root / "my-photos")
    assert bundle.train.spec.size == PRESETS["simclr_tiny"].size and bundle.train.spec.scale == (0.08, 1.0)
    assert bundle.eval.num_classes == 6 and bundle.num_instances == 48
    bundle.train.close()
    elsewhere = _validate(
        RECIPES / "imagefolder.yaml", ["data.dataset=my-photos", "data.path=null", f"data.root={tmp_path / 'none'}"]
    )
    (problem,) = domain.check_data(elsewhere)
    assert problem == (
        "data.dataset",
        f"dataset 'my-photos' not found: {tmp_path / 'none' / 'my-photos'} is not a folder. "
        f"To get it: put them under {tmp_path / 'none' / 'my-photos'}",
    )

    plain = _validate(
        RECIPES / "quickstart.yaml",
        ["data.dataset=fashion-again", f"data.root={fmnist_root}", "data.train_subset=200", "data.augment.preset=null"],
    )
    dom = VisionDomain(plain)
    assert dom.check_data(plain) == []
    data = dom.build_data(plain)
    assert data.num_instances == 200 and training_views(plain).device.mean == (0.5,)
    assert dom.augment.spec.size == 20 and dom.augment.spec == PRESETS["grey"].__class__(
        **{**vars(PRESETS["grey"]), "size": 20}
    )
