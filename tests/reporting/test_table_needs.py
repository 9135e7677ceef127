"""ctk reproduce --list says what each table needs here: data (installed, fetchable offline, or
without an offline copy), a GPU or not, and the measured CPU wall time."""
from pathlib import Path

import yaml

from domains.packaged import load_catalogues
from toolkit.studies.needs import table_needs
from toolkit.studies.reproduce import load_table

ROOT = Path(__file__).resolve().parents[2]


def _table(tmp_path: Path, extra: dict) -> Path:
    recipe = yaml.safe_load((ROOT / "recipes" / "vision" / "quickstart.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    table = {"name": "t", "title": "T", "metrics": ["linear_top1"], "seeds": [0],
             "rows": [{"label": "fmnist", "recipe": "r.yaml"},
                      {"label": "cifar", "recipe": "r.yaml", "set": {"data.dataset": "cifar10"}},
                      {"label": "gpu", "recipe": "r.yaml", "set": {"device": "cuda"}}], **extra}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(table, sort_keys=False))
    return tmp_path / "t.yaml"


def test_needs_name_data_gpu_and_time(tmp_path):
    load_catalogues()
    empty = tmp_path / "no-data"
    empty.mkdir()
    needs = table_needs(load_table(_table(tmp_path, {"cpu_minutes": 3.5})), root=str(empty))
    assert needs.fetchable == ["fashion-mnist"] and needs.installed == []
    assert needs.unavailable == ["cifar10"]
    assert needs.gpu  # the row with device: cuda
    assert needs.cpu_minutes == 3.5
    line = needs.line()
    assert "ctk data fetch fashion-mnist" in line and "no offline copy: cifar10" in line
    assert "GPU" in line and "~3.5 min on 2 CPU cores" in line


def test_a_cpu_table_with_its_data_installed(tmp_path):
    load_catalogues()
    recipe = yaml.safe_load((ROOT / "recipes" / "vision" / "quickstart.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"name": "t", "title": "T", "metrics": ["m"], "seeds": [0],
                                                     "rows": [{"label": "a", "recipe": "r.yaml"}]}))
    from toolkit.data import store
    root = store.data_root()
    needs = table_needs(load_table(tmp_path / "t.yaml"))
    installed = store.is_installed("fashion-mnist", root)
    assert (needs.installed == ["fashion-mnist"]) == installed and (needs.fetchable == ["fashion-mnist"]) != installed
    assert not needs.gpu and needs.cpu_minutes is None and "not measured" in needs.line()
