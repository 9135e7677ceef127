"""NNCLR: InfoNCE with the nearest neighbour of one view, drawn from a support set of past
embeddings, as the positive of the other view.

Conventions (docs/methods.md, section Baselines family): one direction
(the paper's symmetrised loss is the caller's sum of the calls with the views swapped); the
support set is a constant kept by the caller (a queue of past ``z1``); every input is
L2-normalised inside; the neighbour is chosen on the device (an ``argmax``), nothing is read on
the host.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from toolkit import checks

from ._precision import full_precision
from ._validation import _pair, _rows, _same_dtype

__all__ = ["nnclr"]


@full_precision
def nnclr(z1: Tensor, z2: Tensor, support: Tensor, temperature: float = 0.1, *, stats: dict | None = None) -> Tensor:
    r"""NNCLR's loss (Dwibedi et al. 2021, Sec. 3, Eq. 2), one direction.

    With every row L2-normalised, NN(z1_i) = argmax_{s in support} cos(z1_i, s) (a constant)
    and tau the temperature:

        l_i  = -NN(z1_i).z2_i / tau + log sum_j exp(NN(z1_i).z2_j / tau)
        loss = mean_i l_i

    i.e. cross-entropy of ``NN(z1) z2^T / tau`` against the diagonal. The neighbour carries no
    gradient and ``z1`` enters only through its choice, so the gradient flows into ``z2`` alone
    (``z1`` gets none; its own gradient comes from the swapped call). Ties go to the first
    maximal support row on the CPU. Default tau = 0.1 (the paper's); the paper's support set
    holds 98,304 embeddings.

    Args:
        z1: ``[B, d]`` embeddings whose neighbours are looked up.
        z2: ``[B, d]`` embeddings of the other view (B >= 2; gradient flows).
        support: ``[M, d]`` support set (a constant).
        temperature: tau > 0.
        stats: optional dict receiving ``pos_sim`` (mean cosine NN(z1_i).z2_i) and ``nn_sim``
            (mean cosine of z1_i with its neighbour), device tensors.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    _rows("support", support)
    checks.same_width("z1", z1, "support", support)
    _same_dtype("z1", z1, "support", support)
    tau = checks.positive("temperature", temperature)
    with torch.no_grad():
        s = F.normalize(support.detach(), dim=1)
        to_support = F.normalize(z1.detach(), dim=1) @ s.t()  # [B, M]
        nearest = to_support.argmax(dim=1)
        anchor = s.index_select(0, nearest)  # [B, d], a constant
    sims = anchor @ F.normalize(z2, dim=1).t()
    loss = F.cross_entropy(sims / tau, torch.arange(z1.shape[0], device=z1.device))
    if stats is not None:
        with torch.no_grad():
            stats["pos_sim"] = sims.diagonal().mean()
            stats["nn_sim"] = to_support.gather(1, nearest[:, None]).mean()
    return loss
