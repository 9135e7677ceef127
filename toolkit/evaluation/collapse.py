"""Collapse, measured: the non-contrastive family (BYOL, SimSiam, Barlow Twins, ...) can reach a
low loss with a constant embedding, so every run measures how spread its embedding is.

* :func:`embedding_std` -- the per-dimension standard deviation of the L2-normalised embedding,
  averaged over dimensions (BYOL / SimSiam's collapse monitor, Chen & He 2021 Sec. 4.1): about
  ``1 / sqrt(d)`` for a spread embedding, 0 for a collapsed one; ``embedding_std_ratio`` is it
  times ``sqrt(d)`` (1 spread, 0 collapsed), comparable across sizes.
* :func:`effective_rank` -- Roy & Vetterli 2007: ``exp(H(p))`` with ``p`` the singular values of
  the centred embedding matrix divided by their sum; 1 for a line, ``d`` for an isotropic cloud.
  Dimensional collapse (Jing et al. 2022) shows here while the std still looks healthy.
* :func:`collapse_figures` both at once; :func:`collapse_warning` the one ``[ctk]`` line a
  collapsing run prints (None when the figures are healthy).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit import checks

__all__ = [
    "COLLAPSE_STD_RATIO",
    "COLLAPSE_RANK",
    "PARTIAL_STD_RATIO",
    "PARTIAL_RANK",
    "embedding_std",
    "effective_rank",
    "collapse_figures",
    "collapse_warning",
]

# A run is said to collapse when its embedding is (nearly) constant (std ratio under
# COLLAPSE_STD_RATIO), lies on (nearly) one line (effective rank under COLLAPSE_RANK), or has
# lost most of its spread into a few directions (std ratio under PARTIAL_STD_RATIO with the rank
# under PARTIAL_RANK: SimSiam without its stop-gradient, measured 0.042 and 2.3 after 400 steps,
# against 0.76 and 14 with it). An untrained conv net's embedding already has a std ratio of
# 0.02-0.04 (its outputs point alike) but a rank of 20-40, so it is not flagged; the monitor's
# step 0 is not judged anyway.
COLLAPSE_STD_RATIO = 0.01
COLLAPSE_RANK = 1.5
PARTIAL_STD_RATIO = 0.1
PARTIAL_RANK = 4.0


@torch.no_grad()
def embedding_std(z: Tensor) -> float:
    """Mean over dimensions of the batch std of ``normalize(z)`` (``z``: ``[N, d]``, N >= 2)."""
    checks.tensor("z", z, dim=2, min_rows=2)
    u = torch.nn.functional.normalize(z.detach().double(), dim=1)
    return float(u.std(dim=0).mean())


@torch.no_grad()
def effective_rank(z: Tensor) -> float:
    """``exp`` of the entropy of the normalised singular values of the centred ``z`` ``[N, d]``."""
    checks.tensor("z", z, dim=2, min_rows=2)
    x = z.detach().double()
    s = torch.linalg.svdvals(x - x.mean(0, keepdim=True))
    total = s.sum()
    if total <= 0:
        return 1.0  # every row equal: no direction at all, as collapsed as a line
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def collapse_figures(z: Tensor, prefix: str = "") -> dict[str, float]:
    """``{prefix}embedding_std``, ``{prefix}embedding_std_ratio`` and ``{prefix}effective_rank``
    of ``z`` ``[N, d]``."""
    std = embedding_std(z)
    return {
        f"{prefix}embedding_std": std,
        f"{prefix}embedding_std_ratio": std * math.sqrt(z.shape[1]),
        f"{prefix}effective_rank": effective_rank(z),
    }


def collapse_warning(figures: dict[str, float], prefix: str = "", where: str = "") -> str | None:
    """The line a collapsing run prints, or None (the rule above :data:`COLLAPSE_STD_RATIO`)."""
    ratio = figures.get(f"{prefix}embedding_std_ratio")
    rank = figures.get(f"{prefix}effective_rank")
    if ratio is None or rank is None:
        return None
    collapsed = (
        ratio < COLLAPSE_STD_RATIO or rank < COLLAPSE_RANK or (ratio < PARTIAL_STD_RATIO and rank < PARTIAL_RANK)
    )
    if not collapsed:
        return None
    at = f" {where}" if where else ""
    return (
        f"[ctk] collapse{at}: the embedding's normalised std is {ratio:.3f} of a spread one's and its "
        f"effective rank {rank:.2f} (collapsed: std under {COLLAPSE_STD_RATIO}, rank under {COLLAPSE_RANK:g}, "
        f"or both under {PARTIAL_STD_RATIO} and {PARTIAL_RANK:g}); a constant embedding gives the "
        "non-contrastive losses a low value"
    )
