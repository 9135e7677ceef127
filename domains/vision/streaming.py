"""The streaming input pipeline of the folder datasets (``image_folders.py``).

Each worker process of a ``torch.utils.data.DataLoader`` turns a file into ``V`` uint8 crops of
``size x size``: it reads the image size from the header, draws each view's
``RandomResizedCrop`` box (torchvision's rule: 10 tries of area ``U(scale)`` and log aspect
``U(log ratio)``, centre fallback), asks PIL's JPEG decoder for the smallest DCT scale (1/1,
1/2, 1/4, 1/8) that still gives every box at least ``size`` pixels a side (``Image.draft``),
and resamples each box to ``size x size`` (``Image.resize(box=...)``, antialiased). A 500x375
JPEG whose crop becomes 224 px is thus decoded at 250x188 or 500x375, never more. The crops go to
the device in pinned batches, where :class:`~domains.vision.augment.BatchAugment` does the rest
of the view family in the presets' order (flip, colour jitter, grayscale, blur, normalise);
what differs from torchvision's per-image pipeline: the crop is resampled from the DCT-scaled
image (PIL's reducing decode, then an antialiased resize) rather than from the full-resolution
decode, and the flip is drawn on the device.

Multi-crop (``CropSpec.local_views``, ``data.local_crops``): the worker also cuts each image's
local crops (their boxes drawn after the global views' from the same stream, at the local scale),
resized to the local size, in the same decode (its DCT scale chosen for the larger need of the
two); the batch carries them as ``x_local`` (uint8 ``[N, L, 3, s, s]``) and the device does the
rest of the family on them too (``VisionDomain.make_local_views``).

Determinism: the random draws of an image depend only on ``(seed, epoch, position in the
epoch)``; an epoch is one seeded permutation of the dataset, so the checkpointed ``(epoch,
batch)`` of the training loop fixes every worker's stream: a resumed run reads and crops
exactly what the uninterrupted one did, whatever the number of workers.

Ranks: batch ``b`` of an epoch is ``perm[b B : (b + 1) B]`` (``B`` the global batch); rank
``r`` of ``W`` reads its ``B / W`` contiguous share, so every image of an epoch is read once,
by one rank.

Bad files: an image that cannot be read (truncated, corrupt, vanished) is replaced by a seeded
redraw of another image (the redraw's label goes with it), counted (``data_bad_images``) and
named once per process in one ``[ctk]`` line on stderr, whatever the number of workers (the
workers hand their unreadable files to the training process with the batch). Past
``bad_image_limit`` of an epoch's images, and past :data:`BAD_IMAGE_FLOOR` files whatever the
fraction (a small folder with a few unreadable files trains; a limit of 0 stops at the first),
the run stops with the list (:class:`~toolkit.training.batches.DataStop`: the loop checkpoints
first) and the resume command that goes on: the limit raised to twice the rate met so far
(:func:`suggested_limit`; a resume may change ``data.loader.bad_image_limit``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from domains.vision.decode import (
    CropSpec,
    crop_boxes,
    crop_images,
    decode_crops,
    decode_images,
    decode_on_device,
    decode_views,
    draw_boxes,
)
from domains.vision.image_folders import FolderSplit
from toolkit.training.batches import Batches, DataStop

__all__ = [
    "CropSpec",
    "StreamedImages",
    "StreamBatches",
    "crop_boxes",
    "decode_views",
    "auto_workers",
    "choose_decode",
    "materialize",
    "READ_ERRORS",
]

# what reading a bad file raises: PIL's UnidentifiedImageError is an OSError, a truncated JPEG
# raises OSError on load, a vanished file FileNotFoundError; odd headers ValueError / SyntaxError
READ_ERRORS = (OSError, ValueError, SyntaxError, EOFError)
_REDRAWS = 10
BAD_IMAGE_FLOOR = 10  # unreadable files an epoch may hold whatever bad_image_limit's fraction (unless 0)
_LADDER = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
_REPORTED: set[str] = set()  # the unreadable files this process has named


def allowed_bad_images(limit: float, images: int, world_size: int = 1) -> float:
    """How many unreadable images one rank's share of an epoch of ``images`` may hold:
    ``limit`` of them, at least :data:`BAD_IMAGE_FLOOR` (none with a limit of 0)."""
    return (max(limit * images, BAD_IMAGE_FLOOR) if limit > 0 else 0.0) / world_size


def suggested_limit(bad: int, read: int, limit: float) -> float:
    """A ``bad_image_limit`` for the resume after a stop: the first of a 1-2-5 ladder above the
    current limit and at least twice the rate of unreadable files among the ``read`` images."""
    need = max(2 * bad / max(1, read), limit)
    return next((x for x in _LADDER if x > need), 1.0)


def report_unreadable(path: str, why: str) -> None:
    """One ``[ctk]`` line on stderr the first time this process meets an unreadable file."""
    if path not in _REPORTED:
        _REPORTED.add(path)
        print(f"[ctk] unreadable image replaced by a seeded redraw: {path} ({why})", file=sys.stderr, flush=True)


class StreamedImages(torch.utils.data.Dataset):
    """Map-style dataset whose keys are ``(epoch, position, index)``: the image ``index`` at
    ``position`` of ``epoch`` (the position seeds its random draws)."""

    def __init__(self, split: FolderSplit, spec: CropSpec, seed: int = 0, raw: bool = False) -> None:
        self.split, self.spec, self.seed, self.raw = split, spec, int(seed), raw

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, key: tuple[int, int, int]) -> dict[str, Any]:
        epoch, position, index = key
        bad: list[tuple[str, str]] = []
        for attempt in range(_REDRAWS + 1):
            rng = np.random.default_rng([self.seed, epoch, position, attempt])
            if attempt:  # a seeded redraw of another image
                index = int(rng.integers(0, len(self.split)))
            path = self.split.path(index)
            try:
                if self.raw:
                    return dict(self._raw(path, rng), y=int(self.split.labels[index]), index=index, bad=bad)
                views, natural, local = decode_crops(path, self.spec, rng)
            except READ_ERRORS as err:
                bad.append((path, f"{type(err).__name__}: {err}"))
                continue
            out = {"x": views, "y": int(self.split.labels[index]), "index": index, "bad": bad}
            if natural is not None:
                out["natural_x"] = natural
            if local is not None:
                out["x_local"] = local
            return out
        raise DataStop(
            f"{_REDRAWS + 1} images in a row could not be read: " + "; ".join(f"{p} ({why})" for p, why in bad)
        )

    def _raw(self, path: str, rng: np.random.Generator) -> dict[str, Any]:
        """The file's bytes and the crop boxes on its full-size pixels (decoded on the device),
        the local crops' boxes apart."""
        from PIL import Image

        with Image.open(path) as im:
            width, height = im.size
            im.verify()
        with open(path, "rb") as fh:
            data = fh.read()
        boxes, local_boxes = draw_boxes(width, height, self.spec, rng)
        out = {"bytes": np.frombuffer(data, dtype=np.uint8).copy(), "boxes": np.asarray(boxes, dtype=np.float32)}
        if local_boxes:
            out["local_boxes"] = np.asarray(local_boxes, dtype=np.float32)
        return out


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "y": torch.as_tensor([it["y"] for it in items], dtype=torch.long),
        "index": torch.as_tensor([it["index"] for it in items], dtype=torch.long),
        "bad": [b for it in items for b in it["bad"]],
    }
    if "x" in items[0]:
        out["x"] = torch.from_numpy(np.stack([it["x"] for it in items]))
    for key in ("natural_x", "x_local", "boxes", "local_boxes"):
        if key in items[0]:
            out[key] = torch.from_numpy(np.stack([it[key] for it in items]))
    if "bytes" in items[0]:
        out["bytes"] = [torch.from_numpy(it["bytes"]) for it in items]
    return out


