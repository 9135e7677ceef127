"""Registered regularizers, added with a weight to any loss by the objective."""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import ContrastiveBatch, LossOutput, Regularizer, require
from toolkit.registry import Registry

REGULARIZERS: Registry[type[Regularizer]] = Registry("regularizer")


def _unit(rows: Tensor) -> Tensor:
    """The rows L2-normalised, half precision raised to float32 first (as the losses compute)."""
    if rows.dtype in (torch.float16, torch.bfloat16):
        rows = rows.float()
    return nnf.normalize(rows, dim=-1)


@REGULARIZERS.register(
    "distance_polarization", description="LMCL distance polarization R1: pushes pair distances out of (d_plus, d_minus)"
)
class DistancePolarization(Regularizer):
    """LMCL's R1 = sum_{i,j} |min((D_ij - d_plus)(D_ij - d_minus), 0)| with D = (1 - F F^T)/2.

    ``on`` chooses the embeddings that enter R1 (the paper leaves it open; docs/methods.md,
    section distance_polarization):
    ``first_view`` (default: one embedding per distinct instance, as the reference does) or
    ``all_views`` (every view of every instance).
    """

    needs = ("views",)

    def __init__(
        self, d_plus: float = 0.1, d_minus: float = 0.5, reduction: str = "sum", on: str = "first_view"
    ) -> None:
        super().__init__()
        self.d_plus = checks.in_range("d_plus", d_plus, 0.0, 1.0)
        self.d_minus = checks.in_range("d_minus", d_minus, 0.0, 1.0)
        if self.d_plus >= self.d_minus:
            raise checks.ArgumentError(
                "d_plus", f"d_plus must be < d_minus, got d_plus={d_plus!r}, d_minus={d_minus!r}"
            )
        self.reduction = checks.choice("reduction", reduction, ("sum", "mean"))
        self.on = checks.choice("on", on, ("first_view", "all_views"))

    def embeddings(self, batch: ContrastiveBatch) -> Tensor:
        """The rows R1 is computed on, L2-normalised: LMCL's D = (1 - F F^T) / 2 is a distance of
        unit vectors (a no-op up to rounding after a normalising head; the non-contrastive
        family's raw projections need it)."""
        require(batch, "distance_polarization", "views")
        rows = batch.views[:, 0] if self.on == "first_view" else batch.views.flatten(0, 1)
        return _unit(rows)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        stats: dict = {}
        value = F.distance_polarization(
            self.embeddings(batch), d_plus=self.d_plus, d_minus=self.d_minus, reduction=self.reduction, stats=stats
        )
        return LossOutput(value, stats)


@REGULARIZERS.register(
    "uniformity", description="Wang & Isola's uniformity: log mean exp(-t ||f_i - f_j||^2) of the normalised embeddings"
)
class Uniformity(Regularizer):
    """Wang & Isola (2020, Sec. 4.1) uniformity, ``log mean_{i<j} exp(-t ||f_i - f_j||^2)`` on the
    L2-normalised embeddings, as a term added to any loss (a guard against the family's
    collapse: it is 0 for a constant embedding and lowest for a spread one). ``on``:
    ``first_view`` (one embedding per instance) or ``all_views``; default t = 2."""

    needs = ("views",)

    def __init__(self, t: float = 2.0, on: str = "first_view") -> None:
        super().__init__()
        self.t = checks.positive("t", t)
        self.on = checks.choice("on", on, ("first_view", "all_views"))

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "uniformity", "views")
        rows = batch.views[:, 0] if self.on == "first_view" else batch.views.flatten(0, 1)
        return LossOutput(F.uniform(_unit(rows), t=self.t))
