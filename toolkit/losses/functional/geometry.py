"""Geometric objectives: alignment / uniformity, spectral, CPCL (paper form) and ACA (the
authors' released CPCL code). METHODS rows 6, 7, 23, 24, 25.

Cost. Squared distances come from the Gram form ||x_i||^2 + ||x_j||^2 - 2 x_i.x_j (= 2 - 2 s on
unit vectors), exact for any input; nothing of shape ``[N, N, d]`` is built. The spectral /
CPCL uniformity terms sum (z1_i . z2_j)^2 over all pairs; that sum equals the Frobenius inner
product <z1^T z1, z2^T z2> of two d x d matrices, so when 2d <= B it is computed from those
(O(B d^2) work, O(d^2) memory) and otherwise from the B x B Gram matrix; both are exact.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from toolkit import checks

from ._kernel import _LOG2E, _NEG_INF, _shift_by_row_max
from ._precision import full_precision
from ._validation import _pair, _rows, _same_dtype

__all__ = ["align", "uniform", "align_uniform", "spectral", "cpcl_a", "cpcl_full", "aca"]


# ----------------------------------------------------------------------------- helpers
def _sum_sq_products(a: Tensor, b: Tensor) -> Tensor:
    """sum_{i,j} (a_i . b_j)^2 = ||a b^T||_F^2 = <a^T a, b^T b>_F, by the cheaper route:
    two d x d Gram matrices ((n + m) d^2 work) or the n x m cross Gram (n m d)."""
    n, m, d = a.shape[0], b.shape[0], a.shape[1]
    if (n + m) * d <= n * m:
        return ((a.t() @ a) * (b.t() @ b)).sum()
    return (a @ b.t()).square().sum()


def _cross_view_terms(z1: Tensor, z2: Tensor) -> tuple[Tensor, Tensor]:
    """(mean_i z1_i.z2_i, sum_{i != j} (z1_i . z2_j)^2 / (B (B-1)))."""
    b = z1.shape[0]
    diag = (z1 * z2).sum(dim=1)
    off = (_sum_sq_products(z1, z2) - diag.square().sum()) / (b * (b - 1))
    return diag.mean(), off


def _cross_view_stats(z1: Tensor, z2: Tensor, stats: dict | None) -> None:
    if stats is None:
        return
    with torch.no_grad():
        b = z1.shape[0]
        diag = (z1 * z2).sum()
        stats["pos_sim"] = diag / b
        stats["neg_sim"] = (z1.sum(0) @ z2.sum(0) - diag) / (b * (b - 1))


def _powered_norm(diff: Tensor, alpha: float) -> Tensor:
    """||diff_i||^alpha row-wise, with gradient 0 (not NaN) at diff = 0 for alpha < 2."""
    sq = diff.square().sum(dim=1)
    if alpha == 2.0:
        return sq
    nonzero = sq > 0
    return torch.where(nonzero, torch.where(nonzero, sq, 1.0).pow(alpha / 2.0), 0.0)


# ----------------------------------------------------------------------------- AU-CL
@full_precision
def align(x: Tensor, y: Tensor, alpha: float = 2.0) -> Tensor:
    r"""Alignment loss (Wang & Isola 2020, Sec. 4.1; ssnl/align_uniform; METHODS row 6).

        L_align = mean_i ||x_i - y_i||_2^alpha,     default alpha = 2

    Args:
        x, y: ``[N, d]`` embeddings of positive pairs (used as given).
        alpha: exponent > 0.
    """
    _pair("x", x, "y", y)
    a = checks.positive("alpha", alpha)
    return _powered_norm(x - y, a).mean()


@full_precision
def uniform(x: Tensor, t: float = 2.0) -> Tensor:
    r"""Uniformity loss (Wang & Isola 2020, Sec. 4.1; Wang & Liu Eq. 10; METHODS rows 6, 11).

        L_uniform = log mean_{i<j} exp(-t ||x_i - x_j||_2^2),     default t = 2

    over the C(N, 2) pairs i < j only (as ``torch.pdist``), evaluated as a log-sum-exp (stable
    for any t). Squared distances from the Gram form, exact for non-unit inputs too. Lower is
    more uniform; Wang & Liu's Table 1 prints -L_uniform (``neg_uniformity``).

    Args:
        x: ``[N, d]`` embeddings, N >= 2.
        t: t > 0.
    """
    _rows("x", x, min_rows=2)
    tt = checks.positive("t", t)
    # the off-diagonal set holds every pair i<j twice: same mean
    return _LogSumExpNegSqDists.apply(x, tt) - math.log(x.shape[0] * (x.shape[0] - 1))


def _neg_sq_dist_exponent(x: Tensor, t: float) -> Tensor:
    """-t ||x_i - x_j||^2 log2(e) for all pairs i != j (-inf on the diagonal), as one GEMM with
    two extra columns."""
    c = t * _LOG2E
    sq = torch.linalg.vecdot(x, x).mul_(-c).unsqueeze(1)
    ones = torch.ones_like(sq)
    e = torch.cat([x * (2.0 * c), sq, ones], 1) @ torch.cat([x, ones, sq], 1).t()
    e.diagonal().fill_(_NEG_INF)
    return e


class _LogSumExpNegSqDists(torch.autograd.Function):
    """log sum_{i != j} exp(-t ||x_i - x_j||^2) in one GEMM and one exponential pass.

    The exponent -t (|x_i|^2 + |x_j|^2 - 2 x_i.x_j) (<= 0) is the product of ``[2t x, -t|x|^2,
    1]`` and ``[x, 1, -t|x|^2]`` (base 2: log2 e folded in), so no distance matrix is built
    before the exp. With E the exponentials (0 on the diagonal), S = sum E and r = E 1:

        d/dx = (4t / S) (E x - r * x)          (E symmetric)

    one matmul in the backward, where autograd through distances and ``logsumexp`` needs a
    softmax pass and two matmuls. If S underflows (far-apart points, large t) the exponent is
    recomputed shifted by its maximum (on CUDA it is always shifted so, and nothing is read
    back: :func:`._kernel._shift_by_row_max`). Plain-torch definition: :func:`uniform_reference`.
    """

    @staticmethod
    def forward(ctx, x, t):
        e = _neg_sq_dist_exponent(x, t)
        if _shift_by_row_max(x):  # CUDA: shifted by the max each time, nothing read back to the host
            shift = e.amax()
            r = e.sub_(shift).exp2_().sum(dim=1)
            total = r.sum()
        else:
            r = e.exp2_().sum(dim=1)
            total, shift = r.sum(), 0.0
            if float(total) < torch.finfo(x.dtype).tiny * e.numel() / torch.finfo(x.dtype).eps:
                e = _neg_sq_dist_exponent(x, t)  # underflow: again, shifted by the true max
                shift = float(e.amax())
                r = e.sub_(shift).exp2_().sum(dim=1)
                total = r.sum()
        ctx.save_for_backward(x, e, r, total)
        ctx.t = t
        return total.log() + shift * math.log(2.0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, e, r, total = ctx.saved_tensors
        return (e @ x).sub_(x * r.unsqueeze(1)).mul_(grad * (4.0 * ctx.t) / total), None


@full_precision
def align_uniform(
    x: Tensor,
    y: Tensor,
    align_weight: float = 1.0,
    uniform_weight: float = 1.0,
    alpha: float = 2.0,
    t: float = 2.0,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""AU-CL objective (Wang & Isola 2020, Sec. 4; ssnl/align_uniform ``examples/stl10``):

        L = w_a * L_align(x, y; alpha) + w_u * ( L_uniform(x; t) + L_uniform(y; t) ) / 2

    Defaults alpha = 2, t = 2, w_a = w_u = 1 (CACR's baseline runs use t = 2/3 elsewhere).

    Args:
        x, y: ``[N, d]`` embeddings of the two views (N >= 2).
        align_weight, uniform_weight: w_a, w_u >= 0.
        alpha, t: as in :func:`align`, :func:`uniform`.
        stats: optional dict receiving ``align_loss``, ``uniform_loss`` (the view average)
            and ``pos_sim``.
    """
    _pair("x", x, "y", y, min_rows=2)
    wa = checks.non_negative("align_weight", align_weight)
    wu = checks.non_negative("uniform_weight", uniform_weight)
    la = align(x, y, alpha)
    lu = (uniform(x, t) + uniform(y, t)) / 2
    if stats is not None:
        stats["align_loss"] = la.detach()
        stats["uniform_loss"] = lu.detach()
        stats["pos_sim"] = (x.detach() * y.detach()).sum(dim=1).mean()
    return wa * la + wu * lu