def auto_workers(setting: int | str) -> int:
    """``loader.workers``: a number, or ``auto``: the cores this process may use, at most 16."""
    if setting != "auto":
        return int(setting)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(16, cores))


def decode_rates(
    split: FolderSplit, spec: CropSpec, device: torch.device, workers: int, samples: int = 48
) -> dict[str, float]:
    """Images/s of the two decoders on ``samples`` files of ``split`` (after a warm-up): ``cpu``,
    one worker's in-process rate times ``workers`` (their ideal scaling), and ``device``,
    reading the bytes here and decoding them as one batch on ``device``."""
    import time

    n = min(samples, len(split))
    keys = [(0, p, p) for p in range(n)]
    cpu, raw = StreamedImages(split, spec), StreamedImages(split, spec, raw=True)
    cpu[keys[0]]
    start = time.perf_counter()
    for k in keys:
        cpu[k]
    cpu_rate = n / (time.perf_counter() - start) * max(1, workers)
    decode_on_device(_collate([raw[k] for k in keys[:2]]), spec.size, device)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    decode_on_device(_collate([raw[k] for k in keys]), spec.size, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"cpu": cpu_rate, "device": n / (time.perf_counter() - start)}


def choose_decode(
    setting: str, device: torch.device, split: FolderSplit | None = None, spec: CropSpec | None = None, workers: int = 1
) -> tuple[str, str]:
    """``loader.decode`` and why: ``cpu`` (workers decode) or ``device`` (torchvision's
    decode_jpeg on the training device). ``auto``: ``cpu`` off CUDA; on CUDA the faster of the
    two on a sample of the files (:func:`decode_rates`), ``device`` where nothing is given to time."""
    if setting != "auto":
        return setting, "as the recipe says"
    if device.type != "cuda":
        return "cpu", f"auto: no GPU decoder on {device.type}"
    if split is None or spec is None or len(split) == 0:
        return "device", "auto: nvJPEG on CUDA"
    rates = decode_rates(split, spec, device, workers)
    best = max(rates, key=rates.__getitem__)
    return best, (
        f"auto: measured {rates['device']:,.0f} images/s on {device} against ~{rates['cpu']:,.0f} "
        f"with {workers} CPU workers"
    )


