"""Debiased (DCL) and hard-negative (HCL) contrastive losses, in-batch and on score matrices.

METHODS rows 4-5. Both replace the plain negative sum of NT-Xent by an estimate Ng of the sum
over *true* negatives, given the class prior tau+ of a sampled negative sharing the anchor's
class:

    Ng = ( -tau+ N pos + R ) / (1 - tau+),   Ng <- max(Ng, N e^{-1/tau})   (clamp, default on)
    l  = -log( pos / (pos + Ng) ),           pos = e^{s+/tau}

with R = sum of the N negatives e^{s/tau} (DCL) or their importance-weighted sum (HCL). Every
quantity is evaluated in log space (log Ng = log R + log(1 - tau+ N pos / R) - log(1 - tau+)),
so large 1/tau or non-unit inputs neither overflow nor produce NaN: where the estimate is not
positive the clamp bound takes over (``clamp=False`` then raises instead of returning NaN, on
the CPU; on a GPU that check would read the estimate back, so the loss is NaN there, and the
trainer's non-finite check reports it at its next log step). Records are device tensors.

Limit identities (tested): with ``tau_plus=0``, and with ``beta=0`` for HCL, both reduce to
:func:`~toolkit.losses.functional.nt_xent`. With the clamp on this holds whenever the clamp is
inactive, i.e. when mean_b e^{s_ab/tau} >= e^{-1/tau} for every anchor; that is always the
case for unit vectors (s_ab >= -1), so on normalised embeddings the identities are exact. For
HCL the importance-weighted mean of e^{s/tau} is also >= min_b e^{s_ab/tau} >= e^{-1/tau}, so
``tau_plus=0`` leaves the clamp inactive on unit vectors for every beta.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from toolkit import checks

from ._kernel import _NEG_INF, _checks_read, _InBatchLoss
from ._precision import full_precision
from ._validation import _pair, _score_masks
from .infonce import _in_batch_neg_sim

__all__ = ["dcl", "hcl", "dcl_scores", "hcl_scores"]


def _check_common(temperature: float, tau_plus: float) -> tuple[float, float]:
    tau = checks.positive("temperature", temperature)
    checks.non_negative("tau_plus", tau_plus)  # type check first: in_range compares blindly
    tp = checks.in_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
    return tau, tp


def _tail(
    pos_logit: Tensor,
    log_r: Tensor,
    log_n: Tensor | float,
    tau: float,
    tau_plus: float,
    clamp: bool,
    stats: dict | None,
    pairs: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair -log(pos / (pos + Ng)) and its derivatives, from a = log pos = ``pos_logit`` and
    L = log R = ``log_r`` (tensors over the positive pairs, or over every entry with ``pairs``
    marking the positive pairs among them; ``log_n`` = log N, a float or a broadcastable
    tensor). With r = log(tau+ N) + a - L (the estimate is positive iff r < 0):

        log Ng = max( L + log(1 - e^r) - log(1 - tau+),  log N - 1/tau )      (clamp)
        loss   = softplus(log Ng - a)

    and, with p = sigmoid(log Ng - a), k = [not clamped], q = k / (1 - e^r):
    d loss / d L = p q and d loss / d a = p (k - 1 - q), i.e. -p q where the estimate is kept
    and -p where the clamp holds. Returns (loss, d/da, d/dL).

    ``clamp_active`` (the fraction of pairs clamped) goes to ``stats`` as a device tensor. The
    ``clamp=False`` check reads the estimate, so it raises on the CPU only; on a GPU a pair
    with no positive estimate makes the loss NaN (its log), which the trainer's non-finite
    check reports at its next log step.
    """
    if tau_plus == 0.0:
        log_est, keep_share = log_r, None
    else:
        r = (pos_logit - log_r).add_(math.log(tau_plus) + log_n)
        keep_share = torch.rsub(r.exp_(), 1.0)  # 1 - e^r = estimate / R (negative: no estimate)
        bad = keep_share <= 0 if pairs is None else (keep_share <= 0) & pairs
        if not clamp and _checks_read(bad) and bool(bad.any()):
            raise ValueError(
                f"clamp=False but the debiased estimate Ng = (R - tau_plus*N*pos)/"
                f"(1-tau_plus) is <= 0 for {int(bad.sum())} positive pair(s) "
                f"(tau_plus={tau_plus!r}); its log is undefined: use clamp=True (the "
                "papers' default) or a smaller tau_plus"
            )
        # NaN where 1 - e^r < 0: never kept below, never returned
        log_est = keep_share.log().add_(log_r).sub_(math.log1p(-tau_plus))
    kept = None
    if clamp:
        bound = log_n - 1.0 / tau
        kept = log_est >= bound  # False at NaN
        log_est = torch.where(kept, log_est, bound)
        if stats is not None:  # a device tensor: read with the records, at log steps
            with torch.no_grad():
                clamped = ~kept if pairs is None else ~kept & pairs
                stats["clamp_active"] = clamped.sum() / (clamped.numel() if pairs is None else pairs.sum())
    u = log_est - pos_logit
    p = torch.sigmoid(u)
    grad_l = p if keep_share is None else p / keep_share
    if kept is not None:
        grad_l = torch.where(kept, grad_l, 0.0)
        grad_a = torch.where(kept, grad_l, p).neg_()  # kept: -p q; clamped: -p
    else:
        grad_a = grad_l.neg()
    return F.softplus(u, threshold=40.0), grad_a, grad_l


