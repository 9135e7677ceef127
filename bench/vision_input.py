"""Images/s of the streaming input pipeline per worker count, against what a training step needs.

    python bench/vision_input.py [--images 240] [--size 224] [--views 2] [--seconds 5]
                                 [--workers 1,2,4,...] [--need IMAGES_PER_S | --step-output FILE]

Files: real photos at ImageNet's typical sizes (scikit-learn's two sample photos and foolbox's 20
ImageNet photos, each cropped and re-encoded as JPEGs of 333-640 px a side, quality 70-95;
``domains.vision.fixtures.write_photo_folder``), ``--images`` of them written once to a temporary
folder, then linked under more names until the folder holds enough files that the most workers
measured run for ``--seconds`` inside one epoch (the count comes from one worker's measured
rate, with a 1.5x margin): no figure is an average over epoch restarts and worker start-ups,
which is what made the 16-worker figure of a 220-file folder mislead. A measurement whose epoch
still ended early says so.

Printed, each measured in this run:

* per image, in one process: each stage of a worker (decode, crop, resize) and a whole item;
* ``full decode``: libjpeg-turbo decoding every file at full resolution (PIL) in one process;
* per worker count (default 1, 2, 4, ... up to the cores this process may use, and that count):
  ``StreamBatches`` (DataLoader workers: header, crop boxes, DCT-scaled decode, antialiased
  resize to ``size``, collate; ``--views`` crops an image), batches of 64 read by the main
  process as a training loop would: images/s, per worker, the seconds measured;
* the rate a step needs (``--need``, or the ``ctk step`` line of ``bench/gpu_step.py``'s output
  in ``--step-output``): each worker count's ratio to it and the fewest workers that keep up.

Run it alone: another busy process on the cores makes every figure meaningless.
"""

from __future__ import annotations

import argparse
import os
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


def pipeline_rate(split, spec: CropSpec, workers: int, seconds: float, batch: int = 64) -> tuple[float, float, bool]:
    """(images/s, seconds measured, whether the epoch ended first) of ``workers`` DataLoader
    workers, after their first batch (start-up), inside one epoch."""
    loader = StreamBatches(
        split, spec, min(batch, len(split)), seed=0, workers=workers, prefetch=4, rank=0, world_size=1
    )
    it = loader.iter_from(0)
    next(it)  # workers started and warm
    n, ended, start = 0, False, time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            b = next(it)
        except StopIteration:
            ended = True
            break
        n += b["x"].shape[0]
    took = time.perf_counter() - start
    loader.close()
    return n / took, took, ended


def worker_counts(cores: int, asked: str | None) -> list[int]:
    """``asked`` ("1,2,8"), else 1, 2, 4, ... below ``cores``, and ``cores``."""
    if asked:
        return sorted({int(w) for w in asked.split(",")})
    counts, w = [], 1
    while w < cores:
        counts.append(w)
        w *= 2
    return [*counts, cores]


def needed_rate(need: float | None, step_output: str | None) -> tuple[float, str] | None:
    """(images/s a step needs, where the figure came from): ``--need``, or the ``ctk step``
    line that ``bench/gpu_step.py`` printed (saved in a file)."""
    if need:
        return need, "--need"
    if step_output:
        import re

        found = re.search(r"^ctk step +([\d.]+) images/s", Path(step_output).read_text(), re.MULTILINE)
        if found is None:
            raise SystemExit(
                f"--step-output {step_output}: no 'ctk step ... images/s' line (bench/gpu_step.py's output)"
            )
        return float(found.group(1)), f"ctk's step in {step_output}"
    return None


def fill(folder: Path, files_needed: int) -> int:
    """Link the training JPEGs of ``folder`` under more names (``<name>~<k>.jpg``, in their class
    folders) until there are ``files_needed``; returns how many files there are."""
    originals = sorted(folder.glob("train/*/*.jpg"))
    total, k = len(originals), 0
    while total < files_needed:
        for p in originals:
            if total >= files_needed:
                break
            os.link(p, p.with_name(f"{p.stem}~{k}{p.suffix}"))
            total += 1
        k += 1
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=240, help="distinct JPEGs written")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--views", type=int, default=2, help="crops per image (SimCLR: 2)")
    ap.add_argument("--seconds", type=float, default=5.0, help="time per measurement, inside one epoch")
    ap.add_argument("--workers", default=None, help="worker counts, e.g. 1,2,8 (default: 1, 2, 4, ... the cores)")
    ap.add_argument("--need", type=float, default=None, help="images/s the training step needs")
    ap.add_argument("--step-output", default=None, help="a file holding bench/gpu_step.py's output (its ctk rate)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine_line())
    cores = auto_workers("auto")
    counts = worker_counts(cores, args.workers)
    need = needed_rate(args.need, args.step_output)
    spec = CropSpec(args.size, views=args.views, scale=(0.2, 1.0))
    with tempfile.TemporaryDirectory() as tmp:
        classes = len(packaged_photos())
        per = max(2, args.images // classes)
        write_photo_folder(tmp, classes=classes, train_per_class=per + 2, val_per_class=1)
        for p in Path(tmp).glob("train/*/*"):
            if p.suffix != ".jpg":
                p.unlink()  # the benchmark is about JPEGs
        from PIL import Image

        paths = [str(p) for p in sorted(Path(tmp).glob("train/*/*.jpg"))]  # the split is read once, filled
        sizes = [Image.open(p).size for p in paths]
        distinct = len(paths)
        print(f"{distinct} distinct JPEGs, sizes {', '.join(sorted({f'{w}x{h}' for w, h in sizes}))}")
        print(f"per image, in one process (best of 3), {args.views} crop(s) of {args.size} px:")
        stages = stage_times(paths, spec)
        for name, ms in stages.items():
            print(f"  {name:70s} {ms:6.2f} ms")
        one_worker = 1000.0 / stages["whole worker item (decode_views, file read included)"]
        files = fill(Path(tmp), int(1.5 * max(counts) * one_worker * args.seconds) + 64 * 4 * max(counts))
        split = FolderSource("imagefolder", tmp).split("train")
        print(
            f"{files} files ({distinct} distinct, linked under more names): {max(counts)} workers at "
            f"~{one_worker:.0f} images/s each read for {args.seconds:g} s inside one epoch; {cores} cores usable"
        )
        print(f"full decode, 1 process: {full_decode_rate(paths, min(args.seconds, 3.0)):8.1f} images/s")
        print(f"{'workers':>8} {'images/s':>10} {'per worker':>11} {'seconds':>8}  ({args.views} crops an image)")
        rates: dict[int, float] = {}
        for w in counts:
            rate, took, ended = pipeline_rate(split, spec, w, args.seconds)
            rates[w] = rate
            note = "  the epoch ended early: too few files" if ended else ""
            print(f"{w:8d} {rate:10.1f} {rate / w:11.1f} {took:8.1f}{note}", flush=True)
        if need is not None:
            rate, source = need
            print(f"the step needs {rate:.1f} images/s ({source}):")
            for w, r in rates.items():
                print(f"  {w:3d} workers: {r / rate:5.2f}x of it")
            enough = [w for w, r in rates.items() if r >= rate]
            print(
                f"fewest workers that keep up: {enough[0]}"
                if enough
                else f"no worker count measured keeps up; the most, {max(rates)}, gives {rates[max(rates)] / rate:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
