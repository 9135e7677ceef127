"""Debiased (DCL) and hard-negative (HCL) contrastive losses, in-batch and on score matrices.

METHODS rows 4-5. Both replace the plain negative sum of NT-Xent by an estimate Ng of the sum
over *true* negatives, given the class prior tau+ of a sampled negative sharing the anchor's
class:

    Ng = ( -tau+ N pos + R ) / (1 - tau+),   Ng <- max(Ng, N e^{-1/tau})   (clamp, default on)
    l  = -log( pos / (pos + Ng) ),           pos = e^{s+/tau}

with R = sum of the N negatives e^{s/tau} (DCL) or their importance-weighted sum (HCL). Every
quantity is evaluated in log space (log Ng = log R + log(1 - tau+ N pos / R) - log(1 - tau+)),
so large 1/tau or non-unit inputs neither overflow nor produce NaN: where the estimate is not
positive the clamp bound takes over (``clamp=False`` then raises instead of returning NaN).

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

from toolkit import checks

from ._kernel import _NEG_INF, _RowLogSumExp, _RowLogSumExpRatio
from .infonce import _bool_mask, _in_batch_neg_sim, _in_batch_partner, _pair

__all__ = ["dcl", "hcl", "dcl_scores", "hcl_scores"]


def _check_common(temperature: float, tau_plus: float) -> tuple[float, float]:
    tau = checks.positive("temperature", temperature)
    checks.non_negative("tau_plus", tau_plus)  # type check first: in_range compares blindly
    tp = checks.in_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
    return tau, tp


def _debiased_loss(pos_logit: Tensor, log_r: Tensor, log_n: Tensor | float, tau: float,
                   tau_plus: float, clamp: bool, stats: dict | None = None) -> Tensor:
    """Per-pair -log(pos / (pos + Ng)) from log pos = ``pos_logit`` and log R = ``log_r``
    (vectors over the positive pairs; ``log_n`` is log N, a float or a matching vector)."""
    return _DebiasedTail.apply(pos_logit, log_r, log_n, tau, tau_plus, clamp, stats)


class _DebiasedTail(torch.autograd.Function):
    """The per-pair tail of DCL / HCL as one autograd node (the vector ops would otherwise cost
    ~20 autograd nodes, as much as a pass over the similarity matrix at N = 512).

    With a = log pos, L = log R, r = log(tau+ N) + a - L (the estimate is positive iff r < 0):

        log Ng = max( L + log(1 - e^r) - log(1 - tau+),  log N - 1/tau )      (clamp)
        loss   = softplus(log Ng - a)

    and, with p = sigmoid(log Ng - a) and q = [not clamped] / (1 - e^r),
    d loss / d L = p q and d loss / d a = p (-1 + [not clamped] - q).
    """

    @staticmethod
    def forward(ctx, pos_logit, log_r, log_n, tau, tau_plus, clamp, stats):
        if tau_plus == 0.0:
            log_est, e_r = log_r, None
        else:
            r = (math.log(tau_plus) + log_n) + pos_logit - log_r
            ok = r < 0
            e_r = torch.where(ok, r, torch.full_like(r, -1.0)).exp_()  # e^r, r < 0 where used
            log_est = torch.where(ok, log_r + torch.log1p(-e_r), torch.full_like(r, _NEG_INF))
            log_est = log_est - math.log1p(-tau_plus)
            if not clamp:
                bad = ~ok
                if bad.any():
                    raise ValueError(
                        f"clamp=False but the debiased estimate Ng = (R - tau_plus*N*pos)/"
                        f"(1-tau_plus) is <= 0 for {int(bad.sum())} positive pair(s) "
                        f"(tau_plus={tau_plus!r}); its log is undefined: use clamp=True (the "
                        "papers' default) or a smaller tau_plus")
        if clamp:
            bound = torch.as_tensor(log_n - 1.0 / tau, dtype=log_est.dtype,
                                    device=log_est.device).expand_as(log_est)
            active = log_est < bound
            log_ng = torch.where(active, bound, log_est)
            if stats is not None:
                stats["clamp_active"] = float(active.float().mean())
            kept = (~active).to(log_est.dtype)
        else:
            log_ng, kept = log_est, None
        u = log_ng - pos_logit
        p = torch.sigmoid(u)
        q = kept if kept is not None else torch.ones_like(u)
        if e_r is not None:
            q = q / (1.0 - e_r)  # 1 - e^r > 0 where kept; 1 elsewhere (e^-1)
        grad_l = p * q
        grad_a = p * ((q.new_ones(()) if kept is None else kept) - 1.0 - q)
        ctx.save_for_backward(grad_a, grad_l)
        return torch.logaddexp(u, u.new_zeros(()))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        grad_a, grad_l = ctx.saved_tensors
        return grad * grad_a, grad * grad_l, None, None, None, None, None


def _in_batch(z1: Tensor, z2: Tensor, tau: float, tau_plus: float, beta: float | None,
              clamp: bool, stats: dict | None) -> Tensor:
    _pair("z1", z1, "z2", z2, min_rows=2)
    b = z1.shape[0]
    n_neg = 2 * b - 2
    partner = _in_batch_partner(b, z1.device)
    z = torch.cat([z1, z2])
    if beta is None or beta == 0.0:
        log_r = _RowLogSumExp.apply(z, None, (1.0 / tau,), True, partner, False, None)[0]
    elif beta == 1.0:  # scales (2/tau, 1/tau): one exponential pass, see _RowLogSumExpRatio
        log_r = _RowLogSumExpRatio.apply(z, None, 1.0 / tau, True, partner, False) + math.log(n_neg)
    else:
        # R = sum imp*neg / mean(imp), imp = e^{beta s/tau}:
        # log R = lse((1+beta) s/tau) - lse(beta s/tau) + log N
        lse = _RowLogSumExp.apply(z, None, ((1.0 + beta) / tau, beta / tau), True, partner,
                                  False, None)
        log_r = lse[0] - lse[1] + math.log(n_neg)
    pos = (z1 * z2).sum(dim=1)
    loss = _debiased_loss(torch.cat([pos, pos]) / tau, log_r, math.log(n_neg), tau, tau_plus,
                          clamp, stats=stats).mean()
    if stats is not None:
        stats["pos_sim"] = pos.detach().mean()
        stats["neg_sim"] = _in_batch_neg_sim(z1, z2)
    return loss


def dcl(z1: Tensor, z2: Tensor, temperature: float = 0.5, tau_plus: float = 0.1,
        clamp: bool = True, *, stats: dict | None = None) -> Tensor:
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
            non-positive estimate raises ``ValueError`` instead of returning NaN.
        stats: optional dict receiving ``pos_sim``, ``neg_sim``, ``clamp_active`` (fraction
            of anchors whose Ng is clamped).
    """
    tau, tp = _check_common(temperature, tau_plus)
    return _in_batch(z1, z2, tau, tp, None, bool(clamp), stats)


