"""Images/s of the streaming input pipeline alone, against the physical limit on the same files.

    python bench/vision_input.py [--images 240] [--size 224] [--views 1] [--seconds 8]

Files: real photos at ImageNet's typical sizes (scikit-learn's two sample photos and foolbox's 20
ImageNet photos, each cropped and re-encoded as JPEGs of 333-640 px a side, quality 70-95;
``domains.vision.fixtures.write_photo_folder``), written once to a temporary folder.

Printed, each measured in this run:

* ``full decode``: libjpeg-turbo decoding every file at full resolution (PIL ``convert("RGB")``)
  in one process: the physical limit of a decoder that reads every pixel;
* ``pipeline, 1 worker`` / ``pipeline, N workers``: ``StreamBatches`` (DataLoader workers: header,
  crop boxes, DCT-scaled decode, antialiased resize to ``size``, collate), batches of 64 read by
  the main process as a training loop would;
* the ratios the targets are about: pipeline (1 worker) / full decode (>= 1.5x) and N workers /
  1 worker (>= 1.8x with 2 cores).

Run it alone: another busy process on the cores makes every figure meaningless.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from domains.vision.fixtures import packaged_photos, write_photo_folder  # noqa: E402
from domains.vision.image_folders import FolderSource  # noqa: E402
from domains.vision.streaming import CropSpec, StreamBatches, auto_workers  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402


def full_decode_rate(paths: list[str], seconds: float) -> float:
    from PIL import Image

    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for p in paths:
            with Image.open(p) as im:
                im.convert("RGB")
            n += 1
    return n / (time.perf_counter() - start)


def stage_times(paths: list[str], spec: CropSpec, repeats: int = 3) -> dict[str, float]:
    """Milliseconds per image of each stage of a worker, in this process, on the same files."""
    import io

    import numpy as np
    import simplejpeg
    from PIL import Image

    from domains.vision.decode import crop_boxes, decode_views

    blobs = [open(p, "rb").read() for p in paths]
    sizes = [Image.open(io.BytesIO(b)).size for b in blobs]
    boxes = [crop_boxes(w, h, spec, np.random.default_rng(i))[0] for i, (w, h) in enumerate(sizes)]
    full = [simplejpeg.decode_jpeg(b, "RGB") for b in blobs]

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for i in range(len(blobs)):
                fn(i)
            best = min(best, (time.perf_counter() - start) / len(blobs) * 1000)
        return best

    def scaled(i: int) -> None:
        w, h = sizes[i]
        side = min(boxes[i][2] - boxes[i][0], boxes[i][3] - boxes[i][1])
        need = next((s for s in (0.125, 0.25, 0.5) if s >= spec.size / side), 1.0)
        simplejpeg.decode_jpeg(
            blobs[i],
            "RGB",
            fastdct=True,
            fastupsample=True,
            min_height=int(np.ceil(h * need)),
            min_width=int(np.ceil(w * need)),
        )

    images = [Image.fromarray(a) for a in full]
    return {
        "PIL decode, full resolution": timed(lambda i: Image.open(io.BytesIO(blobs[i])).convert("RGB")),
        "libjpeg-turbo decode, full resolution (simplejpeg)": timed(lambda i: simplejpeg.decode_jpeg(blobs[i], "RGB")),
        "libjpeg-turbo decode at the crop's 1/2^k DCT scale, fast IDCT": timed(scaled),
        f"crop + antialiased resize to {spec.size} (PIL)": timed(
            lambda i: images[i].resize((spec.size, spec.size), Image.BILINEAR, box=boxes[i])
        ),
        f"crop + antialiased resize to {spec.size} (torch, uint8, what the workers use)": timed(
            lambda i: _torch_resize(full[i], boxes[i], spec.size)
        ),
        "whole worker item (decode_views, file read included)": timed(
            lambda i: decode_views(paths[i], spec, np.random.default_rng(i))
        ),
    }


def _torch_resize(arr, box, size: int):
    from domains.vision.decode import pixel_box

    img = torch.from_numpy(arr).permute(2, 0, 1)[None]
    left, top, right, bottom = pixel_box(box, 1.0, 1.0)
    return torch.nn.functional.interpolate(
        img[:, :, top:bottom, left:right], size=(size, size), mode="bilinear", antialias=True, align_corners=False
    )


def pipeline_rate(split, spec: CropSpec, workers: int, seconds: float, batch: int = 64) -> float:
    loader = StreamBatches(
        split, spec, min(batch, len(split)), seed=0, workers=workers, prefetch=4, rank=0, world_size=1
    )
    it = loader.iter_from(0)
    next(it)  # workers started and warm
    n, epoch, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            b = next(it)
        except StopIteration:
            epoch += 1
            loader.set_epoch(epoch)
            it = loader.iter_from(0)
            continue
        n += b["x"].shape[0]
    rate = n / (time.perf_counter() - start)
    loader.close()
    return rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=240, help="JPEGs in the fixture folder")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--views", type=int, default=1, help="crops per image (SimCLR: 2)")
    ap.add_argument("--seconds", type=float, default=8.0, help="time per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per figure (median printed)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine_line())
    cores = auto_workers("auto")
    with tempfile.TemporaryDirectory() as tmp:
        classes = len(packaged_photos())
        per = max(2, args.images // classes)
        write_photo_folder(tmp, classes=classes, train_per_class=per + 2, val_per_class=1)
        for p in Path(tmp).glob("train/*/*"):
            if p.suffix != ".jpg":
                p.unlink()  # the benchmark is about JPEGs
        split = FolderSource("imagefolder", tmp).split("train")
        sizes = [tuple(__import__("PIL.Image", fromlist=["Image"]).open(split.path(i)).size) for i in range(len(split))]
        print(
            f"{len(split)} JPEGs, sizes {', '.join(sorted({f'{w}x{h}' for w, h in sizes}))}; "
            f"crops to {args.size} px, {args.views} view(s) per image; {cores} cores usable"
        )
        paths = [split.path(i) for i in range(len(split))]
        spec = CropSpec(args.size, views=args.views, scale=(0.2, 1.0))
        print("per image, in one process (best of 3):")
        for name, ms in stage_times(paths, spec).items():
            print(f"  {name:70s} {ms:6.2f} ms")
        full, one, many = [], [], []
        for _ in range(args.repeats):  # interleaved, so drifts of the machine hit all three
            full.append(full_decode_rate(paths, args.seconds))
            one.append(pipeline_rate(split, spec, 1, args.seconds))
            if cores > 1:
                many.append(pipeline_rate(split, spec, cores, args.seconds))
        f, o = statistics.median(full), statistics.median(one)
        print(f"full decode, 1 process        {f:8.1f} images/s  (runs: {', '.join(f'{x:.0f}' for x in full)})")
        print(f"pipeline, 1 worker            {o:8.1f} images/s  (runs: {', '.join(f'{x:.0f}' for x in one)})")
        print(f"  ratio to the full decode    {o / f:8.2f}x  (target >= 1.5x)")
        if many:
            m = statistics.median(many)
            print(
                f"pipeline, {cores} workers           {m:8.1f} images/s  (runs: {', '.join(f'{x:.0f}' for x in many)})"
            )
            print(f"  ratio to 1 worker           {m / o:8.2f}x  (target >= 1.8x with 2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
