"""SCARF views: random feature corruption from the empirical marginals.

Bahri et al. 2022, "SCARF: Self-supervised contrastive learning using random feature
corruption", Sec. 2 (Method). For a row ``x`` with ``M`` features and a corruption rate ``c``,
a view is made by choosing a subset ``I`` of ``q = floor(c * M)`` feature positions uniformly at
random and replacing each chosen feature by a draw from that feature's empirical marginal
distribution (the value of the same feature in a uniformly drawn training row)::

    x~_j = x_j                          for j not in I
    x~_j = X[r_j, j],  r_j ~ U{1..P}    for j in I,   |I| = q = floor(c * M)

where ``X`` (``[P, M]``) is the training table. Every row and every view gets its own subset
and its own donor rows. SCARF pairs the clean row ``x`` (anchor) with one corrupted view; with
``clean_first_view=True`` the first view is left uncorrupted to obtain that pairing, otherwise
every view is corrupted (the symmetric form the SimCLR-style losses expect).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["corrupted_count", "corruption_mask", "scarf_views"]


def corrupted_count(num_features: int, corruption_rate: float) -> int:
    """``q = floor(c * M)``, the number of features replaced in each view (the small epsilon
    keeps ``0.3 * 10`` from flooring to 2 through rounding error)."""
    if not isinstance(num_features, int) or num_features < 1:
        raise ValueError(f"num_features must be an int >= 1, got {num_features!r}")
    if (
        isinstance(corruption_rate, bool)
        or not isinstance(corruption_rate, (int, float))
        or not 0.0 <= corruption_rate <= 1.0
    ):
        raise ValueError(f"corruption_rate must lie in [0, 1], got {corruption_rate!r}")
    return min(num_features, int(math.floor(corruption_rate * num_features + 1e-9)))


def corruption_mask(
    num_rows: int,
    num_views: int,
    num_features: int,
    corruption_rate: float,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """``[N, V, M]`` boolean mask with exactly ``floor(c * M)`` True entries in every
    ``[n, v, :]`` slice, positions uniform over the subsets of that size (the ``q`` largest of
    ``M`` i.i.d. uniforms form a uniform random ``q``-subset)."""
    q = corrupted_count(num_features, corruption_rate)
    mask = torch.zeros(num_rows, num_views, num_features, dtype=torch.bool, device=device)
    if q == 0 or num_rows == 0:
        return mask
    scores = torch.rand(num_rows, num_views, num_features, generator=generator, device=device)
    return mask.scatter_(-1, scores.topk(q, dim=-1).indices, True)


def scarf_views(
    x: Tensor,
    pool: Tensor,
    num_views: int,
    corruption_rate: float = 0.6,
    *,
    clean_first_view: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``[N, V, M]`` SCARF views of the rows ``x`` (``[N, M]``), corrupted features drawn from
    the empirical marginals of ``pool`` (``[P, M]``, the training table, on ``x``'s device).

    Batched: one ``[N, V, M]`` mask, one ``[N, V, M]`` tensor of donor row indices, one gather
    ``pool[r, j]``; no Python loop over rows.
    """
    if not isinstance(x, Tensor) or x.dim() != 2 or not torch.is_floating_point(x):
        raise ValueError(
            f"x must be a floating [N, M] tensor, got {tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}"
        )
    if not isinstance(pool, Tensor) or pool.dim() != 2 or pool.shape[1] != x.shape[1] or pool.shape[0] < 1:
        raise ValueError(
            f"pool must be a [P >= 1, {x.shape[1]}] tensor (the training rows), got "
            f"{tuple(pool.shape) if isinstance(pool, Tensor) else type(pool).__name__}"
        )
    if pool.device != x.device:
        raise ValueError(f"pool must be on x's device {x.device}, got {pool.device}")
    if isinstance(num_views, bool) or not isinstance(num_views, int) or num_views < 1:
        raise ValueError(f"num_views must be an int >= 1, got {num_views!r}")
    n, m = x.shape
    mask = corruption_mask(n, num_views, m, corruption_rate, generator=generator, device=x.device)
    if clean_first_view:
        mask[:, 0] = False
    donors = torch.randint(pool.shape[0], (n, num_views, m), generator=generator, device=x.device)
    columns = torch.arange(m, device=x.device)
    replacement = pool[donors, columns].to(x.dtype)  # [N, V, M]: feature j of row donors[n, v, j]
    return torch.where(mask, replacement, x[:, None, :].expand(n, num_views, m))
