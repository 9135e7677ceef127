"""The streaming input pipeline: crops decoded at a reduced JPEG scale against a full decode,
seeded draws, rank shares under gloo covering every image once per epoch, bad files counted and
redrawn, the device's part of the view family, and decoding on the training device."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from PIL import Image

from domains.vision.augment import BatchAugment, preset
from domains.vision.image_folders import FolderSource
from domains.vision.streaming import CropSpec, StreamBatches, StreamedImages, crop_boxes, decode_views
from domains.vision.views import crop_rest
from toolkit.training.batches import DataStop


def _reference_crop(path: Path, box, size: int) -> np.ndarray:
    """torchvision's order, plainly: full-resolution decode (PIL), crop, antialiased bilinear resize."""
    with Image.open(path) as im:
        full = im.convert("RGB")
    return np.asarray(full.resize((size, size), Image.BILINEAR, box=tuple(box)))


def test_reduced_scale_decode_matches_the_full_decode(photo_folder):
    import simplejpeg

    from domains.vision.decode import pixel_box

    jpegs = sorted(photo_folder.glob("train/*/*.jpg"))[:6]
    spec = CropSpec(64, views=3, scale=(0.2, 1.0))
    errors, scales = [], []
    for i, path in enumerate(jpegs):
        views, _ = decode_views(str(path), spec, np.random.default_rng([0, 0, i, 0]))
        assert views.shape == (3, 3, 64, 64) and views.dtype == np.uint8
        with Image.open(path) as im:
            width, height = im.size
        boxes = crop_boxes(width, height, spec, np.random.default_rng([0, 0, i, 0]))
        need = max(64 / min(b[2] - b[0], b[3] - b[1]) for b in boxes)  # the scale every box allows,
        need = next((s for s in (0.125, 0.25, 0.5) if s >= need), 1.0)  # at a power of two
        dw, dh = simplejpeg.decode_jpeg_header(path.read_bytes())[1::-1]
        small = simplejpeg.decode_jpeg(
            path.read_bytes(), "RGB", min_height=int(np.ceil(dh * need)), min_width=int(np.ceil(dw * need))
        )
        fx, fy = small.shape[1] / width, small.shape[0] / height
        scales.append(fx)
        for v, box in zip(views, boxes):
            px = pixel_box(box, fx, fy)  # the region the reduced crop covers, at full resolution
            ref = _reference_crop(path, (px[0] / fx, px[1] / fy, px[2] / fx, px[3] / fy), 64)
            errors.append(np.abs(v.transpose(1, 2, 0).astype(np.float64) - ref).mean())
            assert abs(px[0] / fx - box[0]) <= 1 / fx and abs(px[3] / fy - box[3]) <= 1 / fy  # within a pixel
    assert min(scales) < 1  # some images were decoded at a reduced DCT scale
    # the same region through another low-pass filter (the DCT's N/8 scaling, then the resize, where
    # the reference resizes the full decode): a few grey levels apart on average, under 8 at worst
    assert max(errors) < 8.0 and np.mean(errors) < 3.0, (np.mean(errors), errors)


