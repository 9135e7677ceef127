"""Folder datasets read from disk: the three ImageNet layouts, ImageFolder, Tiny ImageNet, and the
refusals at load (every problem at once, before a run exists)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
from domains.vision import image_folders
from domains.vision.dataset_table import folder_source
from domains.vision.image_folders import FolderProblem

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "vision" / "imagefolder.yaml"


def _photo(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _jpegs(photo_folder: Path) -> list[Path]:
    return sorted(photo_folder.glob("*/*/*.jpg"))


def _imagenet(root: Path, photo_folder: Path, wnids: list[str], per_class: int = 2, flat_val: bool = False) -> dict:
    """An ILSVRC-2012 layout from real photos: train/<wnid>/*.JPEG, val/ by wnid or flat."""
    pics = _jpegs(photo_folder)
    truth = {}
    k = 0
    for w in wnids:
        for i in range(per_class):
            _photo(pics[k % len(pics)], root / "train" / w / f"{w}_{i}.JPEG")
            k += 1
        name = f"ILSVRC2012_val_{len(truth) + 1:08d}.JPEG"
        _photo(pics[k % len(pics)], root / "val" / name if flat_val else root / "val" / w / name)
        truth[name] = w
        k += 1
    return truth


def test_imagefolder_lists_every_image_with_its_class(photo_folder):
    train = folder_source("imagefolder", str(photo_folder)).split("train")
    val = folder_source("imagefolder", str(photo_folder)).split("val")
    classes = sorted(p.name for p in (photo_folder / "train").iterdir())
    assert train.classes == tuple(classes) == val.classes
    expect = sorted((p.parent.name, p.name) for p in (photo_folder / "train").glob("*/*"))
    got = sorted((train.classes[y], Path(p).name) for p, y in zip(train.paths, train.labels))
    assert got == expect  # JPEG, PNG and WebP all listed, each under its own class
    assert {Path(p).suffix for p in train.paths} == {".jpg", ".png", ".webp"}
    assert all(os.path.isfile(train.path(i)) for i in range(len(train)))
    # a class list restricts and orders the classes, and may be a file
    listing = photo_folder.parent / "classes.txt"
    listing.write_text(f"# two of them\n{classes[3]}\n{classes[1]}\n")
    some = folder_source("imagefolder", str(photo_folder), classes=str(listing)).split("val")
    assert some.classes == (classes[3], classes[1])
    assert sorted(set(some.labels.tolist())) == [0, 1] and len(some) == 6


@pytest.mark.parametrize("flat", [False, True], ids=["val-by-wnid", "val-flat-with-labels"])
def test_imagenet_layouts(tmp_path, photo_folder, flat):
    wnids = ["n01440764", "n01443537", "n01484850"]
    truth = _imagenet(tmp_path, photo_folder, wnids, flat_val=flat)
    if flat:  # a 'filename label' file beside val/ is found without being named
        (tmp_path / "val_labels.txt").write_text("".join(f"{k} {v}\n" for k, v in truth.items()))
    train = folder_source("imagenet", str(tmp_path)).split("train")
    val = folder_source("imagenet", str(tmp_path)).split("val")
    assert train.classes == tuple(wnids) and len(train) == 6
    assert [train.classes[y] for y in train.labels] == [w for w in wnids for _ in range(2)]
    assert sorted((Path(p).name, val.classes[y]) for p, y in zip(val.paths, val.labels)) == sorted(truth.items())


def test_imagenet_flat_val_reads_kaggle_labels(tmp_path, photo_folder):
    wnids = ["n01440764", "n01443537"]
    truth = _imagenet(tmp_path, photo_folder, wnids, flat_val=True)
    csv = tmp_path / "LOC_val_solution.csv"
    csv.write_text(
        "ImageId,PredictionString\n" + "".join(f"{k.rsplit('.', 1)[0]},{v} 10 20 30 40 \n" for k, v in truth.items())
    )
    val = folder_source("imagenet", str(tmp_path), val_labels=str(csv)).split("val")
    assert sorted((Path(p).name, val.classes[y]) for p, y in zip(val.paths, val.labels)) == sorted(truth.items())


def test_imagenet100_keeps_the_hundred_classes_of_a_full_folder(tmp_path, photo_folder):
    hundred = list(image_folders.imagenet100_classes())
    others = ["n01440764", "n01443537"]  # two classes outside ImageNet-100
    _imagenet(tmp_path, photo_folder, hundred + others, per_class=1)
    train = folder_source("imagenet100", str(tmp_path)).split("train")
    val = folder_source("imagenet100", str(tmp_path)).split("val")
    assert train.classes == tuple(hundred) and len(train) == 100 and len(val) == 100
    assert not set(others) & {Path(p).parent.name for p in train.paths}


