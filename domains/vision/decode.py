"""Decoding an image into the crops a batch needs (the workers of ``streaming.py``).

* :func:`crop_boxes`: torchvision's ``RandomResizedCrop`` box rule (10 tries of area
  ``U(scale)`` and log aspect ``U(log ratio)``, centre fallback), or the centre view of evaluation.
* :func:`decode_views`: the file decoded at the smallest DCT scale that leaves every box at least
  ``size`` pixels a side (libjpeg-turbo's N/8 scales through ``simplejpeg``; PIL's ``draft`` and
  decoder for what simplejpeg refuses, and for PNG / WebP), each box resized to ``size``;
  :func:`decode_crops` also gives multi-crop's local crops (``CropSpec.local_views`` boxes of
  ``local_scale``, drawn after the global ones, each resized to ``local_size``: the decode's
  scale leaves them their own size).
* :func:`decode_on_device`: the same crops from the files' bytes with torchvision's
  ``decode_jpeg`` on the training device (nvJPEG on CUDA); :func:`decode_images` and
  :func:`crop_images` its two halves (one decode, global and local crops cut from it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "CropSpec",
    "crop_boxes",
    "draw_boxes",
    "decode_views",
    "decode_crops",
    "decode_on_device",
    "decode_images",
    "crop_images",
    "pixel_box",
]


@dataclass(frozen=True)
class CropSpec:
    """What each image becomes: ``views`` random-resized crops (``mode="random"``: ``scale``,
    ``ratio``), or one centre view (``mode="center"``: the shorter side resized to
    ``size / center_fraction``, then the centre ``size x size``; 256 -> 224 at 0.875), and with
    ``natural`` also the whole image resized to ``size x size`` (CPCL's un-augmented view), and
    with ``local_views`` that many local crops (multi-crop) of ``local_size`` px at ``local_scale``
    (the same ratio), their boxes drawn after the global ones."""

    size: int
    views: int = 2
    mode: str = "random"
    scale: tuple[float, float] = (0.2, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    center_fraction: float = 0.875
    natural: bool = False
    local_views: int = 0
    local_size: int = 0
    local_scale: tuple[float, float] = (0.05, 0.4)

    def __post_init__(self) -> None:
        if self.mode not in ("random", "center"):
            raise ValueError(f"crop mode must be 'random' or 'center', got {self.mode!r}")
        if self.size < 1 or self.views < 1:
            raise ValueError(f"crop size and views must be >= 1, got {self.size!r}, {self.views!r}")
        if self.local_views < 0:
            raise ValueError(f"local_views must be >= 0, got {self.local_views!r}")
        if self.local_views and (self.mode != "random" or self.local_size < 1):
            raise ValueError(
                f"local crops need mode 'random' and a local_size >= 1, got {self.mode!r}, {self.local_size!r}"
            )

    @property
    def local(self) -> CropSpec | None:
        """The local crops as a spec of their own (None without them)."""
        if not self.local_views:
            return None
        return CropSpec(self.local_size, views=self.local_views, scale=self.local_scale, ratio=self.ratio)


def crop_boxes(width: int, height: int, spec: CropSpec, rng: np.random.Generator) -> list[tuple[float, ...]]:
    """Boxes ``(left, top, right, bottom)`` in pixels of a ``width x height`` image: one per view."""
    if spec.mode == "center":
        short = min(width, height)
        side = short * spec.center_fraction
        left, top = (width - side) / 2, (height - side) / 2
        return [(left, top, left + side, top + side)]
    area = width * height
    log_lo, log_hi = math.log(spec.ratio[0]), math.log(spec.ratio[1])
    boxes = []
    for _ in range(spec.views):
        for _ in range(10):
            target = area * rng.uniform(spec.scale[0], spec.scale[1])
            aspect = math.exp(rng.uniform(log_lo, log_hi))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(rng.integers(0, height - h + 1))
                j = int(rng.integers(0, width - w + 1))
                boxes.append((j, i, j + w, i + h))
                break
        else:  # torchvision's fallback: the whole image clipped to the ratio range, centred
            ratio = width / height
            if ratio < spec.ratio[0]:
                w, h = width, int(round(width / spec.ratio[0]))
            elif ratio > spec.ratio[1]:
                w, h = int(round(height * spec.ratio[1])), height
            else:
                w, h = width, height
            j, i = (width - w) // 2, (height - h) // 2
            boxes.append((j, i, j + w, i + h))
    return boxes


Boxes = list[tuple[float, ...]]
Crops = tuple[np.ndarray, "np.ndarray | None", "np.ndarray | None"]


def draw_boxes(width: int, height: int, spec: CropSpec, rng: np.random.Generator) -> tuple[Boxes, Boxes]:
    """The global views' boxes, then the local crops' (none without ``local_views``): one stream,
    so the global boxes are those of a spec without local crops."""
    boxes = crop_boxes(width, height, spec, rng)
    local = spec.local
    return boxes, (crop_boxes(width, height, local, rng) if local is not None else [])


def decode_views(path: str, spec: CropSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """``[V, 3, S, S]`` uint8 crops of the image at ``path`` (and its natural view ``[3, S, S]``
    with ``spec.natural``), decoded at the smallest JPEG scale the crops allow."""
    views, natural, _ = decode_crops(path, spec, rng)
    return views, natural


def decode_crops(path: str, spec: CropSpec, rng: np.random.Generator) -> Crops:
    """:func:`decode_views` and the local crops ``[L, 3, s, s]`` (None without ``local_views``)."""
    from PIL import Image

    fast = _decode_turbo(path, spec, rng)
    if fast is not None:
        return fast
    with Image.open(path) as im:
        width, height = im.size
        boxes, local_boxes = draw_boxes(width, height, spec, rng)
        need = _needed_scale(boxes, local_boxes, spec, width, height)
        if im.format == "JPEG" and need < 1:
            im.draft("RGB", (max(1, math.ceil(width * need)), max(1, math.ceil(height * need))))
        im = im.convert("RGB")  # decodes (a truncated file raises here)
        fx, fy = im.size[0] / width, im.size[1] / height

        def cut(bs: Boxes, size: int) -> np.ndarray:
            crops = [
                np.asarray(im.resize((size, size), Image.BILINEAR, box=(b[0] * fx, b[1] * fy, b[2] * fx, b[3] * fy)))
                for b in bs
            ]
            return np.stack(crops).transpose(0, 3, 1, 2)

        size = spec.size
        natural = np.asarray(im.resize((size, size), Image.BILINEAR)).transpose(2, 0, 1) if spec.natural else None
        local = cut(local_boxes, spec.local_size) if local_boxes else None
        return cut(boxes, size), natural, local


def _needed_scale(boxes: Boxes, local_boxes: Boxes, spec: CropSpec, width: int, height: int) -> float:
    """The smallest scale of the whole image at which every output keeps its size (``size``,
    ``local_size`` for the local crops) in pixels a side."""

    def need(bs: Boxes, size: int) -> float:
        return max((size / max(1e-6, min(b[2] - b[0], b[3] - b[1])) for b in bs), default=0.0)

    scale = max(need(boxes, spec.size), need(local_boxes, spec.local_size))
    return max(scale, spec.size / min(width, height)) if spec.natural else scale


def _decode_turbo(path: str, spec: CropSpec, rng: np.random.Generator) -> Crops | None:
    """:func:`decode_views` through libjpeg-turbo directly (``simplejpeg``): any N/8 DCT scale
    (PIL's draft offers 1/2, 1/4, 1/8 only), fast integer IDCT and upsampling. None where it does
    not apply (not a JPEG, simplejpeg missing, or a JPEG it refuses: PIL then decides)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    with open(path, "rb") as fh:
        data = fh.read()
    if not data.startswith(b"\xff\xd8"):
        return None
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    state = rng.bit_generator.state  # the PIL path draws the same boxes if this one gives up
    boxes, local_boxes = draw_boxes(width, height, spec, rng)
    # 1/2, 1/4 and 1/8 only: libjpeg-turbo's other N/8 scales have no SIMD IDCT and decode slower
    # than the full size (bench/vision_input.py measured 1.40 ms against 0.93 ms a file)
    need = _needed_scale(boxes, local_boxes, spec, width, height)
    need = next((s for s in (0.125, 0.25, 0.5) if s >= need), 1.0)
    try:
        arr = simplejpeg.decode_jpeg(
            data,
            "RGB",
            fastdct=True,
            fastupsample=True,
            min_height=math.ceil(height * need),
            min_width=math.ceil(width * need),
        )
    except ValueError:  # truncated, CMYK, ...: PIL reads it or names the problem
        rng.bit_generator.state = state
        return None
    # torch's uint8 antialiased bilinear resize on the channels-last decode (no copy): the same
    # filter as PIL's, ~3x faster (bench/vision_input.py)
    img = torch.from_numpy(arr).permute(2, 0, 1)[None]
    fx, fy = arr.shape[1] / width, arr.shape[0] / height

    def cut(bs: Boxes, size: int) -> np.ndarray:
        views = []
        for b in bs:
            left, top, right, bottom = pixel_box(b, fx, fy)
            views.append(_resize(img[:, :, top:bottom, left:right], size))
        return torch.cat(views).numpy()

    natural = _resize(img, spec.size)[0].numpy() if spec.natural else None
    return cut(boxes, spec.size), natural, (cut(local_boxes, spec.local_size) if local_boxes else None)


def pixel_box(box: Sequence[float], fx: float, fy: float) -> tuple[int, int, int, int]:
    """A full-resolution box on an image decoded at scale ``(fx, fy)``, in whole pixels (at
    least one a side): what the crop covers is this box divided by the scale, within a pixel of
    the reduced image of the box drawn."""
    left, top = int(box[0] * fx), int(box[1] * fy)
    return left, top, max(left + 1, round(box[2] * fx)), max(top + 1, round(box[3] * fy))


def _resize(img: Tensor, size: int) -> Tensor:
    """``[1, C, h, w]`` uint8 -> ``[1, C, size, size]`` uint8 (contiguous), antialiased bilinear."""
    return F.interpolate(img, size=(size, size), mode="bilinear", antialias=True, align_corners=False).contiguous()


def decode_on_device(batch: dict[str, Any], size: int, device: torch.device) -> Tensor:
    """``[N, V, 3, S, S]`` uint8 crops decoded from ``batch["bytes"]`` on ``device``."""
    return crop_images(decode_images(batch["bytes"], device), batch["boxes"], size)


def decode_images(data: Sequence[Tensor], device: torch.device) -> list[Tensor]:
    """Each file's bytes decoded to ``[3, H, W]`` uint8 on ``device`` (JPEG there; PNG / WebP
    on the CPU, then moved), with torchvision's decoders: deprecated since torchvision 0.29 in
    favour of torchcodec's and kept for now (docs/data.md says why). Their deprecation warning,
    raised at every call (a batch), is silenced here only: that message, from
    ``torchvision.io``, during this call."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _TORCHVISION_DECODING_DEPRECATED, DeprecationWarning, r"torchvision\.io")
        try:
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # a PNG / WebP in the batch: one by one, on the CPU where needed
            images = []
            for blob in data:
                try:
                    images.append(decode_jpeg(blob, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    images.append(decode_image(blob, mode=ImageReadMode.RGB).to(device))
    return images


# the start of torchvision 0.29's deprecation warning for torchvision.io's image decoders
_TORCHVISION_DECODING_DEPRECATED = r"The image decoding and encoding capabilities of TorchVision are deprecated"


def crop_images(images: Sequence[Tensor], boxes: Tensor, size: int) -> Tensor:
    """``[N, V, 3, size, size]`` uint8: image ``n``'s boxes ``boxes[n]`` (``[V, 4]``, left, top,
    right, bottom on its full-size pixels), each resized to ``size`` (antialiased bilinear)."""
    out = []
    for img, bs in zip(images, boxes.tolist()):
        views = []
        for left, top, right, bottom in bs:
            crop = img[:, int(top) : int(math.ceil(bottom)), int(left) : int(math.ceil(right))]
            views.append(
                F.interpolate(
                    crop[None].float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False
                )[0]
            )
        out.append(torch.stack(views))
    return torch.stack(out).round_().clamp_(0, 255).to(torch.uint8)