class _DebiasedTail(torch.autograd.Function):
    """:func:`_tail` as one autograd node (the score forms; the in-batch forms run it inside
    ``_InBatchLoss``). Plain-torch definition: :func:`debiased_scores_reference`."""

    @staticmethod
    def forward(ctx, pos_logit, log_r, log_n, tau, tau_plus, clamp, stats, pairs):
        loss, grad_a, grad_l = _tail(pos_logit, log_r, log_n, tau, tau_plus, clamp, stats, pairs)
        ctx.save_for_backward(grad_a, grad_l)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        grad_a, grad_l = ctx.saved_tensors
        return grad * grad_a, grad * grad_l, None, None, None, None, None, None


def _in_batch(
    z1: Tensor, z2: Tensor, tau: float, tau_plus: float, beta: float | None, clamp: bool, stats: dict | None
) -> Tensor:
    _pair("z1", z1, "z2", z2, min_rows=2)
    log_n = math.log(2 * z1.shape[0] - 2)
    c = 1.0 / tau
    if beta is None or beta == 0.0:
        scales, offset = (c,), 0.0
    else:
        # R = sum imp*neg / mean(imp), imp = e^{beta s/tau}:
        # log R = lse((1+beta) s/tau) - lse(beta s/tau) + log N   (beta = 1: scales (2c, c))
        scales, offset = ((1.0 + beta) * c, beta * c), log_n

    def head(pos_logit: Tensor, stat: Tensor):
        return _tail(pos_logit, stat + offset, log_n, tau, tau_plus, clamp, stats)

    loss = _InBatchLoss.apply(z1, z2, c, scales, False, None, head)
    if stats is not None:
        stats["pos_sim"] = torch.linalg.vecdot(z1.detach(), z2.detach()).mean()
        stats["neg_sim"] = _in_batch_neg_sim(z1, z2)
    return loss


