"""MoCo v3: InfoNCE between a query batch and the momentum encoder's key batch, the keys of the
other samples as negatives (no queue).

Conventions (docs/methods.md, section Baselines family): one direction,
``k`` a constant (detached here), both sides L2-normalised inside, the paper's symmetrised loss
``ctr(q1, k2) + ctr(q2, k1)`` the caller's sum of two calls. Under DDP the caller gathers the
keys and queries of every rank before the call.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from toolkit import checks

from ._precision import full_precision
from ._validation import _pair

__all__ = ["moco_v3"]


@full_precision
def moco_v3(q: Tensor, k: Tensor, temperature: float = 0.2, *, stats: dict | None = None) -> Tensor:
    r"""MoCo v3's contrastive loss (Chen, Xie & He 2021, Sec. 3, Eq. 1 and Algorithm 1's
    ``ctr``), one direction.

    With q_i and k_j L2-normalised and k a constant:

        l_i  = -q_i.k_i / tau + log sum_j exp(q_i.k_j / tau)
        loss = 2 tau * mean_i l_i

    i.e. cross-entropy of ``q k^T / tau`` against the diagonal, scaled by ``2 tau`` as the
    paper's pseudo-code does (it makes the gradient's size independent of tau). Default
    tau = 0.2 (the paper's ViT setting).

    Args:
        q: ``[N, d]`` queries of the online encoder (N >= 2; gradient flows).
        k: ``[N, d]`` keys of the momentum encoder, row i the positive of q_i (a constant).
        temperature: tau > 0.
        stats: optional dict receiving ``pos_sim`` (mean cosine q_i.k_i) and ``neg_sim``
            (mean cosine q_i.k_j over i != j), device tensors.
    """
    _pair("q", q, "k", k, min_rows=2)
    tau = checks.positive("temperature", temperature)
    qn = F.normalize(q, dim=1)
    kn = F.normalize(k.detach(), dim=1)
    sims = qn @ kn.t()
    n = q.shape[0]
    loss = F.cross_entropy(sims / tau, torch.arange(n, device=q.device))
    if stats is not None:
        with torch.no_grad():
            diagonal = sims.diagonal().sum()
            stats["pos_sim"] = diagonal / n
            stats["neg_sim"] = (sims.sum() - diagonal) / (n * (n - 1))
    return 2.0 * tau * loss