class StreamBatches(Batches):
    """An epoch of a folder dataset in global batches of ``batch_size``, this rank's share of
    each, decoded by ``workers`` processes (see the module doc)."""

    def __init__(
        self,
        split: FolderSplit,
        spec: CropSpec,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        workers: int = 0,
        prefetch: int = 2,
        decode: str = "cpu",
        device: torch.device | None = None,
        bad_image_limit: float = 0.001,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if rank is None or world_size is None:
            dist = torch.distributed
            on = dist.is_available() and dist.is_initialized()
            rank, world_size = (dist.get_rank(), dist.get_world_size()) if on else (0, 1)
        n = len(split)
        if batch_size < 1 or (drop_last and batch_size > n):
            raise ValueError(f"batch_size must lie in [1, {n}] (dataset size), got {batch_size}")
        if batch_size % world_size:
            raise ValueError(f"the global batch ({batch_size}) must divide evenly over {world_size} processes")
        self.split, self.spec, self.batch_size = split, spec, batch_size
        self.seed, self.shuffle, self.drop_last = int(seed), shuffle, drop_last
        self.rank, self.world_size = rank, world_size
        self.sharded = world_size > 1
        self.decode, self.device = decode, device or torch.device("cpu")
        self.bad_image_limit = bad_image_limit
        self.epoch = 0
        self.bad_total, self.bad_epoch, self._bad_epoch_of, self._read_epoch = 0, 0, -1, 0
        self.bad_paths: list[str] = []
        self.dataset = StreamedImages(split, spec, seed, raw=decode == "device")
        self.workers, self.prefetch = workers, prefetch
        self._loader: torch.utils.data.DataLoader | None = None
        self._start = 0

    # -- order ------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        full, rest = divmod(len(self.split), self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's permutation of the dataset (the same on every rank)."""
        n = len(self.split)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, 104_729, epoch]).permutation(n)

    def shares(self, epoch: int, start: int = 0) -> Iterator[list[tuple[int, int, int]]]:
        """This rank's ``(epoch, position, index)`` keys of each batch from batch ``start`` on."""
        perm = self.order(epoch)
        per = self.batch_size // self.world_size
        for b in range(start, len(self)):
            lo = b * self.batch_size
            hi = min(lo + self.batch_size, len(perm))
            per_here = (hi - lo) // self.world_size if hi - lo < self.batch_size else per
            first = lo + self.rank * per_here
            yield [(epoch, p, int(perm[p])) for p in range(first, first + per_here)]

    # -- iteration --------------------------------------------------------------------------
    def _make_loader(self) -> torch.utils.data.DataLoader:
        owner = self

        class _Keys(torch.utils.data.Sampler):
            def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
                return owner.shares(owner.epoch, owner._start)

            def __len__(self) -> int:
                return len(owner) - owner._start

        extra: dict[str, Any] = {}
        if self.workers > 0:
            extra = {"num_workers": self.workers, "prefetch_factor": self.prefetch, "persistent_workers": True}
        return torch.utils.data.DataLoader(
            self.dataset, batch_sampler=_Keys(), collate_fn=_collate, pin_memory=self.device.type == "cuda", **extra
        )

    def iter_from(self, start: int) -> Iterator[dict[str, Any]]:
        self._start = int(start)
        if self._loader is None:
            self._loader = self._make_loader()
        if self._bad_epoch_of != self.epoch:
            self.bad_epoch, self._bad_epoch_of, self._read_epoch = 0, self.epoch, 0
        for batch in self._loader:
            self._read_epoch += len(batch["y"])
            self._note_bad(batch.pop("bad"))
            if "bytes" in batch:
                images = decode_images(batch.pop("bytes"), self.device)
                batch["x"] = crop_images(images, batch.pop("boxes"), self.spec.size)
                if "local_boxes" in batch:
                    batch["x_local"] = crop_images(images, batch.pop("local_boxes"), self.spec.local_size)
            yield batch

    def _note_bad(self, bad: Sequence[tuple[str, str]]) -> None:
        if not bad:
            return
        for path, why in bad:
            report_unreadable(path, why)
            self.bad_paths.append(path)
        self.bad_total += len(bad)
        self.bad_epoch += len(bad)
        allowed = allowed_bad_images(self.bad_image_limit, len(self.split), self.world_size)
        if self.bad_epoch > allowed:
            listing = "\n  ".join(dict.fromkeys(self.bad_paths[-self.bad_epoch :]))
            raise_to = suggested_limit(self.bad_epoch, self._read_epoch, self.bad_image_limit)
            raise DataStop(
                f"{self.bad_epoch} unreadable images in epoch {self.epoch} on this rank, over the "
                f"limit of {self.bad_image_limit:g} of an epoch ({allowed:.1f} images, at least "
                f"{BAD_IMAGE_FLOOR}; data.loader.bad_image_limit); replace or remove them, or go on "
                f"with them redrawn at a limit of {raise_to:g} (the command below):\n  {listing}",
                resume_args=f" --set data.loader.bad_image_limit={raise_to:g}",
            )

    def metrics(self) -> dict[str, float]:
        return {"data_bad_images": float(self.bad_total)}

    def close(self) -> None:
        """Stop the worker processes."""
        self._loader = None

    def __del__(self) -> None:  # workers go with the loader
        self._loader = None


def materialize(
    split: FolderSplit, spec: CropSpec, batch_size: int = 256, workers: int = 0, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """A small split decoded into memory: ``([N, 3, S, S] uint8, labels)`` (centre views; for the
    online monitor and the geometry diagnostics, which read a few thousand images)."""
    loader = StreamBatches(
        split,
        spec,
        batch_size=min(batch_size, max(1, len(split))),
        seed=seed,
        shuffle=False,
        drop_last=False,
        workers=workers,
        rank=0,
        world_size=1,
        bad_image_limit=1.0,
    )
    xs, ys = [], []
    for batch in loader.iter_from(0):
        xs.append(batch["x"][:, 0])
        ys.append(batch["y"])
    loader.close()
    if loader.bad_total:
        print(f"[ctk] {loader.bad_total} unreadable images replaced while decoding {split.name}", file=sys.stderr)
    return torch.cat(xs), torch.cat(ys)
