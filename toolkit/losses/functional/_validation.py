"""Input checks the functional families share: embedding matrices, bool masks, and a domain's
score matrix with its positive / valid masks (the score-level InfoNCE, DCL and HCL forms).

Each raises a ``ValueError`` naming the offending argument."""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit import checks

from ._kernel import _checks_read


def _rows(name: str, x: Tensor, min_rows: int = 1) -> None:
    """A floating ``[n, d]`` tensor with n >= min_rows and d >= 1."""
    checks.tensor(name, x, dim=2, min_rows=min_rows)
    if x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one feature column, got shape {tuple(x.shape)}")


def _pair(name_a: str, a: Tensor, name_b: str, b: Tensor, min_rows: int = 1) -> None:
    _rows(name_a, a, min_rows)
    _rows(name_b, b, min_rows)
    checks.same_shape(name_a, a, name_b, b)
    _same_dtype(name_a, a, name_b, b)


def _same_dtype(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(
            f"{name_a} and {name_b} must share dtype and device, got {a.dtype}/{a.device} and {b.dtype}/{b.device}"
        )


def _bool_mask(name: str, mask: Tensor | None, shape: tuple[int, ...]) -> Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor of shape {shape}, got {got}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {shape}, got {tuple(mask.shape)}")
    return mask


def _score_masks(
    scores: Tensor, positive_mask: Tensor, valid_mask: Tensor | None
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Check a ``[N, C]`` score matrix and its masks; return ``(positive, valid, rows)``, the
    masks as given and ``rows`` ``[N]`` bool, the anchors with at least one positive.

    Every positive must be valid (it stays in the denominator) and at least one anchor must
    have a positive. Those two checks read values of the masks, so they run where reading costs
    nothing (the CPU, :func:`._kernel._checks_read`); on a GPU the score forms leave them to the
    loss, which is then not finite (a positive outside the partition, or no anchor to average),
    and the trainer's non-finite check stops the run at its next log step."""
    checks.tensor("scores", scores, dim=2)
    shape = tuple(scores.shape)
    if scores.shape[1] < 1:
        raise ValueError(f"scores must have at least one candidate column, got shape {shape}")
    pos = _bool_mask("positive_mask", positive_mask, shape)
    if pos is None:
        raise ValueError("positive_mask must be a bool tensor, got None")
    valid = _bool_mask("valid_mask", valid_mask, shape)
    rows = pos.any(dim=1)
    if not _checks_read(scores):
        return pos, valid, rows
    if valid is not None and (pos & ~valid).any():
        raise ValueError(
            "positive_mask marks candidates that valid_mask excludes; every "
            "positive must be valid (it stays in the denominator)"
        )
    if not rows.any():
        raise ValueError(
            f"positive_mask has no positive in any of its {shape[0]} rows; expected at least one anchor with a positive"
        )
    return pos, valid, rows
