"""Redundancy reduction on batch statistics: Barlow Twins and VICReg.

Conventions (docs/methods.md, section Baselines family): both use the
statistics of the batch they are given, so under DDP the caller gathers the embeddings of every
rank with autograd (an all-gather whose backward returns each rank its slice) before the call;
nothing is read on the host. Both are symmetric in the two branches (one call is the loss).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from toolkit import checks

from ._precision import full_precision
from ._validation import _pair

__all__ = ["barlow_twins", "vicreg"]

_BN_EPS = 1e-5  # torch.nn.BatchNorm1d's default, under the square root
_VAR_EPS = 1e-4  # VICReg's epsilon, under the square root


def _off_diagonal_square_sum(m: Tensor) -> Tensor:
    """sum_{i != j} m_ij^2 of a square matrix (masked, not total minus diagonal: no cancellation)."""
    eye = torch.eye(m.shape[0], dtype=torch.bool, device=m.device)
    return m.square().masked_fill(eye, 0.0).sum()


@full_precision
def barlow_twins(z1: Tensor, z2: Tensor, lambd: float = 0.0051, *, stats: dict | None = None) -> Tensor:
    r"""Barlow Twins (Zbontar et al. 2021, Sec. 2, Eq. 1-2).

    Each dimension of each branch standardised over the batch as ``BatchNorm1d(affine=False)``
    in training mode does (biased variance, eps = 1e-5 under the root):

        zhat_bi = (z_bi - mean_b z_bi) / sqrt(var_b z_bi + 1e-5)
        C_ij    = (1/N) sum_b zhat1_bi zhat2_bj
        loss    = sum_i (1 - C_ii)^2 + lambd sum_{i != j} C_ij^2

    With eps = 0, C is Eq. 2's cross-correlation of the centred branches; the eps is that of the
    authors' code (``nn.BatchNorm1d`` without affine parameters). Default lambd = 0.0051 (the
    authors' code; Sec. 4 gives 5e-3). Not a mean over anything: the sums over dimensions are
    the loss, as in the paper.

    Args:
        z1, z2: ``[N, D]`` projections of the two views (N >= 2; gradient flows into both).
        lambd: weight of the redundancy-reduction term, >= 0.
        stats: optional dict receiving ``on_diag`` (sum_i (1 - C_ii)^2) and ``off_diag``
            (sum_{i != j} C_ij^2, unweighted), device tensors.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    lambd = checks.non_negative("lambd", lambd)
    n = z1.shape[0]

    def standardise(z: Tensor) -> Tensor:
        var, mean = torch.var_mean(z, dim=0, correction=0)
        return (z - mean) * torch.rsqrt(var + _BN_EPS)

    c = standardise(z1).t() @ standardise(z2) / n
    on_diag = (1.0 - c.diagonal()).square().sum()
    off_diag = _off_diagonal_square_sum(c)
    if stats is not None:
        stats["on_diag"] = on_diag.detach()
        stats["off_diag"] = off_diag.detach()
    return on_diag + lambd * off_diag


@full_precision
def vicreg(
    z1: Tensor,
    z2: Tensor,
    sim_coeff: float = 25.0,
    std_coeff: float = 25.0,
    cov_coeff: float = 1.0,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""VICReg (Bardes, Ponce & LeCun 2022, Sec. 3, Eq. 1-6), in the form of the authors' code.

    With N rows, D dimensions, Var the unbiased variance over the batch and Cov(Z) =
    (Z - mean Z)^T (Z - mean Z) / (N - 1):

        s    = (1/(N D)) sum_{b,i} (z1_bi - z2_bi)^2                            (invariance)
        v(Z) = (1/D) sum_i relu(1 - sqrt(Var(Z_:i) + 1e-4))                      (variance)
        c(Z) = (1/D) sum_{i != j} Cov(Z)_ij^2                                    (covariance)
        loss = sim_coeff s + std_coeff [v(Z1) + v(Z2)] / 2 + cov_coeff [c(Z1) + c(Z2)]

    The paper's Eq. 6 writes the invariance as a sum over dimensions (Eq. 5) and adds
    v(Z1) + v(Z2); the authors' released code averages the squared error over N D and the two
    hinges over the branches, which is what is computed here. Defaults: the paper's
    lambda = mu = 25, nu = 1 (gamma = 1 and epsilon = 1e-4 fixed).

    Args:
        z1, z2: ``[N, D]`` expander outputs of the two views (N >= 2; gradient flows into both).
        sim_coeff, std_coeff, cov_coeff: the weights lambda, mu, nu, each >= 0.
        stats: optional dict receiving the unweighted terms ``invariance`` (s), ``variance``
            ([v(Z1) + v(Z2)] / 2) and ``covariance`` (c(Z1) + c(Z2)), device tensors.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    sim_coeff = checks.non_negative("sim_coeff", sim_coeff)
    std_coeff = checks.non_negative("std_coeff", std_coeff)
    cov_coeff = checks.non_negative("cov_coeff", cov_coeff)
    n, d = z1.shape

    invariance = F.mse_loss(z1, z2)

    def variance_and_covariance(z: Tensor) -> tuple[Tensor, Tensor]:
        centred = z - z.mean(dim=0)
        var = centred.square().sum(dim=0) / (n - 1)
        hinge = F.relu(1.0 - torch.sqrt(var + _VAR_EPS)).mean()
        cov = centred.t() @ centred / (n - 1)
        return hinge, _off_diagonal_square_sum(cov) / d

    v1, c1 = variance_and_covariance(z1)
    v2, c2 = variance_and_covariance(z2)
    variance = (v1 + v2) / 2
    covariance = c1 + c2
    if stats is not None:
        stats["invariance"] = invariance.detach()
        stats["variance"] = variance.detach()
        stats["covariance"] = covariance.detach()
    return sim_coeff * invariance + std_coeff * variance + cov_coeff * covariance
