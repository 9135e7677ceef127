"""Batched image augmentations: the papers' view families as tensor ops on a whole batch.

Every transform draws its random parameters *per sample* from one ``torch.Generator`` and is
applied to the batch at once (no PIL, no per-image Python loop), so that augmentation is a
small share of a CPU training step. The semantics follow torchvision's transforms:

* ``RandomResizedCrop(size, scale, ratio)``: 10 tries of area ``s ~ U(scale)`` and log aspect
  ``~ U(log ratio)``, first fitting box kept, centre-crop fallback; the box is resampled to
  ``size x size`` bilinearly through one affine grid (``F.affine_grid`` + ``F.grid_sample``).
  Inside the box this equals torchvision's crop-then-resize exactly; on the outermost output
  pixels the grid reads the image's true neighbours where torchvision clamps to the crop edge,
  and downscaling (a crop larger than ``size``) is not anti-aliased.
* ``RandomHorizontalFlip(p)``: folded into the same grid (negated x scale).
* ``RandomApply([ColorJitter(b, c, s, h)], p)``: factors ``U[1-b, 1+b]`` etc., hue shift
  ``U[-h, h]``, the four operations in a random order per sample (as torchvision draws it).
* ``RandomGrayscale(p)``, ``GaussianBlur(kernel, sigma ~ U(sigma))`` applied with ``p``.
* ``Normalize(mean, std)`` last.

Presets (``PRESETS``) pin the families of the papers' appendices:

* ``cacr_cifar``: CACR App. B Algorithm 1 for CIFAR-10/100 (= Wang & Isola 2020 = Wu et al.
  2018, also the view family of Wang & Liu Sec. 5): crop 32, scale (0.2, 1), flip,
  ColorJitter(0.4, 0.4, 0.4, 0.4) always applied, grayscale p=0.2.
* ``cacr_stl10``: Algorithm 1 for STL-10: crop 64, scale (0.08, 1), otherwise as above.
* ``simclr_cifar``: SimCLR's CIFAR family (CPCL Sec. 6, DCL/HCL): crop 32, scale (0.08, 1),
  flip, jitter (0.4, 0.4, 0.4, 0.1) with p=0.8, grayscale p=0.2.
* ``moco_v2``: MoCo-v2 (ImageNet-style): crop 224, scale (0.2, 1), jitter (0.4, 0.4, 0.4, 0.1)
  p=0.8, grayscale 0.2, blur p=0.5 with sigma in (0.1, 2.0) and a 23 px kernel, flip.
* ``ring_imagenet``: Ring Sec. 5, "a 224 by 224-pixel random crop, random color jittering,
  random horizontal flip, and random grayscale conversion" (no blur), with the IR / CMC code
  family's values: crop scale (0.2, 1), jitter 0.4 always, grayscale 0.2.
* ``simclr_tiny``: SimCLR's family at Tiny ImageNet's 64 px (CPCL's Tiny ImageNet runs): crop
  64, scale (0.08, 1), flip, jitter (0.4, 0.4, 0.4, 0.1) p=0.8, grayscale 0.2.
* ``grey``: MNIST / Fashion-MNIST: crop 28, scale (0.3, 1), flip, brightness/contrast jitter
  0.4 with p=0.8 (saturation and hue have no meaning on one channel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["AugmentSpec", "AugmentParams", "BatchAugment", "PRESETS", "preset"]

_GRAY = (0.2989, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision's rgb_to_grayscale


@dataclass(frozen=True)
class AugmentSpec:
    """One view family. ``jitter`` is (brightness, contrast, saturation, hue)."""

    size: int
    scale: tuple[float, float] = (0.2, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.4)
    jitter_p: float = 1.0
    grayscale_p: float = 0.2
    blur_p: float = 0.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = 0  # 0: about 10% of ``size``, made odd

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"augment size must be an integer >= 1, got {self.size!r}")
        lo, hi = self.scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"augment scale must satisfy 0 < lo <= hi <= 1, got {self.scale!r}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"augment ratio must satisfy 0 < lo <= hi, got {self.ratio!r}")
        for name in ("flip_p", "jitter_p", "grayscale_p", "blur_p"):
            p = getattr(self, name)
            if not 0 <= p <= 1:
                raise ValueError(f"augment {name} must lie in [0, 1], got {p!r}")
        if len(self.jitter) != 4 or min(self.jitter) < 0 or self.jitter[3] > 0.5:
            raise ValueError(
                "augment jitter must be (brightness, contrast, saturation, hue) "
                f"with all >= 0 and hue <= 0.5, got {self.jitter!r}"
            )
        if not 0 < self.blur_sigma[0] <= self.blur_sigma[1]:
            raise ValueError(f"augment blur_sigma must satisfy 0 < lo <= hi, got {self.blur_sigma!r}")
        if self.blur_kernel < 0 or (self.blur_kernel and self.blur_kernel % 2 == 0):
            raise ValueError(f"augment blur_kernel must be 0 (auto) or odd, got {self.blur_kernel!r}")

    @property
    def kernel(self) -> int:
        if self.blur_kernel:
            return self.blur_kernel
        k = max(3, int(round(0.1 * self.size)))
        return k if k % 2 else k + 1


PRESETS: dict[str, AugmentSpec] = {
    "cacr_cifar": AugmentSpec(32, scale=(0.2, 1.0), jitter=(0.4, 0.4, 0.4, 0.4), jitter_p=1.0),
    "cacr_stl10": AugmentSpec(64, scale=(0.08, 1.0), jitter=(0.4, 0.4, 0.4, 0.4), jitter_p=1.0),
    "simclr_cifar": AugmentSpec(32, scale=(0.08, 1.0), jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8),
    "moco_v2": AugmentSpec(
        224,
        scale=(0.2, 1.0),
        jitter=(0.4, 0.4, 0.4, 0.1),
        jitter_p=0.8,
        blur_p=0.5,
        blur_sigma=(0.1, 2.0),
        blur_kernel=23,
    ),
    "ring_imagenet": AugmentSpec(224, scale=(0.2, 1.0), jitter=(0.4, 0.4, 0.4, 0.4), jitter_p=1.0),
    "grey": AugmentSpec(28, scale=(0.3, 1.0), jitter=(0.4, 0.4, 0.0, 0.0), jitter_p=0.8, grayscale_p=0.0),
    "simclr_tiny": AugmentSpec(64, scale=(0.08, 1.0), jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8),
}


def preset(name: str, **overrides) -> AugmentSpec:
    """The named view family with some fields replaced (``preset("cacr_cifar", size=28)``)."""
    if name not in PRESETS:
        raise ValueError(f"augment preset must be one of {', '.join(sorted(PRESETS))}, got {name!r}")
    clean = {k: (tuple(v) if isinstance(v, list) else v) for k, v in overrides.items() if v is not None}
    return replace(PRESETS[name], **clean)


@dataclass
class AugmentParams:
    """Per-sample random parameters of one batch of views (all ``[N]`` or ``[N, k]``)."""

    theta: Tensor  # [N, 2, 3] affine grids (crop box + flip)
    jitter: Tensor  # [N, 4] brightness, contrast, saturation factors and hue shift
    order: Tensor  # [N, 4] permutation of the four jitter operations
    gray: Tensor  # [N] bool
    sigma: Tensor  # [N] blur sigma, 0 where no blur
    boxes: Tensor = field(default_factory=lambda: torch.empty(0))  # [N, 4] (i, j, h, w)


class BatchAugment:
    """Draws per-sample parameters and applies a view family to a uint8 batch.

    ``x`` is ``[N, C, H, W]`` uint8 (C = 1 or 3) on any device; the output is float32
    ``[N, C, size, size]``, normalised with ``mean`` / ``std``.

    Host syncs: parameters are drawn where the generator lives and stay there. On the CPU,
    operations whose parameters are all neutral are skipped and the jitter runs each operation
    on the rows that chose it (less work); on a GPU (``sync_free``, default: any device but
    the CPU) nothing is read back: the skips follow the spec and the jitter selects rows with
    masks, so an augmented batch is queued without waiting for the device.
    """

    def __init__(
        self, spec: AugmentSpec, mean: Sequence[float], std: Sequence[float], sync_free: bool | None = None
    ) -> None:
        self.sync_free = sync_free
        if len(mean) != len(std) or any(s <= 0 for s in std):
            raise ValueError(
                f"mean and std must have one entry per channel and std > 0, got "
                f"mean={tuple(mean)!r}, std={tuple(std)!r}"
            )
        self.spec = spec
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    # -- parameters -------------------------------------------------------------------------
    def sample(self, n: int, height: int, width: int, generator: torch.Generator | None = None) -> AugmentParams:
        """Per-sample parameters for ``n`` images of ``height x width`` (drawn and kept on the
        generator's device)."""
        s, g = self.spec, generator
        dev = g.device if g is not None else torch.device("cpu")

        def rand(*shape: int) -> Tensor:
            return torch.rand(*shape, generator=g, device=dev)

        area = float(height * width)
        tries = 10
        target = area * (s.scale[0] + (s.scale[1] - s.scale[0]) * rand(n, tries))
        log_r = math.log(s.ratio[0]) + (math.log(s.ratio[1]) - math.log(s.ratio[0])) * rand(n, tries)
        aspect = log_r.exp()
        w = torch.sqrt(target * aspect).round()
        h = torch.sqrt(target / aspect).round()
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = ok.float().argmax(dim=1, keepdim=True)
        w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
        # torchvision's fallback: the whole image, clipped to the ratio range, centred
        in_ratio = width / height
        if in_ratio < s.ratio[0]:
            fw, fh = float(width), float(round(width / s.ratio[0]))
        elif in_ratio > s.ratio[1]:
            fw, fh = float(round(height * s.ratio[1])), float(height)
        else:
            fw, fh = float(width), float(height)
        any_ok = ok.any(dim=1)
        w = torch.where(any_ok, w, torch.full_like(w, fw))
        h = torch.where(any_ok, h, torch.full_like(h, fh))
        u_i, u_j = rand(n), rand(n)
        i = torch.where(any_ok, torch.floor(u_i * (height - h + 1)), torch.full_like(h, (height - fh) // 2))
        j = torch.where(any_ok, torch.floor(u_j * (width - w + 1)), torch.full_like(w, (width - fw) // 2))
        flip = rand(n) < s.flip_p
        # crop box [j, j+w) x [i, i+h) in pixel-edge coordinates -> normalised [-1, 1] affine
        sx = w / width * torch.where(flip, -1.0, 1.0)
        sy = h / height
        cx = (2 * j + w) / width - 1
        cy = (2 * i + h) / height - 1
        theta = torch.zeros(n, 2, 3, device=dev)
        theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, cx, sy, cy

        b, c, sat, hue = s.jitter
        u = rand(n, 4)
        factors = torch.stack(
            [1 - b + 2 * b * u[:, 0], 1 - c + 2 * c * u[:, 1], 1 - sat + 2 * sat * u[:, 2], -hue + 2 * hue * u[:, 3]],
            dim=1,
        )
        factors[:, :3].clamp_(min=0)
        apply = rand(n) < s.jitter_p
        neutral = torch.tensor([1.0, 1.0, 1.0, 0.0], device=dev)
        factors = torch.where(apply[:, None], factors, neutral)
        order = torch.argsort(rand(n, 4), dim=1)
        gray = rand(n) < s.grayscale_p
        sig = s.blur_sigma[0] + (s.blur_sigma[1] - s.blur_sigma[0]) * rand(n)
        sig = torch.where(rand(n) < s.blur_p, sig, torch.zeros(n, device=dev))
        return AugmentParams(theta, factors, order, gray, sig, torch.stack([i, j, h, w], dim=1))

    # -- application ------------------------------------------------------------------------
    def apply(self, x: Tensor, p: AugmentParams) -> Tensor:
        """Apply the parameters ``p`` (one row per image) to the uint8 batch ``x``."""
        if x.dim() != 4:
            raise ValueError(f"x must be [N, C, H, W], got shape {tuple(x.shape)}")
        if x.shape[0] != p.theta.shape[0]:
            raise ValueError(f"x has {x.shape[0]} images but the parameters have {p.theta.shape[0]} rows")
        dev = x.device
        img = x.float().div_(255.0) if not torch.is_floating_point(x) else x.float()
        n, ch = img.shape[:2]
        size = self.spec.size
        grid = F.affine_grid(p.theta.to(dev), [n, ch, size, size], align_corners=False)
        img = F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=False)
        sync_free = dev.type != "cpu" if self.sync_free is None else self.sync_free
        spec = self.spec
        if sync_free:  # decided by the spec: no value is read back from the device
            jitter = spec.jitter_p > 0 and any(spec.jitter)
            gray, blur = spec.grayscale_p > 0, spec.blur_p > 0
        else:
            jitter = bool((p.jitter != torch.tensor([1.0, 1.0, 1.0, 0.0], device=p.jitter.device)).any())
            gray, blur = bool(p.gray.any()), bool((p.sigma > 0).any())
        if jitter and sync_free:
            active = [strength > 0 and (k < 2 or ch == 3) for k, strength in enumerate(spec.jitter)]
            img = _jitter_masked(img, p.jitter.to(dev), p.order.to(dev), active)
        elif jitter:
            img = _jitter(img, p.jitter.to(dev), p.order.to(dev))
        if ch == 3 and gray:
            g = _gray(img).expand_as(img)
            img = torch.where(p.gray.to(dev)[:, None, None, None], g, img)
        if blur:
            img = _blur(img, p.sigma.to(dev), self.spec.kernel)
        return self.normalize(img)

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.apply(x, self.sample(x.shape[0], x.shape[-2], x.shape[-1], generator))

    def normalize(self, img: Tensor) -> Tensor:
        """``(img - mean) / std`` per channel on a float batch in [0, 1]."""
        if img.shape[1] != len(self.mean):
            raise ValueError(f"images have {img.shape[1]} channels but mean/std have {len(self.mean)}")
        mean = torch.tensor(self.mean, device=img.device, dtype=img.dtype)[None, :, None, None]
        std = torch.tensor(self.std, device=img.device, dtype=img.dtype)[None, :, None, None]
        return (img - mean) / std

    def natural(self, x: Tensor) -> Tensor:
        """The un-augmented view: the whole image resized to ``size`` and normalised
        (CPCL's x-bar; also what evaluation encodes)."""
        img = x.float().div(255.0) if not torch.is_floating_point(x) else x.float()
        if img.shape[-1] != self.spec.size or img.shape[-2] != self.spec.size:
            img = F.interpolate(
                img, size=(self.spec.size, self.spec.size), mode="bilinear", align_corners=False, antialias=True
            )
        return self.normalize(img)


def _gray(img: Tensor) -> Tensor:
    if img.shape[1] == 1:
        return img
    r, g, b = img[:, 0:1], img[:, 1:2], img[:, 2:3]
    return _GRAY[0] * r + _GRAY[1] * g + _GRAY[2] * b


def _brightness(img: Tensor, f: Tensor) -> Tensor:
    return (img * f[:, None, None, None]).clamp_(0, 1)


def _contrast(img: Tensor, f: Tensor) -> Tensor:
    mean = _gray(img).mean(dim=(1, 2, 3), keepdim=True)
    f = f[:, None, None, None]
    return (f * img + (1 - f) * mean).clamp_(0, 1)


def _saturation(img: Tensor, f: Tensor) -> Tensor:
    if img.shape[1] == 1:
        return img
    f = f[:, None, None, None]
    return (f * img + (1 - f) * _gray(img)).clamp_(0, 1)


def _hue(img: Tensor, shift: Tensor) -> Tensor:
    """Rotate the hue by ``shift`` (fraction of a turn) through HSV, as torchvision does."""
    if img.shape[1] == 1:
        return img
    r, g, b = img.unbind(1)
    maxc, _ = img.max(dim=1)
    minc, _ = img.min(dim=1)
    delta = maxc - minc
    v = maxc
    s = torch.where(maxc > 0, delta / maxc.clamp(min=1e-12), torch.zeros_like(maxc))
    d = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = (maxc - r) / d, (maxc - g) / d, (maxc - b) / d
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(delta > 0, (h / 6.0) % 1.0, torch.zeros_like(h))
    h = (h + shift[:, None, None]) % 1.0
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.long() % 6
    p_ = v * (1 - s)
    q = v * (1 - s * f)
    t = v * (1 - s * (1 - f))
    table_r = torch.stack([v, q, p_, p_, t, v], dim=1)
    table_g = torch.stack([t, v, v, q, p_, p_], dim=1)
    table_b = torch.stack([p_, p_, t, v, v, q], dim=1)
    idx = i[:, None]
    out = torch.stack(
        [table_r.gather(1, idx).squeeze(1), table_g.gather(1, idx).squeeze(1), table_b.gather(1, idx).squeeze(1)], dim=1
    )
    return out


_OPS = (_brightness, _contrast, _saturation, _hue)


def _jitter(img: Tensor, factors: Tensor, order: Tensor) -> Tensor:
    """Four jitter stages; at each stage every sample gets the operation its permutation names.
    Each operation runs once per stage on the rows that chose it (same total work as a fixed
    order)."""
    out = img
    for stage in range(4):
        chosen = order[:, stage]
        nxt = out.clone()
        for k, op in enumerate(_OPS):
            rows = (chosen == k).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            f = factors[rows, k]
            neutral = 0.0 if k == 3 else 1.0
            if bool((f == neutral).all()):
                continue
            nxt[rows] = op(out[rows], f)
        out = nxt
    return out


def _jitter_masked(img: Tensor, factors: Tensor, order: Tensor, active: Sequence[bool] = (True,) * 4) -> Tensor:
    """:func:`_jitter` without host reads: each operation runs on the whole batch and a mask
    keeps it on the rows that chose it at this stage (up to 4x the work; for GPUs). Operations
    not ``active`` (a zero strength in the spec, or saturation and hue on one channel: the
    identity either way) are skipped; the operations make new tensors, so none is copied first."""
    neutral = torch.tensor([1.0, 1.0, 1.0, 0.0], device=img.device)
    out = img
    for stage in range(4):
        chosen = order[:, stage]
        nxt = out
        for k, op in enumerate(_OPS):
            if not active[k]:
                continue
            rows = (chosen == k) & (factors[:, k] != neutral[k])
            nxt = torch.where(rows[:, None, None, None], op(out, factors[:, k]), nxt)
        out = nxt
    return out


def _blur(img: Tensor, sigma: Tensor, kernel: int) -> Tensor:
    """Separable Gaussian blur with a per-sample sigma (sigma 0 = identity), reflect padding."""
    n, ch, h, w = img.shape
    half = kernel // 2
    xs = torch.arange(-half, half + 1, device=img.device, dtype=img.dtype)
    sig = sigma.to(img.dtype).clamp(min=1e-6)[:, None]
    k = torch.exp(-0.5 * (xs[None, :] / sig) ** 2)
    k = k / k.sum(dim=1, keepdim=True)
    delta = torch.zeros_like(k)
    delta[:, half] = 1.0
    k = torch.where((sigma > 0)[:, None], k, delta)
    k = k.repeat_interleave(ch, dim=0)  # [N*C, kernel]
    flat = img.reshape(1, n * ch, h, w)
    pad = min(half, h - 1, w - 1)
    if pad < half:  # images smaller than the kernel: crop the kernel to what reflect allows
        k = k[:, half - pad : half + pad + 1]
        k = k / k.sum(dim=1, keepdim=True)
    flat = F.pad(flat, (pad, pad, 0, 0), mode="reflect")
    flat = F.conv2d(flat, k[:, None, None, :], groups=n * ch)
    flat = F.pad(flat, (0, 0, pad, pad), mode="reflect")
    flat = F.conv2d(flat, k[:, None, :, None], groups=n * ch)
    return flat.reshape(n, ch, h, w)
