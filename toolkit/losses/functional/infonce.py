"""The InfoNCE family: score-level InfoNCE, NT-Xent (SimCLR 2B form), MoCo InfoNCE, CMC.

Conventions (docs/methods.md, section InfoNCE family): ``tau`` divides similarities, the
positive stays in the partition, MoCo keys and queue rows are constants (detached), inputs are
used as given (no L2 normalisation here: the encoder head does it), reduction is the batch
mean.

Cost. The queue form goes through ``_kernel._RowLogSumExp`` and the in-batch form through
``_kernel._InBatchLoss``, autograd functions with hand-written backwards: one matmul for the
similarity matrix (1/tau applied by the GEMM, in base 2: ``exp2`` is ~2x faster than ``exp``
on CPU), -inf written at self / the excluded partner, a shift known before the product and
one exponential pass in place; a selector's keep-mask zeroes entries after the exp
(``torch.where`` into the same buffer: no gathers, and no exp(-inf), which is ~10x slower on
CPU). The queue backward is the bound's matmul with the per-row softmax factors applied to
``[n, d]`` operands, never to the ``[n, m]`` matrix; the in-batch backward is one matmul with
the symmetrised gradient matrix (two with a keep-mask). Peak memory is one to three
``[n, m]`` matrices; nothing of shape ``[n, m, d]`` is ever built.

Host reads. On a GPU nothing is read back: the records are device tensors (the trainer reads
them at log steps), and the checks that need a value of the inputs (an anchor whose mask keeps
no negative, the score forms' masks) run on the CPU only, where reading costs nothing; on a
GPU a failed check makes the loss NaN or infinite, which the trainer's non-finite check
reports at its next log step (``_kernel._checks_read``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from toolkit import checks

from ._kernel import _NEG_INF, _checks_read, _in_batch_partner, _InBatchLoss, _RowLogSumExp
from ._precision import full_precision
from ._validation import _bool_mask, _pair, _rows, _same_dtype, _score_masks

__all__ = ["info_nce_scores", "nt_xent", "moco_infonce", "cmc"]


# ----------------------------------------------------------------------------- checks
def _empty_rows(name: str, kept: Tensor) -> Tensor | None:
    """``kept`` a bool ``[n, m]`` mask of kept negatives: every row needs one (the uint8 row max
    is ~25x faster than a bool ``any`` / ``sum`` on CPU). Where a check may read (the CPU,
    :func:`._kernel._checks_read`) a row without one raises here, naming it; elsewhere nothing
    is read: the number of such rows is returned as a device tensor, for :func:`_poison` and the
    records (``anchors_without_negatives``)."""
    empty = kept.view(torch.uint8).amax(dim=1) == 0
    if not _checks_read(kept):
        return empty.sum()
    rows = empty.nonzero().flatten()
    if rows.numel():
        raise ValueError(
            f"{name} keeps no candidate negative for anchor(s) "
            f"{rows[:8].tolist()}{' ...' if rows.numel() > 8 else ''}; "
            "expected at least one kept negative per anchor"
        )
    return None


def _poison(loss: Tensor, empty: Tensor | None, stats: dict | None) -> Tensor:
    """The loss, NaN where :func:`_empty_rows` counted an anchor without negatives (on a GPU the
    trainer's non-finite check then stops the run at its next log step, the count in the
    records it prints), the gradient untouched."""
    if empty is None:
        return loss
    if stats is not None:
        stats["anchors_without_negatives"] = empty
    return loss.masked_fill(empty > 0, math.nan)


def _in_batch_neg_sim(z1: Tensor, z2: Tensor) -> Tensor:
    """Mean similarity over the 2B(2B-2) in-batch negative pairs, without the 2B x 2B matrix:
    sum_{a,b} s_ab = |sum z|^2, minus the diagonal and the 2B positive entries."""
    z = torch.cat([z1, z2]).detach().double()
    n = z.shape[0]
    total = z.sum(0).square().sum() - z.square().sum() - 2 * (z1.detach().double() * z2.detach().double()).sum()
    return (total / (n * (n - 2))).to(z1.dtype)


# ----------------------------------------------------------------------------- losses
@full_precision
def info_nce_scores(
    scores: Tensor,
    positive_mask: Tensor,
    valid_mask: Tensor | None = None,
    temperature: float = 1.0,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""Multi-positive InfoNCE on a score matrix the domain computed itself.

    For anchor a with positives P(a) and valid candidates V(a) (P(a) is a subset of V(a)):

        l_a = (1/|P(a)|) sum_{p in P(a)} [ -s_ap / tau + log sum_{c in V(a)} exp(s_ac / tau) ]

    and the loss is the mean of l_a over the anchors with at least one positive (anchors
    without a positive are skipped; an error if none has one). The positive stays in the
    denominator. Quick-thought (Logeswaran & Lee 2018: a softmax over the candidate
    sentences with the neighbours as positives, tau = 1) and CURL (Laskin et al. 2020:
    bilinear logits q W k^T with the diagonal as positives) both reduce to this. With the
    SimCLR score matrix (valid = not self, positive = the other view) it equals
    :func:`nt_xent`; with ``[q.k | q.Q^T]`` and the first column positive it equals
    :func:`moco_infonce`. Evaluated as one fused log-softmax per row.

    Args:
        scores: ``[N, C]`` similarities (entries outside ``valid_mask`` are ignored, they may
            hold anything, even -inf).
        positive_mask: ``[N, C]`` bool, the positives of each anchor; they must be valid.
        valid_mask: ``[N, C]`` bool, the candidates in the partition; ``None`` = all.
        temperature: tau > 0 (default 1, the quick-thought / CURL setting).
        stats: optional dict receiving ``pos_sim`` and ``neg_sim`` (mean score of positives
            and of valid non-positives of the counted anchors; without any such negative,
            left out on the CPU and NaN on a GPU, where leaving it out would read the count).

    The checks of the masks read them, so they raise on the CPU only (``_score_masks``); on a
    GPU a positive outside ``valid_mask`` makes the loss infinite and no anchor with a
    positive makes it NaN (0 / 0), which the trainer's non-finite check reports.
    """
    pos, valid, rows = _score_masks(scores, positive_mask, valid_mask)
    tau = checks.positive("temperature", temperature)
    logits = scores / tau
    if valid is not None:  # rows without a positive keep every column: finite, and weighted 0
        logits = logits.masked_fill(~(valid | ~rows.unsqueeze(1)), _NEG_INF)
    # l_a = -mean_{p in P(a)} log softmax_V(a)(s_a / tau)_p   (one fused log-softmax); every row
    # is computed and the anchors without a positive weigh 0: no row is selected by a mask, so
    # nothing is read back to the host
    log_p = torch.log_softmax(logits, dim=1)
    n_pos = pos.sum(dim=1)
    per_anchor = -torch.where(pos, log_p, 0.0).sum(dim=1) / n_pos.clamp_min(1)
    if stats is not None:
        with torch.no_grad():
            neg = (~pos if valid is None else (valid & ~pos)) & rows.unsqueeze(1)
            stats["pos_sim"] = _masked_mean(scores, pos)
            n_neg = neg.sum()
            if not _checks_read(scores):
                stats["neg_sim"] = _masked_mean(scores, neg, n_neg)  # NaN without any negative
            elif n_neg:
                stats["neg_sim"] = _masked_mean(scores, neg, n_neg)
    return per_anchor.sum() / rows.sum()  # 0 / 0 (NaN) where no anchor has a positive, off the CPU


