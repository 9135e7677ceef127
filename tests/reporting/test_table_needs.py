"""ctk reproduce --list says what each table needs here: data (installed, fetchable offline, or
without an offline copy), a GPU or not, and the measured CPU wall time."""

from pathlib import Path

import yaml

from domains import installed
from toolkit.studies.needs import table_needs
from toolkit.studies.reproduce import load_table

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = installed.catalogue()  # what commands.table_needs hands in: the installed domains' datasets


def _table(tmp_path: Path, extra: dict) -> Path:
    recipe = yaml.safe_load((ROOT / "recipes" / "vision" / "quickstart.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    table = {
        "name": "t",
        "title": "T",
        "metrics": ["linear_top1"],
        "seeds": [0],
        "rows": [
            {"label": "fmnist", "recipe": "r.yaml"},
            {"label": "cifar", "recipe": "r.yaml", "set": {"data.dataset": "cifar10"}},
            {"label": "gpu", "recipe": "r.yaml", "set": {"device": "cuda"}},
        ],
        **extra,
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(table, sort_keys=False))
    return tmp_path / "t.yaml"


def test_needs_name_data_gpu_and_time(tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    needs = table_needs(load_table(_table(tmp_path, {"cpu_minutes": 3.5})), CATALOGUE, root=str(empty))
    assert needs.fetchable == ["fashion-mnist"] and needs.installed == []
    assert needs.unavailable == ["cifar10"]
    assert needs.gpu  # the row with device: cuda
    assert needs.cpu_minutes == 3.5
    line = needs.line()
    assert "ctk data fetch fashion-mnist" in line and "no offline copy: cifar10" in line
    assert "GPU" in line and "~3.5 min on 2 CPU cores" in line


def test_a_cpu_table_with_its_data_installed(tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "vision" / "quickstart.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "t.yaml").write_text(
        yaml.safe_dump(
            {"name": "t", "title": "T", "metrics": ["m"], "seeds": [0], "rows": [{"label": "a", "recipe": "r.yaml"}]}
        )
    )
    from toolkit.data import root as data_folder

    root = data_folder.data_root()
    needs = table_needs(load_table(tmp_path / "t.yaml"), CATALOGUE)
    here = data_folder.is_installed(CATALOGUE, "fashion-mnist", root)
    assert (needs.installed == ["fashion-mnist"]) == here and (needs.fetchable == ["fashion-mnist"]) != here
    assert not needs.gpu and needs.cpu_minutes is None and "not measured" in needs.line()


def _imagenet_table(tmp_path: Path, extra: dict) -> Path:
    rows = [
        {"label": "in100", "recipe": str(ROOT / "recipes" / "vision" / "imagenet100" / "cacr.yaml")},
        {
            "label": "in1k",
            "recipe": str(ROOT / "recipes" / "vision" / "imagenet100" / "cacr.yaml"),
            "set": {"data.dataset": "imagenet"},
        },
    ]
    table = {"name": "t", "title": "T", "metrics": ["linear_top1"], "seeds": [0], "gpu": True, "rows": rows, **extra}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(table, sort_keys=False))
    return tmp_path / "t.yaml"


def test_imagenet_folders_are_placed_not_fetched(tmp_path):
    """ImageNet and its subsets are on no package registry: the line says where to place them
    (imagenet100 may also be read from a full imagenet folder), and the GPU-hours stay 'not
    measured' until the table records them."""
    root = tmp_path / "root"
    root.mkdir()
    needs = table_needs(load_table(_imagenet_table(tmp_path, {})), CATALOGUE, root=str(root))
    assert needs.installed == [] and needs.fetchable == [] and needs.unavailable == []
    assert needs.to_place == [
        f"imagenet100 at {root / 'imagenet100'} or {root / 'imagenet'}",
        f"imagenet at {root / 'imagenet'}",
    ]
    line = needs.line()
    assert line.startswith("place imagenet100 at ") and "docs/data.md" in line
    assert "GPU" in line and "GPU-hours not measured" in line and "CPU cores" not in line
    for split in ("train", "val"):
        (root / "imagenet" / split).mkdir(parents=True)
    needs = table_needs(
        load_table(_imagenet_table(tmp_path, {"gpu_hours": 12.5, "gpu_hours_on": "1x H100"})), CATALOGUE, root=str(root)
    )
    assert needs.to_place == []
    assert needs.installed == [f"imagenet100 at {root / 'imagenet'}", f"imagenet at {root / 'imagenet'}"]
    assert "~12.5 GPU-hours on 1x H100" in needs.line()


def test_placed_folders_are_where_the_vision_loader_looks(tmp_path):
    """The placed datasets the vision domain declares (domains/vision/catalogue.py) name the
    folders that domains.vision.dataset_table.dataset_path reads, with and without the folders present."""
    from domains.vision.dataset_table import dataset_path
    from toolkit.studies.needs import placed_folder

    PLACED = CATALOGUE.placed
    assert set(PLACED) == {"imagenet", "imagenet100", "tiny-imagenet"}
    for present in ([], ["imagenet"], ["imagenet100", "imagenet"], ["tiny-imagenet-200"]):
        root = tmp_path / ("r-" + "-".join(present))
        for name in present:
            (root / name).mkdir(parents=True)
        root.mkdir(exist_ok=True)
        for name in PLACED:
            assert placed_folder(CATALOGUE, name, {}, str(root)) == dataset_path(name, None, str(root)), (name, present)
        assert (
            placed_folder(CATALOGUE, "imagenet", {"path": str(tmp_path / "elsewhere")}, str(root))
            == tmp_path / "elsewhere"
        )