# ----------------------------------------------------------------------------- spectral / CPCL
def _clip_rows(z: Tensor, radius: float) -> Tensor:
    """Rows with ||z|| < radius kept, the others rescaled to norm radius (a per-row factor, so
    only ``[B]`` vectors go through the branch)."""
    norm = z.norm(dim=1, keepdim=True)
    factor = torch.where(norm < radius, torch.ones_like(norm), radius / norm.clamp_min(1e-12))
    return z * factor


@full_precision
def spectral(z1: Tensor, z2: Tensor, mu: float = 1.0, *, stats: dict | None = None) -> Tensor:
    r"""Spectral contrastive loss (HaoChen et al. 2021, Sec. 3, its mini-batch estimate as in
    the official ``models/spectral.py D()``; METHODS row 7).

    Rows with ||z|| >= sqrt(mu) are rescaled to norm sqrt(mu) (the strict ``<`` test of the
    official code: a row exactly at sqrt(mu) goes through the rescaling, so its gradient is
    projected); then

        L = ( -2/B sum_i z1_i.z2_i + 1/(B(B-1)) sum_{i != j} (z1_i.z2_j)^2 ) / mu

    over the cross-view ordered pairs i != j only. Defaults mu = 1 (CIFAR; 10 in the ImageNet
    config). On unit vectors with mu = 1 it equals :func:`cpcl_a` with K = 1.

    Args:
        z1, z2: ``[B, d]`` embeddings (B >= 2).
        mu: mu > 0.
        stats: optional dict receiving ``pos_sim``, ``neg_sim`` (of the clipped rows).
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    m = checks.positive("mu", mu)
    r = math.sqrt(m)
    c1, c2 = _clip_rows(z1, r), _clip_rows(z2, r)
    pos, off = _cross_view_terms(c1, c2)
    _cross_view_stats(c1, c2, stats)
    return (-2.0 * pos + off) / m


@full_precision
def cpcl_a(z1: Tensor, z2: Tensor, K: float = 2.0, *, stats: dict | None = None) -> Tensor:  # noqa: N803
    r"""CPCL-A, the augmentation-overlap loss (Contrastive Principal Component Learning,
    Sec. 4.2, Eq. 5 with N replaced by K, and Algorithm 1; METHODS row 23).

        L = -2/B sum_i z1_i.z2_i + K/(B(B-1)) sum_{i != j} (z1_i.z2_j)^2

    over the cross-view ordered pairs i != j. Default K = 2. K = 1 equals :func:`spectral`
    (mu = 1) on unit vectors. No normalisation or clipping: inputs are used as given.

    Args:
        z1, z2: ``[B, d]`` embeddings of two augmentations (B >= 2).
        K: noise strength K > 0.
        stats: optional dict receiving ``pos_sim``, ``neg_sim``.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    k = checks.positive("K", K)
    pos, off = _cross_view_terms(z1, z2)
    _cross_view_stats(z1, z2, stats)
    return -2.0 * pos + k * off


