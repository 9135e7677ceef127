"""Crops of pixel observations (CURL Sec. 4.4: random crop for training, centre crop to act).

CURL renders 100x100 frames and trains on 84x84 crops: the anchor and the positive of the
contrastive pair are two independent random crops of the same stacked frames (one crop
position per sample, shared by its k frames); the agent acts and is evaluated on the centre
crop.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["center_crop", "random_offsets", "crop_stacks"]


def center_crop(obs: np.ndarray, size: int) -> np.ndarray:
    """The centre ``size x size`` window of ``obs[..., H, W]`` (top-left at ``(H-size)//2``)."""
    h, w = obs.shape[-2:]
    if not 0 < size <= min(h, w):
        raise ValueError(f"crop size must lie in [1, {min(h, w)}] for images of {h}x{w}, got {size!r}")
    top, left = (h - size) // 2, (w - size) // 2
    return obs[..., top : top + size, left : left + size]


def random_offsets(rng: np.random.Generator, n: int, image_size: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` top-left corners, uniform over the ``image_size - size + 1`` positions per axis."""
    if not 0 < size <= image_size:
        raise ValueError(f"crop size must lie in [1, {image_size}], got {size!r}")
    span = image_size - size + 1
    return rng.integers(0, span, size=n), rng.integers(0, span, size=n)


def crop_stacks(
    frames: np.ndarray, stack_index: np.ndarray, top: np.ndarray, left: np.ndarray, size: int
) -> np.ndarray:
    """Gather and crop frame stacks without building the full-size stacks first.

    frames:       ``[F, C, H, W]`` stored frames.
    stack_index:  ``[B, k]`` rows of ``frames`` forming each stack, oldest first.
    top, left:    ``[B]`` crop corners, one per stack (shared by its k frames).
    Returns ``[B, k*C, size, size]``: ``out[b, j*C + c] = frames[stack_index[b, j], c,
    top[b]:top[b]+size, left[b]:left[b]+size]``.
    """
    b, k = stack_index.shape
    c = frames.shape[1]
    windows = sliding_window_view(frames, (size, size), axis=(2, 3))  # [F, C, nH, nW, s, s], a view
    out = np.empty((b, k * c, size, size), dtype=frames.dtype)
    for j in range(k):
        out[:, j * c : (j + 1) * c] = windows[stack_index[:, j], :, top, left]
    return out