def test_draws_depend_on_epoch_and_position_only(photo_folder):
    split = FolderSource("imagefolder", str(photo_folder)).split("train")
    spec = CropSpec(32, views=2)
    a, b = StreamedImages(split, spec, seed=3), StreamedImages(split, spec, seed=3)
    assert np.array_equal(a[(1, 5, 7)]["x"], b[(1, 5, 7)]["x"])
    assert not np.array_equal(a[(1, 5, 7)]["x"], a[(2, 5, 7)]["x"])
    # the same keys through 0 and 2 worker processes give the same batches
    one = [bt["x"] for bt in StreamBatches(split, spec, 8, seed=3, workers=0, rank=0, world_size=1).iter_from(2)]
    two = [bt["x"] for bt in StreamBatches(split, spec, 8, seed=3, workers=2, rank=0, world_size=1).iter_from(2)]
    assert len(one) == len(two) == len(split) // 8 - 2
    assert all(torch.equal(x, y) for x, y in zip(one, two))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, folder: str, out: dict) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    split = FolderSource("imagefolder", folder).split("train")
    loader = StreamBatches(split, CropSpec(16, views=1), 8, seed=5, drop_last=True)  # rank from the group
    seen = {}
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        idx = [bt["index"].tolist() for bt in loader.iter_from(0)]
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, idx)
        seen[epoch] = gathered
    if rank == 0:
        out.update(seen=seen, batches=len(loader), sharded=loader.sharded)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_under_gloo_read_every_image_once_per_epoch(photo_folder):
    out = mp.Manager().dict()
    mp.spawn(_rank, args=(2, _free_port(), str(photo_folder), out), nprocs=2, join=True)
    n = len(FolderSource("imagefolder", str(photo_folder)).split("train"))
    assert out["sharded"] and out["batches"] == n // 8
    orders = []
    for epoch, (r0, r1) in out["seen"].items():
        assert all(len(b) == 4 for b in r0 + r1)  # each rank gets half of the global batch of 8
        flat = [i for b0, b1 in zip(r0, r1) for i in b0 + b1]
        assert sorted(flat) == list(range(n)), epoch  # every image exactly once
        orders.append(flat)
    assert orders[0] != orders[1]  # a new permutation each epoch


def _broken_folder(tmp_path: Path, photo_folder: Path) -> tuple[Path, list[Path]]:
    f = tmp_path / "f"
    shutil.copytree(photo_folder, f)
    jpegs = sorted(f.glob("train/*/*.jpg"))
    truncated, corrupt = jpegs[0], jpegs[7]
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 3])
    corrupt.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(3000))
    return f, [truncated, corrupt]


def test_corrupt_and_truncated_images_are_counted_and_redrawn(tmp_path, photo_folder, capfd):
    f, bad = _broken_folder(tmp_path, photo_folder)
    split = FolderSource("imagefolder", str(f)).split("train")
    loader = StreamBatches(
        split, CropSpec(16, views=2), 8, seed=1, workers=0, rank=0, world_size=1, bad_image_limit=0.2
    )
    batches = list(loader.iter_from(0))
    assert loader.metrics()["data_bad_images"] == loader.bad_total >= 2
    assert {Path(p) for p in loader.bad_paths} == set(bad)
    assert f"[ctk] unreadable image replaced by a seeded redraw: {bad[0]}" in capfd.readouterr().err
    names = {split.path(i) for b in batches for i in b["index"].tolist()}
    assert not names & {str(p) for p in bad}  # the redraws stand in for them...
    assert all(b["x"].shape == (8, 2, 3, 16, 16) for b in batches)  # ...and nothing is lost
    for b in batches:  # each redraw carries its own label
        assert b["y"].tolist() == [int(split.labels[i]) for i in b["index"].tolist()]
    # the same redraws on a second pass (seeded), and a vanished file counts the same way
    again = StreamBatches(split, CropSpec(16, views=2), 8, seed=1, rank=0, world_size=1, bad_image_limit=0.2)
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(batches, again.iter_from(0)))
    gone = sorted(f.glob("train/*/*.jpg"))[3]
    gone.unlink()
    third = StreamBatches(split, CropSpec(16, views=2), 8, seed=1, rank=0, world_size=1, bad_image_limit=0.2)
    list(third.iter_from(0))
    assert str(gone) in third.bad_paths and third.bad_total >= 3


def test_past_the_limit_the_data_stops_with_the_list(tmp_path, photo_folder):
    f, bad = _broken_folder(tmp_path, photo_folder)
    split = FolderSource("imagefolder", str(f)).split("train")
    loader = StreamBatches(split, CropSpec(16), 8, seed=1, rank=0, world_size=1, bad_image_limit=0.0)
    with pytest.raises(DataStop) as err:
        list(loader.iter_from(0))
    assert "bad_image_limit" in str(err.value) and any(str(p) in str(err.value) for p in bad)