@full_precision
def dcl(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    clamp: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""Debiased contrastive loss, 2B form (Chuang et al. 2020, the debiased objective with its
    lower bound e^{-1/t}; the authors' chingyaoc/DCL ``main.py``; METHODS row 4).

    z = [z1; z2], pos_a = e^{s_{a,p(a)}/tau}, N = 2B - 2 negatives per anchor (both views of the
    other images):

        Ng_a = ( -tau+ N pos_a + sum_{b != a, p(a)} e^{s_ab/tau} ) / (1 - tau+)
        Ng_a <- max(Ng_a, N e^{-1/tau})                       (clamp=True)
        loss = mean_{a < 2B} -log( pos_a / (pos_a + Ng_a) )

    Defaults tau = 0.5, tau+ = 0.1 (B = 256 in the paper), as in the authors' code.
    ``tau_plus=0`` gives :func:`nt_xent` (exactly on unit vectors, see the module docstring).

    Args:
        z1, z2: ``[B, d]`` embeddings of the two views (B >= 2), used as given.
        temperature: tau > 0.
        tau_plus: class prior tau+ in [0, 1).
        clamp: clamp Ng at N e^{-1/tau} (on in the authors' code); with ``clamp=False`` a
            non-positive estimate raises ``ValueError`` instead of returning NaN (on the CPU;
            a NaN loss on a GPU, see the module docstring).
        stats: optional dict receiving ``pos_sim``, ``neg_sim``, ``clamp_active`` (fraction
            of anchors whose Ng is clamped), device tensors.
    """
    tau, tp = _check_common(temperature, tau_plus)
    return _in_batch(z1, z2, tau, tp, None, bool(clamp), stats)


@full_precision
def hcl(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    beta: float = 1.0,
    clamp: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""Hard-negative contrastive loss, 2B form (Robinson et al. 2021, the importance-weighted
    debiased objective; the ``criterion`` of joshr17/HCL ``image/main.py``; METHODS row 5).

    As :func:`dcl` with the negative sum replaced by an importance-weighted one:

        imp_ab = e^{beta s_ab / tau},   R_a = sum_b imp_ab e^{s_ab/tau} / mean_b imp_ab
        Ng_a = ( -tau+ N pos_a + R_a ) / (1 - tau+),  same clamp,  loss = mean over 2B

    over the N = 2B - 2 negatives. The weights are **not detached** (the gradient flows through
    them, as in the authors' code) and normalised by their mean (i.e. by N). Defaults tau = 0.5,
    tau+ = 0.1, beta = 1.0. ``beta=0`` gives :func:`dcl`; ``beta=0, tau_plus=0`` gives
    :func:`nt_xent`.

    Args:
        z1, z2: ``[B, d]`` embeddings of the two views (B >= 2).
        temperature: tau > 0.
        tau_plus: class prior in [0, 1).
        beta: concentration beta >= 0 of the hardness weights.
        clamp: as in :func:`dcl`.
        stats: optional dict receiving ``pos_sim``, ``neg_sim``, ``clamp_active``.
    """
    tau, tp = _check_common(temperature, tau_plus)
    b = checks.non_negative("beta", beta)
    return _in_batch(z1, z2, tau, tp, b, bool(clamp), stats)


def _scores_form(
    scores: Tensor,
    positive_mask: Tensor,
    valid_mask: Tensor | None,
    tau: float,
    tau_plus: float,
    beta: float | None,
    clamp: bool,
    stats: dict | None,
) -> Tensor:
    pos, valid, rows = _score_masks(scores, positive_mask, valid_mask)
    neg = (~pos if valid is None else valid & ~pos) & rows.unsqueeze(1)  # of the counted anchors
    n_neg = neg.sum(dim=1)
    lacking = (n_neg == 0) & rows  # anchors with positives and no negative
    if _checks_read(scores) and lacking.any():
        bad = lacking.nonzero().flatten()
        raise ValueError(
            f"anchor(s) {bad[:8].tolist()} have positives but no negative "
            "(valid and not positive); the debiased estimate needs N >= 1"
        )
    logits = scores / tau  # entries outside pos | neg are masked out or never read
    neg_logits = logits.masked_fill(~neg, _NEG_INF)
    # anchors without a positive weigh 0; their statistics are set finite (0) so that no NaN
    # reaches the backward through the masked entries. An anchor with positives and no negative
    # (raised above on the CPU) makes the loss NaN below: the clamp would quietly give it 0.
    log_n = torch.where(rows, n_neg.to(logits.dtype).log(), 0.0)
    if beta is None or beta == 0.0:
        log_r = torch.logsumexp(neg_logits, dim=1)
    else:
        log_r = torch.logsumexp((1.0 + beta) * neg_logits, dim=1) - torch.logsumexp(beta * neg_logits, dim=1) + log_n
    log_r = torch.where(rows, log_r, 0.0).unsqueeze(1)
    log_n = log_n.unsqueeze(1)
    # the per-pair formula on every entry, the positive pairs kept: no pair is selected by a
    # mask, so nothing is read back. The other entries get a = L - log N (r = log tau+ < 0: a
    # positive estimate), finite whatever the scores hold there, and weigh 0.
    a = torch.where(pos, logits, log_r - log_n)
    per_pair = _DebiasedTail.apply(a, log_r, log_n, tau, tau_plus, clamp, stats, pos)
    n_pos = pos.sum(dim=1)
    per_anchor = torch.where(pos, per_pair, 0.0).sum(dim=1) / n_pos.clamp_min(1)
    if stats is not None:
        with torch.no_grad():
            stats["pos_sim"] = torch.where(pos, scores, 0.0).sum() / n_pos.sum()
            stats["neg_sim"] = torch.where(neg, scores, 0.0).sum() / n_neg.sum()
    return (per_anchor.sum() / rows.sum()).masked_fill(lacking.any(), math.nan)


@full_precision
def dcl_scores(
    scores: Tensor,
    positive_mask: Tensor,
    valid_mask: Tensor | None = None,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    clamp: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""DCL on a score matrix the domain computed itself (quick-thought, CURL).

    For anchor a the negatives are the valid candidates that are not positives, N_a their
    number; for each positive p: pos = e^{s_ap/tau}, Ng as in :func:`dcl` with N = N_a and the
    same clamp N_a e^{-1/tau}, l_ap = -log(pos / (pos + Ng)). Per anchor the mean over its
    positives, then the mean over the anchors with at least one positive. On the SimCLR score
    matrix (valid = not self, positive = other view) this equals :func:`dcl`. Every entry is
    computed and the pairs weighted, none selected, so nothing is read back on a GPU; the mask
    checks raise on the CPU only (an anchor with positives and no negative: a NaN loss on a GPU;
    see :func:`~toolkit.losses.functional.info_nce_scores` for the others).

    Args:
        scores: ``[N, C]`` similarities; positive_mask, valid_mask: ``[N, C]`` bool.
        temperature, tau_plus, clamp, stats: as in :func:`dcl`.
    """
    tau, tp = _check_common(temperature, tau_plus)
    return _scores_form(scores, positive_mask, valid_mask, tau, tp, None, bool(clamp), stats)


@full_precision
def hcl_scores(
    scores: Tensor,
    positive_mask: Tensor,
    valid_mask: Tensor | None = None,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    beta: float = 1.0,
    clamp: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""HCL on a score matrix: :func:`dcl_scores` with R_a = sum_b imp_ab e^{s_ab/tau} /
    mean_b imp_ab over the anchor's N_a negatives, imp_ab = e^{beta s_ab/tau} (not detached).
    On the SimCLR score matrix this equals :func:`hcl`.

    Args:
        scores: ``[N, C]`` similarities; positive_mask, valid_mask: ``[N, C]`` bool.
        temperature, tau_plus, beta, clamp, stats: as in :func:`hcl`.
    """
    tau, tp = _check_common(temperature, tau_plus)
    b = checks.non_negative("beta", beta)
    return _scores_form(scores, positive_mask, valid_mask, tau, tp, b, bool(clamp), stats)


# ----------------------------------------------------------------------------- plain-torch references
# The definitions the log-space kernels compute, in the exponential space of the authors' code:
# what to read for the formula and what the tests hold the kernels to (float64 keeps e^{s/tau}
# finite for the test inputs). Not for training: e^{s/tau} overflows float32 at s/tau > 88.
def debiased_scores_reference(
    scores: Tensor,
    positive_mask: Tensor,
    valid_mask: Tensor | None = None,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    beta: float | None = None,
    clamp: bool = True,
) -> Tensor:
    """DCL (Chuang et al. 2020, the debiased objective) and, with ``beta``, HCL (Robinson et
    al. 2021, the importance-weighted objective) on a score matrix. Anchor a has N_a
    negatives (valid, not positive); for each positive p:

        R_a  = sum_n e^{s_an/tau}                      (DCL)
             = sum_n imp_an e^{s_an/tau} / mean_n imp_an,  imp = e^{beta s/tau}   (HCL)
        Ng   = max( (-tau+ N_a e^{s_ap/tau} + R_a) / (1 - tau+),  N_a e^{-1/tau} )  (clamp)
        l_ap = -log( e^{s_ap/tau} / (e^{s_ap/tau} + Ng) )

    mean over each anchor's positives, then over the anchors that have one. The in-batch
    forms are this on the SimCLR score matrix (:func:`dcl_reference`)."""
    valid = torch.ones_like(positive_mask) if valid_mask is None else valid_mask
    neg = valid & ~positive_mask
    e = torch.exp(scores / temperature)
    n_neg = neg.sum(dim=1).to(e.dtype)
    if beta is None:
        r = (e * neg).sum(dim=1)
    else:
        imp = torch.exp(beta * scores / temperature) * neg
        r = (imp * e).sum(dim=1) / (imp.sum(dim=1) / n_neg)
    a, p = positive_mask.nonzero(as_tuple=True)  # the positive pairs (a, p)
    pos = e[a, p]
    ng = (-tau_plus * n_neg[a] * pos + r[a]) / (1 - tau_plus)
    if clamp:
        ng = torch.maximum(ng, n_neg[a] * math.exp(-1.0 / temperature))
    per_pair = -torch.log(pos / (pos + ng))
    per_anchor = torch.zeros_like(n_neg).index_add(0, a, per_pair) / positive_mask.sum(dim=1)
    return per_anchor[positive_mask.any(dim=1)].mean()


def dcl_reference(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.5,
    tau_plus: float = 0.1,
    beta: float | None = None,
    clamp: bool = True,
) -> Tensor:
    """In-batch DCL / HCL (2B form): :func:`debiased_scores_reference` on s = z z^T with
    z = [z1; z2], the other view as the positive and self left out (N = 2B - 2).
    :func:`dcl` and :func:`hcl` compute it with ``_InBatchLoss`` in log space."""
    z = torch.cat([z1, z2])
    n = z.shape[0]
    idx = torch.arange(n, device=z.device)
    pos = torch.zeros(n, n, dtype=torch.bool, device=z.device)
    pos[idx, (idx + n // 2) % n] = True
    valid = ~torch.eye(n, dtype=torch.bool, device=z.device)
    return debiased_scores_reference(z @ z.t(), pos, valid, temperature, tau_plus, beta, clamp)