@full_precision
def cpcl_full(
    zbar: Tensor,
    z1: Tensor,
    z2: Tensor,
    K: float = 2.0,
    alpha: float = 1.0,
    *,  # noqa: N803
    detach_target: bool = False,
    stats: dict | None = None,
) -> Tensor:
    r"""CPCL-Full (CPCL Sec. 4.2, Eqs. 8-9 and Algorithm 1; METHODS row 24):

        L = L_CPCL-A(z1, z2; K) + alpha * mean_i || zbar_i - (z1_i + z2_i)/2 ||_2^2

    with zbar = f(un-augmented x). The projection term is the batch mean of the Eq. 8
    expectation (Algorithm 1 writes it without the 1/B). The target (z1 + z2)/2 is not
    detached (paper form); ``detach_target=True`` stops its gradient. Defaults K = 2,
    alpha = 1 (CIFAR-10; 0.2 for the other datasets).

    Args:
        zbar: ``[B, d]`` embeddings of the natural (un-augmented) samples.
        z1, z2: ``[B, d]`` embeddings of two augmentations (B >= 2).
        K: noise strength > 0; alpha: projection weight >= 0.
        detach_target: stop the gradient through (z1 + z2)/2 in the projection term.
        stats: optional dict receiving ``pos_sim``, ``neg_sim``, ``proj_loss``.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    _rows("zbar", zbar)
    checks.same_shape("zbar", zbar, "z1", z1)
    _same_dtype("zbar", zbar, "z1", z1)
    a = checks.non_negative("alpha", alpha)
    target = (z1 + z2) / 2
    if detach_target:
        target = target.detach()
    proj = (zbar - target).square().sum(dim=1).mean()
    if stats is not None:
        stats["proj_loss"] = proj.detach()
    return cpcl_a(z1, z2, K, stats=stats) + a * proj


@full_precision
def aca(
    zbar: Tensor,
    z1: Tensor,
    z2: Tensor,
    K: float = 1.0,
    lamb: float = 1.0,  # noqa: N803
    temperature: float = 0.5,
    *,
    normalize_projection: bool = False,
    stats: dict | None = None,
) -> Tensor:
    r"""CPCL as released by its authors (ACA, hanlu-nju/AugCA ``model/ACA.py``: ``ACAPCLoss``
    + ``ProjectionLoss``; METHODS row 25).

    With u = [normalize(z1); normalize(z2)] (2B rows), logits l_ab = u_a.u_b / T and p(a) the
    other view of a:

        pc   = -2 mean_a l_{a,p(a)} + K mean_{a, b != a, p(a)} l_ab^2
        proj = mean over B*d of ( zbar - sg[(z1 + z2)/2] )^2         (raw outputs, sg = detach)
        L    = pc + lamb * proj

    The negatives are the 2B(2B-2) remaining logits, cross-view **and same-view**. The code's
    T = 0.5 is the class default (the CLI ``--temperature`` is not passed to it). Relation to the
    paper: pc = 2 [-2 mean cos+ + 2K mean cos-^2], so code K = 1 is paper K = 2 up to a factor 2,
    plus the same-view negatives and a /d projection term with a detached target. Defaults
    K = 1, lamb = 1 (C10/C100; 0.5 STL, 0.1 Tiny), T = 0.5.

    Args:
        zbar: ``[B, d]`` raw outputs for the natural samples.
        z1, z2: ``[B, d]`` raw outputs for the two augmentations (B >= 2).
        K: > 0; lamb: >= 0; temperature: T > 0.
        normalize_projection: the code's ``--proj_norm``: normalise zbar and the target in the
            projection term (off by default, as in the code).
        stats: optional dict receiving ``pos_sim``, ``neg_sim`` (cosines), ``proj_loss``.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    _rows("zbar", zbar)
    checks.same_shape("zbar", zbar, "z1", z1)
    _same_dtype("zbar", zbar, "z1", z1)
    k = checks.positive("K", K)
    lam = checks.non_negative("lamb", lamb)
    tt = checks.positive("temperature", temperature)
    b = z1.shape[0]
    u1, u2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    u = torch.cat([u1, u2])
    pos_cos = (u1 * u2).sum(dim=1)
    all_sq = _sum_sq_products(u, u)
    neg_sq = all_sq - u.square().sum(dim=1).square().sum() - 2 * pos_cos.square().sum()
    pc = -2.0 * pos_cos.mean() / tt + k * neg_sq / (tt * tt * 2 * b * (2 * b - 2))
    target = ((z1 + z2) / 2).detach()
    out = zbar
    if normalize_projection:
        target, out = F.normalize(target, dim=-1), F.normalize(out, dim=-1)
    proj = F.mse_loss(out, target)
    if stats is not None:
        with torch.no_grad():
            n = 2 * b
            total = u.sum(0).square().sum() - u.square().sum() - 2 * pos_cos.sum()
            stats["pos_sim"] = pos_cos.mean().detach()
            stats["neg_sim"] = total / (n * (n - 2))
            stats["proj_loss"] = proj.detach()
    return pc + lam * proj


# ----------------------------------------------------------------------------- plain-torch reference
def uniform_reference(x: Tensor, t: float = 2.0) -> Tensor:
    """Uniformity (Wang & Isola 2020, Sec. 4.1) as the authors write it, ``log mean exp(-t
    pdist(x)^2)`` over the pairs i < j (a log-sum-exp, so large t does not underflow):
    the definition :func:`uniform` computes with ``_LogSumExpNegSqDists``."""
    sq = torch.pdist(x).square()
    return torch.logsumexp(-t * sq, dim=0) - math.log(sq.numel())