def hcl(z1: Tensor, z2: Tensor, temperature: float = 0.5, tau_plus: float = 0.1,
        beta: float = 1.0, clamp: bool = True, *, stats: dict | None = None) -> Tensor:
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


def _scores_form(scores: Tensor, positive_mask: Tensor, valid_mask: Tensor | None, tau: float,
                 tau_plus: float, beta: float | None, clamp: bool, stats: dict | None) -> Tensor:
    checks.tensor("scores", scores, dim=2)
    shape = tuple(scores.shape)
    pos = _bool_mask("positive_mask", positive_mask, shape)
    if pos is None:
        raise ValueError("positive_mask must be a bool tensor, got None")
    valid = _bool_mask("valid_mask", valid_mask, shape)
    if valid is not None and (pos & ~valid).any():
        raise ValueError("positive_mask marks candidates that valid_mask excludes; every "
                         "positive must be valid")
    rows = pos.any(dim=1)
    if not rows.any():
        raise ValueError(f"positive_mask has no positive in any of its {shape[0]} rows; "
                         "expected at least one anchor with a positive")
    pos = pos[rows]
    neg = ~pos if valid is None else (valid[rows] & ~pos)
    n_neg = neg.sum(dim=1)
    if (n_neg == 0).any():
        bad = rows.nonzero().flatten()[n_neg == 0]
        raise ValueError(f"anchor(s) {bad[:8].tolist()} have positives but no negative "
                         "(valid and not positive); the debiased estimate needs N >= 1")
    logits = scores[rows] / tau  # entries outside pos | neg are masked out or never read
    neg_logits = logits.masked_fill(~neg, _NEG_INF)
    log_n = n_neg.to(logits.dtype).log()
    if beta is None or beta == 0.0:
        log_r = torch.logsumexp(neg_logits, dim=1)
    else:
        log_r = (torch.logsumexp((1.0 + beta) * neg_logits, dim=1)
                 - torch.logsumexp(beta * neg_logits, dim=1) + log_n)
    # the per-pair formula on the P positive pairs only
    anchor, col = pos.nonzero(as_tuple=True)
    per_pair = _debiased_loss(logits[anchor, col], log_r[anchor], log_n[anchor], tau, tau_plus,
                              clamp, stats=stats)
    per_anchor = logits.new_zeros(pos.shape[0]).index_add(0, anchor, per_pair)
    per_anchor = per_anchor / pos.sum(dim=1)
    if stats is not None:
        with torch.no_grad():
            stats["pos_sim"] = logits[anchor, col].mean() * tau
            stats["neg_sim"] = logits[neg].mean() * tau
    return per_anchor.mean()


def dcl_scores(scores: Tensor, positive_mask: Tensor, valid_mask: Tensor | None = None,
               temperature: float = 0.5, tau_plus: float = 0.1, clamp: bool = True, *,
               stats: dict | None = None) -> Tensor:
    r"""DCL on a score matrix the domain computed itself (quick-thought, CURL).

    For anchor a the negatives are the valid candidates that are not positives, N_a their
    number; for each positive p: pos = e^{s_ap/tau}, Ng as in :func:`dcl` with N = N_a and the
    same clamp N_a e^{-1/tau}, l_ap = -log(pos / (pos + Ng)). Per anchor the mean over its
    positives, then the mean over the anchors with at least one positive. On the SimCLR score
    matrix (valid = not self, positive = other view) this equals :func:`dcl`.

    Args:
        scores: ``[N, C]`` similarities; positive_mask, valid_mask: ``[N, C]`` bool.
        temperature, tau_plus, clamp, stats: as in :func:`dcl`.
    """
    tau, tp = _check_common(temperature, tau_plus)
    return _scores_form(scores, positive_mask, valid_mask, tau, tp, None, bool(clamp), stats)


def hcl_scores(scores: Tensor, positive_mask: Tensor, valid_mask: Tensor | None = None,
               temperature: float = 0.5, tau_plus: float = 0.1, beta: float = 1.0,
               clamp: bool = True, *, stats: dict | None = None) -> Tensor:
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
