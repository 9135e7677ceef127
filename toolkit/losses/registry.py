"""The loss registry and the small helpers every loss module shares.

The loss modules register themselves here: :mod:`toolkit.losses.modules` (SimCLR, MoCo, CMC,
DCL, HCL, align/uniform, spectral, CPCL) and :mod:`toolkit.losses.modules_papers` (Wang & Liu,
CACR, Ring). Importing :mod:`toolkit.losses` imports both, so ``LOSSES`` is complete.
"""
from __future__ import annotations

from torch import Tensor

from toolkit.losses.base import ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.registry import Registry

__all__ = ["LOSSES"]

LOSSES: Registry[type[ContrastiveLoss]] = Registry("loss")


def _views(batch: ContrastiveBatch, owner: str, at_least: int = 2) -> Tensor:
    require(batch, owner, "views")
    v = batch.views
    if v.dim() != 3 or v.shape[1] < at_least:
        raise ValueError(f"{owner} needs views of shape [N, V>={at_least}, d], got {tuple(v.shape)}")
    return v


class _Stats:
    """Collects the functional core's stats into records."""

    def __init__(self) -> None:
        self.d: dict[str, Tensor | float] = {}

    def out(self, loss: Tensor) -> LossOutput:
        return LossOutput(loss, dict(self.d))