def _masked_mean(x: Tensor, mask: Tensor, count: Tensor | None = None) -> Tensor:
    """The mean of ``x`` over ``mask`` without selecting (no read of the mask's count)."""
    return torch.where(mask, x, 0.0).sum() / (mask.sum() if count is None else count)


@full_precision
def nt_xent(
    z1: Tensor, z2: Tensor, temperature: float = 0.5, *, neg_mask: Tensor | None = None, stats: dict | None = None
) -> Tensor:
    r"""NT-Xent, SimCLR 2B form (Chen et al. 2020, Sec. 2.1, Eq. 1; METHODS row 1).

    With z = [z1; z2] (2B rows), s_ab = z_a . z_b and p(a) the other view of a's image:

        l_a = -s_{a,p(a)} / tau + log sum_{b != a} exp(s_ab / tau),   loss = mean over 2B

    The positive is in the denominator with the 2B-2 negatives (both views of the other
    images); the anchor itself is excluded. The official TF SimCLR reports 2x this value.
    Defaults: tau = 0.5 (DCL/HCL setting; SimCLR uses 0.1-0.5).

    Args:
        z1, z2: ``[B, d]`` embeddings of the two views (B >= 2), used as given.
        temperature: tau > 0.
        neg_mask: optional ``[2B, 2B]`` bool keep-mask over candidate negatives (a hard or
            ring selector's output). Self is always excluded and the positive always kept,
            whatever the mask says there; every anchor must keep at least one negative: a
            ``ValueError`` on the CPU; on a GPU, where the check would read the mask back, the
            loss is NaN (see :func:`_empty_rows`).
        stats: optional dict receiving ``pos_sim``, ``neg_sim`` (mean over the 2B(2B-2)
            candidate negatives, before any selection: free from sum vectors, whereas a mean
            over the kept ones would cost a pass over the matrix) and ``neg_kept`` (fraction
            of the candidate negatives the mask keeps), device tensors; with a mask on a GPU
            also ``anchors_without_negatives``.
    """
    _pair("z1", z1, "z2", z2, min_rows=2)
    tau = checks.positive("temperature", temperature)
    b = z1.shape[0]
    n = 2 * b
    keep = _bool_mask("neg_mask", neg_mask, (n, n))
    kept_negatives = n_kept = empty = None
    if keep is not None:
        rows = torch.arange(n, device=z1.device)
        partner = _in_batch_partner(b, z1.device)
        kept_negatives = keep.clone()
        kept_negatives.diagonal().fill_(False)
        kept_negatives[rows, partner] = False
        empty = _empty_rows("neg_mask", kept_negatives)
        n_kept = torch.count_nonzero(kept_negatives)
        kept_negatives[rows, partner] = True  # the positive stays in the partition
    loss = _InBatchLoss.apply(z1, z2, 1.0 / tau, (1.0 / tau,), True, kept_negatives, _nt_xent_head)
    if stats is not None:
        stats["pos_sim"] = torch.linalg.vecdot(z1.detach(), z2.detach()).mean()
        stats["neg_sim"] = _in_batch_neg_sim(z1, z2)
        stats["neg_kept"] = 1.0 if n_kept is None else n_kept / (n * (n - 2))
    return _poison(loss, empty, stats)