def test_the_device_does_the_rest_of_the_view_family(photo_folder):
    """Once a worker cropped, the device's crop is the identity: with jitter, grayscale, blur and
    flip off, the views are the normalised crops; with flip on, flipped ones."""
    spec = preset("moco_v2", size=16, jitter_p=0.0, grayscale_p=0.0, blur_p=0.0, flip_p=0.0)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rest = BatchAugment(crop_rest(spec), mean, std)
    x = torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)
    out = rest(x, torch.Generator().manual_seed(0))
    assert torch.allclose(out, rest.normalize(x.float() / 255), atol=1e-5)
    flip = BatchAugment(
        crop_rest(preset("moco_v2", size=16, jitter_p=0.0, grayscale_p=0.0, blur_p=0.0, flip_p=1.0)), mean, std
    )
    assert torch.allclose(
        flip(x, torch.Generator().manual_seed(0)), rest.normalize(x.flip(-1).float() / 255), atol=1e-5
    )


def test_decoding_on_the_training_device_matches_the_workers(photo_folder):
    """decode: device reads the bytes in the workers and decodes with torchvision's decode_jpeg where
    the model trains (nvJPEG on CUDA; here the same code path on the CPU)."""
    split = FolderSource("imagefolder", str(photo_folder)).split("val")
    spec = CropSpec(32, views=2)
    cpu = next(StreamBatches(split, spec, 6, seed=2, rank=0, world_size=1).iter_from(0))
    dev = next(
        StreamBatches(
            split, spec, 6, seed=2, rank=0, world_size=1, decode="device", device=torch.device("cpu")
        ).iter_from(0)
    )
    assert dev["x"].shape == cpu["x"].shape and dev["x"].dtype == torch.uint8
    assert torch.equal(dev["index"], cpu["index"]) and torch.equal(dev["y"], cpu["y"])
    diff = (dev["x"].float() - cpu["x"].float()).abs().mean()
    assert diff < 6.0, diff  # two decoders and resamplers of the same crop boxes


def test_decode_auto_times_both_decoders_where_a_gpu_decoder_exists(photo_folder, monkeypatch):
    from domains.vision import streaming

    split = FolderSource("imagefolder", str(photo_folder)).split("val")
    spec = CropSpec(32, views=2)
    assert streaming.choose_decode("auto", torch.device("cpu"), split, spec, 2)[0] == "cpu"
    assert streaming.choose_decode("device", torch.device("cpu"))[0] == "device"
    rates = streaming.decode_rates(split, spec, torch.device("cpu"), workers=2, samples=8)
    assert set(rates) == {"cpu", "device"} and min(rates.values()) > 0
    for faster in ("cpu", "device"):  # on CUDA the measured faster one is chosen and the run says so
        monkeypatch.setattr(
            streaming,
            "decode_rates",
            lambda *a, f=faster, **k: {"cpu": 10.0, "device": 20.0} if f == "device" else {"cpu": 20.0, "device": 10.0},
        )
        choice, why = streaming.choose_decode("auto", torch.device("cuda"), split, spec, 2)
        assert choice == faster and "measured" in why


def test_diagnostics_leave_tolerance_out_when_no_class_is_seen_twice():
    """A small val split (one image per class) must not cost the run its result at the very end."""
    from types import SimpleNamespace

    from domains.vision.config import DiagnosticsConfig, EvaluationConfig
    from domains.vision.datasets import ImageSplit
    from domains.vision.diagnostics import geometry

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8, generator=g)
    data = SimpleNamespace(
        test=ImageSplit("val", images, torch.arange(6), 6),
        seed=0,
        augment=BatchAugment(preset("moco_v2", size=16, blur_kernel=3), (0.5,) * 3, (0.25,) * 3),
    )
    recipe = SimpleNamespace(
        evaluation=EvaluationConfig(diagnostics=DiagnosticsConfig(samples=6, entropy_batch=3, figures=False))
    )
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 8))
    with pytest.warns(UserWarning, match="tolerance left out"):
        metrics, _ = geometry(encoder, data, recipe)
    assert "tolerance" not in metrics and np.isfinite(metrics["alignment"])
    data.test = ImageSplit("val", images, torch.tensor([0, 0, 1, 1, 2, 2]), 3)
    assert np.isfinite(geometry(encoder, data, recipe)[0]["tolerance"])
