"""SwAV: swapped prediction of online cluster assignments, and the Sinkhorn-Knopp codes.

Conventions (docs/methods.md, section Baselines family): the scores are
the embeddings against the prototypes (``z @ C^T``, both L2-normalised by the caller, as the
paper's model does); the codes are computed without gradient from the detached scores; one call
is the two-view loss of Eq. 1 averaged over its two terms, and multi-crop is the caller's sum
over pairs of views. Nothing is read on the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from toolkit import checks

from ._precision import full_precision
from ._validation import _pair, _rows

__all__ = ["swav", "sinkhorn_knopp"]


def _count(name: str, value: int, minimum: int) -> int:
    """A Python int >= ``minimum`` (bool refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise checks.ArgumentError(name, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


@full_precision
def sinkhorn_knopp(
    scores: Tensor,
    epsilon: float = 0.05,
    iterations: int = 3,
    *,
    all_reduce: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    r"""SwAV's codes by Sinkhorn-Knopp (Caron et al. 2020, Sec. 3.1, Eq. 4-5 and Algorithm 1's
    ``sinkhorn``), without gradient.

    With B samples (the global batch under ``all_reduce``) and K prototypes, Q a [K, B] matrix:

        Q = exp(s / eps)^T;  Q /= sum(Q)
        repeat ``iterations`` times:
            Q_kb /= sum_b Q_kb;  Q /= K        (rows: every prototype gets mass 1/K)
            Q_kb /= sum_k Q_kb;  Q /= B        (columns: every sample gets mass 1/B)
        codes = (B Q)^T                        ([B, K], each row sums to 1)

    After the last step the rows of ``codes`` sum to 1 exactly; the prototypes' shares approach
    the equal partition (column sums of ``codes`` -> B/K) as the iterations grow. Defaults: the
    paper's eps = 0.05 and 3 iterations.

    Numerics: exp(s/eps - m) replaces exp(s/eps), m the maximum of s/eps over the (global)
    batch. A constant factor cancels in ``Q /= sum(Q)``, so the codes are unchanged, and
    nothing overflows. Under ``all_reduce`` m is the mean over ranks of each rank's maximum
    (the same on every rank, so still exact); an entry overflows only if it exceeds that mean by
    more than ~88 in float32, i.e. scores spread over more than 88 eps (4.4 at eps = 0.05)
    across ranks. At the other end, an entry more than ~87 below m underflows to 0 (float32);
    a sample whose every score is that far below the batch maximum gets NaN codes. Neither can
    happen with cosine scores (a spread of at most 2 / eps = 40).

    Args:
        scores: ``[B, K]`` scores of the samples against the prototypes (detached here).
        epsilon: eps > 0, the entropy weight (the exponent's temperature).
        iterations: number of row-and-column normalisation rounds, >= 1.
        all_reduce: ``None`` for a single process. Under DDP, a function returning the sum of a
            tensor over the ranks (e.g. ``lambda t: (torch.distributed.all_reduce(t), t)[1]``,
            called with fresh tensors it may overwrite): it sums the shift, the total mass, the
            prototypes' row sums and the batch sizes, so each rank gets its rows of the codes
            of the global batch.

    Returns:
        ``[B, K]`` codes, rows summing to 1, in the scores' dtype (float32 for half inputs),
        without gradient.
    """
    _rows("scores", scores)
    eps = checks.positive("epsilon", epsilon)
    iterations = _count("iterations", iterations, 1)
    if all_reduce is not None and not callable(all_reduce):
        raise checks.ArgumentError(
            "all_reduce", f"all_reduce must be callable or None, got {type(all_reduce).__name__}"
        )
    with torch.no_grad():
        logits = scores.detach() / eps
        b, k = logits.shape
        if all_reduce is None:
            shift = logits.max()
            batch: Tensor | float = float(b)
        else:
            # one call: [sum of the ranks' maxima, number of ranks, global batch size]
            shared = all_reduce(torch.stack([logits.max(), logits.new_ones(()), logits.new_full((), b)]))
            shift = shared[0] / shared[1]
            batch = shared[2]
        q = torch.exp(logits - shift).t()  # [K, B]
        total = q.sum()
        if all_reduce is not None:
            total = all_reduce(total)
        q = q / total
        for _ in range(iterations):
            rows = q.sum(dim=1, keepdim=True)  # each prototype's mass over the (global) batch
            if all_reduce is not None:
                rows = all_reduce(rows)
            q = q / rows / k
            q = q / q.sum(dim=0, keepdim=True) / batch  # each sample's mass (local)
        return (q * batch).t()


@full_precision
def swav(
    scores1: Tensor,
    scores2: Tensor,
    temperature: float = 0.1,
    epsilon: float = 0.05,
    iterations: int = 3,
    *,
    all_reduce: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    r"""SwAV's swapped prediction (Caron et al. 2020, Sec. 3.1, Eq. 1-3).

    With q1, q2 = sinkhorn_knopp(sg[scores1]), sinkhorn_knopp(sg[scores2]) (see
    :func:`sinkhorn_knopp`) and p_v = softmax(scores_v / tau) over the K prototypes:

        l(s, q) = -mean_i sum_k q_ik log p_ik
        loss    = [ l(scores2, q1) + l(scores1, q2) ] / 2

    i.e. each view predicts the other view's code. The codes carry no gradient; the gradient
    flows into both score matrices (hence into the embeddings and the prototypes). Defaults:
    tau = 0.1, eps = 0.05, 3 iterations (the paper's). The paper's Eq. 1 sums the two terms;
    the authors' code averages them (and over all crop pairs), as here.

    Args:
        scores1, scores2: ``[B, K]`` scores of the two views against the prototypes, rows in
            the same sample order.
        temperature: tau > 0 of the prediction's softmax.
        epsilon: Sinkhorn's eps > 0.
        iterations: Sinkhorn rounds, >= 1.
        all_reduce: ``None``, or the sum over ranks that gives the codes of the global batch
            (see :func:`sinkhorn_knopp`).
    """
    _pair("scores1", scores1, "scores2", scores2)
    tau = checks.positive("temperature", temperature)
    q1 = sinkhorn_knopp(scores1, epsilon, iterations, all_reduce=all_reduce)
    q2 = sinkhorn_knopp(scores2, epsilon, iterations, all_reduce=all_reduce)
    log_p1 = torch.log_softmax(scores1 / tau, dim=1)
    log_p2 = torch.log_softmax(scores2 / tau, dim=1)
    return -0.5 * ((q1 * log_p2).sum(dim=1).mean() + (q2 * log_p1).sum(dim=1).mean())