def test_tiny_imagenet_layout(tmp_path, photo_folder):
    wnids = ["n01443537", "n01629819"]
    pics = _jpegs(photo_folder)
    (tmp_path / "wnids.txt").write_text("\n".join(wnids) + "\n")
    lines = []
    for i, w in enumerate(wnids):
        for j in range(3):
            _photo(pics[i * 3 + j], tmp_path / "train" / w / "images" / f"{w}_{j}.JPEG")
        _photo(pics[10 + i], tmp_path / "val" / "images" / f"val_{i}.JPEG")
        lines.append(f"val_{i}.JPEG\t{w}\t0\t0\t63\t63")
    (tmp_path / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    train = folder_source("tiny-imagenet", str(tmp_path)).split("train")
    val = folder_source("tiny-imagenet", str(tmp_path)).split("val")
    assert train.classes == tuple(wnids) and len(train) == 6
    assert [(Path(p).name, val.classes[y]) for p, y in zip(val.paths, val.labels)] == [
        ("val_0.JPEG", wnids[0]),
        ("val_1.JPEG", wnids[1]),
    ]
    assert all(os.path.isfile(val.path(i)) for i in range(len(val)))


def test_every_problem_of_a_folder_is_listed_at_once(tmp_path, photo_folder):
    shutil.copytree(photo_folder, tmp_path / "f")
    f = tmp_path / "f"
    classes = sorted(p.name for p in (f / "train").iterdir())
    for p in (f / "train" / classes[0]).iterdir():  # an empty class
        p.unlink()
    shutil.rmtree(f / "val" / classes[1])  # a class missing from val
    (f / "val" / "stray").mkdir()  # a class only in val
    shutil.copyfile(_jpegs(photo_folder)[0], f / "val" / "stray" / "x.jpg")
    wanted = [*classes, "n99999999"]  # a listed class with no folder
    problems = folder_source("imagefolder", str(f), classes=wanted).problems()
    text = "\n".join(problems)
    assert f"class {classes[0]!r} of train has no image" in text
    assert "only in val: stray" in text and f"only in train: {classes[1]}" in text
    assert "1 of the 7 classes have no folder" in text and "n99999999" in text
    with pytest.raises(FolderProblem) as err:
        folder_source("imagefolder", str(f), classes=wanted).split("train")
    assert len(err.value.problems) == len(problems) >= 3


def test_an_unreadable_class_folder_is_a_problem(tmp_path, photo_folder, monkeypatch):
    shutil.copytree(photo_folder, tmp_path / "f")
    f = tmp_path / "f"
    bad = f / "train" / sorted(p.name for p in (f / "train").iterdir())[1]
    real = os.scandir

    def scandir(path):  # root ignores file modes, so the permission error is raised here
        if Path(path) == bad:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(image_folders.os, "scandir", scandir)
    problems = folder_source("imagefolder", str(f)).problems()
    assert any(str(bad) in p and "cannot be read (Permission denied)" in p for p in problems), problems


def test_a_missing_or_broken_folder_refuses_the_run_before_anything_exists(tmp_path, photo_folder, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    missing = tmp_path / "nowhere"
    res = CliRunner().invoke(cli.main, ["run", str(RECIPE), "--set", f"data.path={missing}", "--quiet"])
    assert res.exit_code == 2, res.output
    assert str(missing) in res.output and "train" in res.output and "docs/data.md" in res.output
    shutil.copytree(photo_folder, tmp_path / "f")
    for p in (tmp_path / "f" / "val").iterdir():
        if p.name.startswith("china"):
            shutil.rmtree(p)
    (tmp_path / "f" / "train" / "extra").mkdir()
    res = CliRunner().invoke(cli.main, ["run", str(RECIPE), "--set", f"data.path={tmp_path / 'f'}", "--quiet"])
    assert res.exit_code == 2, res.output
    assert "class 'extra' of train has no image" in res.output and "only in train: china" in res.output
    assert not (tmp_path / "checkpoints").exists()
    if (tmp_path / "mlflow.db").exists():
        from toolkit.tracking.store import client_for

        client = client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.get_experiment_by_name("imagefolder")
        assert exp is None or not client.search_runs([exp.experiment_id])