def _nt_xent_head(pos_logit: Tensor, lse: Tensor):
    """l_a = lse_a - A_a: dl/dA = -1, dl/dlse = 1."""
    return lse - pos_logit, -1.0, 1.0


@full_precision
def moco_infonce(
    q: Tensor,
    k: Tensor,
    queue: Tensor,
    temperature: float = 0.07,
    *,
    neg_mask: Tensor | None = None,
    stats: dict | None = None,
) -> Tensor:
    r"""MoCo InfoNCE (He et al. 2020, Sec. 3.1, Eq. 1; METHODS row 2).

        l_i = -q_i.k_i / tau + log( exp(q_i.k_i / tau) + sum_n exp(q_i.Q_n / tau) ),  batch mean

    i.e. cross-entropy with label 0 over ``[q.k, q.Q^T] / tau``. ``k`` and the queue are
    constants (detached). Defaults: tau = 0.07, |Q| = 65536 (set by the queue).

    Args:
        q: ``[N, d]`` queries (gradient flows).
        k: ``[N, d]`` positive keys from the momentum encoder.
        queue: ``[M, d]`` negative keys stored as rows.
        temperature: tau > 0.
        neg_mask: optional ``[N, M]`` bool keep-mask over the queue (hard / ring selectors);
            the positive is always kept; every query must keep at least one queue row (as in
            :func:`nt_xent`: a ``ValueError`` on the CPU, a NaN loss on a GPU).
        stats: optional dict receiving ``pos_sim``, ``neg_sim`` (mean over the whole queue,
            before any selection: q_mean . Q_mean, free) and ``neg_kept``; with a mask on a GPU
            also ``anchors_without_negatives``.
    """
    _pair("q", q, "k", k)
    _rows("queue", queue)
    checks.same_width("q", q, "queue", queue)
    _same_dtype("q", q, "queue", queue)
    tau = checks.positive("temperature", temperature)
    keep = _bool_mask("neg_mask", neg_mask, (q.shape[0], queue.shape[0]))
    empty = None if keep is None else _empty_rows("neg_mask", keep)
    k, queue = k.detach(), queue.detach()
    lse_neg = _RowLogSumExp.apply(q, queue, 1.0 / tau, keep)
    pos = (q * k).sum(dim=1)
    pos_logit = pos / tau
    loss = (torch.logaddexp(pos_logit, lse_neg) - pos_logit).mean()
    if stats is not None:
        stats["pos_sim"] = pos.detach().mean()
        stats["neg_sim"] = q.detach().mean(0) @ queue.mean(0)
        stats["neg_kept"] = 1.0 if keep is None else torch.count_nonzero(keep) / keep.numel()
    return _poison(loss, empty, stats)


