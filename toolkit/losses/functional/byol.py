"""Predictor against a stop-gradient target: BYOL and SimSiam (cosine regression, no negatives).

Conventions (docs/methods.md, section Baselines family): one direction
each, ``p`` the online branch's predictor output, ``z`` the target branch's projection, which is
a constant (detached here); the papers' symmetrised loss is the caller's sum over the two view
orders. Both normalise inside (the cosine), reduce by the batch mean, and read nothing on the
host.
"""

from __future__ import annotations

from torch import Tensor
from torch.nn import functional as F

from ._precision import full_precision
from ._validation import _pair

__all__ = ["byol", "simsiam"]


def _cosine(p: Tensor, z: Tensor, stop_gradient: bool = True) -> Tensor:
    """``[N]`` cosine of each row of ``p`` with the same row of ``z`` (a constant unless the
    stop-gradient is ablated)."""
    return (F.normalize(p, dim=1) * F.normalize(z.detach() if stop_gradient else z, dim=1)).sum(dim=1)


@full_precision
def byol(p: Tensor, z: Tensor, *, stop_gradient: bool = True, stats: dict | None = None) -> Tensor:
    r"""BYOL's regression loss (Grill et al. 2020, Sec. 3.1, Eq. 2), one direction.

        l_i = || p_i/||p_i|| - sg[z_i]/||z_i|| ||^2 = 2 - 2 cos(p_i, z_i),   loss = mean_i l_i

    ``z`` (the target network's projection) is detached; the paper's L^BYOL adds the term with
    the views swapped, which the caller computes with a second call. 0 when every ``p_i`` points
    along ``z_i``, 4 when opposite.

    Args:
        p: ``[N, d]`` predictions of the online network (gradient flows).
        z: ``[N, d]`` target projections (a constant).
        stop_gradient: False lets the gradient through ``z`` too: the papers' ablation (SimSiam
            Sec. 4.1, Fig. 2: the embedding collapses), never the method itself.
        stats: optional dict receiving ``pos_sim``, the mean cosine (a device tensor).
    """
    _pair("p", p, "z", z)
    cos = _cosine(p, z, stop_gradient)
    if stats is not None:
        stats["pos_sim"] = cos.detach().mean()
    return (2.0 - 2.0 * cos).mean()


@full_precision
def simsiam(p: Tensor, z: Tensor, *, stop_gradient: bool = True, stats: dict | None = None) -> Tensor:
    r"""SimSiam's negative cosine (Chen & He 2021, Sec. 3, Eq. 1 with the stop-gradient of
    Eq. 3), one direction.

        D(p, z) = -mean_i cos(p_i, sg[z_i])

    ``z`` is detached; the paper's L = D(p1, z2)/2 + D(p2, z1)/2 is the caller's average of two
    calls. -1 when every ``p_i`` points along ``z_i``.

    Args:
        p: ``[N, d]`` predictor outputs (gradient flows).
        z: ``[N, d]`` projections of the other view (a constant).
        stop_gradient: False lets the gradient through ``z`` too: the papers' ablation (SimSiam
            Sec. 4.1, Fig. 2: the embedding collapses), never the method itself.
        stats: optional dict receiving ``pos_sim``, the mean cosine (a device tensor).
    """
    _pair("p", p, "z", z)
    cos = _cosine(p, z, stop_gradient)
    if stats is not None:
        stats["pos_sim"] = cos.detach().mean()
    return -cos.mean()