@full_precision
def cmc(
    views: Tensor | Sequence[Tensor],
    temperature: float = 0.07,
    pair_reduction: str = "sum",
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""CMC full-graph loss with in-batch negatives (Tian et al. 2020, the full-graph objective,
    Eq. 8; CACR App. B uses it with K = 4; METHODS row 3).

        L = sum_{i<j} [ L^{i->j} + L^{j->i} ],
        L^{a->b} = mean_n -log( exp(a_n.b_n / tau) / sum_m exp(a_n.b_m / tau) )

    The negatives of a_n are the other instances of the *other* view b. Both directions are
    summed (train_CMC's ``l_loss + ab_loss``). ``pair_reduction='mean'`` divides by the
    C(V, 2) view pairs instead of summing (Eq. 8 sums). The official loss uses a memory bank
    (NCEAverage); this is the in-batch form. Default tau = 0.07.

    Args:
        views: a list of V >= 2 tensors ``[N, d]`` or one tensor ``[N, V, d]`` (N >= 2).
        temperature: tau > 0.
        pair_reduction: ``'sum'`` (default) or ``'mean'`` over view pairs.
        stats: optional dict receiving ``pos_sim`` and ``neg_sim`` (averaged over pairs).
    """
    tau = checks.positive("temperature", temperature)
    checks.choice("pair_reduction", pair_reduction, ("sum", "mean"))
    if isinstance(views, Tensor):
        checks.tensor("views", views, dim=3, min_rows=2)
        vs = list(views.unbind(dim=1))
    else:
        vs = list(views)
        for i, v in enumerate(vs):
            checks.tensor(f"views[{i}]", v, dim=2, min_rows=2)
            checks.same_shape("views[0]", vs[0], f"views[{i}]", v)
            _same_dtype("views[0]", vs[0], f"views[{i}]", v)
    if len(vs) < 2:
        raise ValueError(f"views must hold at least 2 views, got {len(vs)}")
    n = vs[0].shape[0]
    target = torch.arange(n, device=vs[0].device)
    total = vs[0].new_zeros(())
    pos_acc, neg_acc, n_pairs = 0.0, 0.0, 0
    for i in range(len(vs)):
        for j in range(i + 1, len(vs)):
            logits = vs[i] @ vs[j].t() / tau
            total = total + F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)
            n_pairs += 1
            if stats is not None:  # device tensors: read with the records, at log steps
                with torch.no_grad():
                    diag = logits.diagonal().sum() * tau
                    pos_acc = pos_acc + diag / n
                    neg_acc = neg_acc + (logits.sum() * tau - diag) / (n * (n - 1))
    if stats is not None:
        stats["pos_sim"] = pos_acc / n_pairs
        stats["neg_sim"] = neg_acc / n_pairs
    return total if pair_reduction == "sum" else total / n_pairs


# ----------------------------------------------------------------------------- plain-torch references
# The definitions the fused kernels compute, written straight from the equations in plain torch
# (an [n, n] logit matrix and cross_entropy): what to read for the formula, and what the tests
# hold the kernels to (they work in float64 too). Not for training: they build the full matrix.
def nt_xent_reference(z1: Tensor, z2: Tensor, temperature: float = 0.5, *, neg_mask: Tensor | None = None) -> Tensor:
    """NT-Xent (Chen et al. 2020, Sec. 2.1, Eq. 1) as cross-entropy over the 2B x 2B logits
    s_ab / tau with self left out and the other view of a as the target; ``neg_mask`` drops
    negatives (never the positive). :func:`nt_xent` computes it with ``_InBatchLoss``."""
    z = torch.cat([z1, z2])
    n = z.shape[0]
    target = _in_batch_partner(n // 2, z.device)
    drop = torch.eye(n, dtype=torch.bool, device=z.device)
    if neg_mask is not None:
        drop = drop | ~neg_mask
        drop[torch.arange(n, device=z.device), target] = False
    logits = (z @ z.t() / temperature).masked_fill(drop, _NEG_INF)
    return F.cross_entropy(logits, target)


def moco_infonce_reference(
    q: Tensor, k: Tensor, queue: Tensor, temperature: float = 0.07, *, neg_mask: Tensor | None = None
) -> Tensor:
    """MoCo InfoNCE (He et al. 2020, Sec. 3.1, Eq. 1) as cross-entropy with label 0 over
    [q.k, q Q^T] / tau, keys and queue detached, ``neg_mask`` dropping queue rows.
    :func:`moco_infonce` computes the queue log-sum-exp with ``_RowLogSumExp``."""
    neg = q @ queue.detach().t()
    if neg_mask is not None:
        neg = neg.masked_fill(~neg_mask, _NEG_INF)
    logits = torch.cat([(q * k.detach()).sum(dim=1, keepdim=True), neg], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))
