"""CACR: Contrastive Attraction and Contrastive Repulsion (Zheng et al., "Contrastive Attraction
and Contrastive Repulsion for Representation Learning").

Eq. 2-4 with the costs of Sec. 3.1, ``c(a, b) = ||a - b||^2``, ``d_t(a, b) = t ||a - b||^2``::

    pi+(k | i) = softmax_k( t+ c(q_i, pos_ik) )      (far positives weigh more, Eq. 3)
    pi-(j | i) = softmax_j( -t- c(q_i, neg_ij) )     (close negatives weigh more, Eq. 4)
    L_CA = mean_i sum_k pi+ c(q_i, pos_ik)           L_CR = -mean_i sum_j pi- c(q_i, neg_ij)
    L = L_CA + L_CR

Forms (docs/methods.md, section CACR):

* :func:`cacr` -- the generic loss: negatives per anchor ``[N, M, d]`` or shared ``[M, d]``.
* :func:`cacr_minibatch` -- Sec. 3.2: the negatives of x_i are the other queries x_j, j != i.
* :func:`cacr_multiview` -- the authors' small-scale code (``our_loss1 + our_loss2``): V views,
  attraction averaged over every view as query, repulsion over view pairs x < y with cross-view
  negatives, one direction per pair. V = 2 equals ``cacr(v0, v1, v1[j != i])``.
* :func:`cacr_moco` -- App. B / Alg. 3 and the authors' MoCo-v2 builder: keys from a momentum
  encoder, negatives from a queue plus the other queries.

Weights are differentiable by default (paper Sec. 3.2 and the small-scale code); ``detach_*``
options stop their gradient. ``t = 0`` gives uniform weights: ``t- -> 0`` is the uniform
attraction / uniform repulsion (UAUR) ablation, and K = 1 gives ``pi+ = 1``.

Cost: negative squared distances are ``||a||^2 + ||b||^2 - 2 a.b`` from one ``addmm`` (exact for
any norm; ``2 - 2 a.b`` on unit vectors), never an ``[N, M, d]`` broadcast; the few positives
per anchor use direct differences (accurate for the small attraction costs). Softmax weights do
not change when a row's costs all move by the same amount, so ``||q_i||^2`` is added once per row
instead of once per entry, and a one-block repulsion runs as a fused autograd function
(``_repulsion._SoftminExpectation``); the value and the gradient are those of the formulas
above.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from toolkit import checks

from ._precision import full_precision
from ._repulsion import _repulsion

__all__ = ["cacr", "cacr_minibatch", "cacr_multiview", "cacr_moco"]


# ----------------------------------------------------------------------------- helpers


def _views(name: str, views: Tensor | Sequence[Tensor]) -> Tensor:
    """``[N, V, d]`` from a tensor or a sequence of ``[N, d]`` views (V >= 2)."""
    if not isinstance(views, Tensor):
        try:
            views = torch.stack(list(views), dim=1)
        except (TypeError, RuntimeError) as err:
            raise ValueError(
                f"{name} must be a [N, V, d] tensor or a sequence of [N, d] tensors of one shape: {err}"
            ) from None
    checks.tensor(name, views, dim=3)
    if views.shape[1] < 2:
        raise ValueError(f"{name} needs at least 2 views (dimension 1), got shape {tuple(views.shape)}")
    return views


def _positives(q: Tensor, pos: Tensor) -> Tensor:
    checks.tensor("pos", pos)
    if pos.dim() == 2:
        pos = pos.unsqueeze(1)
    if pos.dim() != 3 or pos.shape[0] != q.shape[0] or pos.shape[2] != q.shape[1]:
        raise ValueError(
            f"pos must be [N, K, d] or [N, d] with N={q.shape[0]}, d={q.shape[1]}, got shape {tuple(pos.shape)}"
        )
    if pos.shape[1] < 1:
        raise ValueError(f"pos needs at least one positive per anchor, got shape {tuple(pos.shape)}")
    return pos


def _attraction(cost: Tensor, t_pos: float, detach: bool, valid: Tensor | None = None) -> Tensor:
    """Per-anchor ``sum_k pi+_k c_k`` with ``pi+ = softmax(t+ c)`` over the last dimension."""
    if cost.shape[-1] == 1 and valid is None:
        return cost[..., 0]
    logits = t_pos * (cost.detach() if detach else cost)
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
        cost = cost.masked_fill(~valid, 0.0)
    return (torch.softmax(logits, dim=-1) * cost).sum(dim=-1)


def _scores(a: Tensor, b: Tensor, t_neg: float) -> Tensor:
    """Repulsion scores of ``a`` ``[N, d]`` against ``b`` ``[M, d]`` in one ``addmm``.

    For ``t- > 0`` the weight logits ``-t- (||b_j||^2 - 2 a_i.b_j)``; for ``t- = 0`` the shifted
    costs ``||b_j||^2 - 2 a_i.b_j`` themselves. Both leave out the row constant ``||a_i||^2``
    (softmax weights do not see it; :func:`_repulsion` adds it back to the expected cost).
    """
    sq = (b * b).sum(dim=1).unsqueeze(0)
    if t_neg == 0:
        return torch.addmm(sq, a, b.T, beta=1.0, alpha=-2.0)
    return torch.addmm(sq, a, b.T, beta=-t_neg, alpha=2.0 * t_neg)


def _record(stats: dict | None, **values: Tensor) -> None:
    if stats is not None:
        for key, value in values.items():
            stats[key] = value.detach() if isinstance(value, Tensor) else value


def _temps(t_pos: float, t_neg: float) -> tuple[float, float]:
    return checks.non_negative("t_pos", t_pos), checks.non_negative("t_neg", t_neg)


# ----------------------------------------------------------------------------- losses


@full_precision
def cacr(
    q: Tensor,
    pos: Tensor,
    neg: Tensor,
    t_pos: float = 1.0,
    t_neg: float = 2.0,
    *,
    detach_pos_weights: bool = False,
    detach_neg_weights: bool = False,
    stats: dict | None = None,
) -> Tensor:
    """Generic CACR loss (Eq. 2-4 on given samples; docs/methods.md, section cacr), batch mean.

    ``L = mean_i sum_k softmax_k(t+ c_ik+) c_ik+  -  mean_i sum_j softmax_j(-t- c_ij-) c_ij-``
    with ``c = ||q_i - x||^2``.

    Args:
        q: ``[N, d]`` queries. pos: ``[N, K, d]`` positives (or ``[N, d]``, K = 1).
        neg: ``[N, M, d]`` negatives per anchor, or ``[M, d]`` shared by all anchors.
        t_pos, t_neg: weight temperatures >= 0 (t+ multiplies the cost; 0 = uniform weights).
            Paper: t+ = 1; t- = 2 (CIFAR-10, ImageNet), 3 (CIFAR-100, STL-10).
        detach_pos_weights, detach_neg_weights: stop the gradient through pi+ / pi-.
        stats: ``weight_entropy`` (H(X-|X) of pi-, Eq. 8; at most log M), ``pos_sim``,
            ``neg_sim`` (mean inner products).
    """
    checks.tensor("q", q, dim=2)
    pos = _positives(q, pos)
    checks.tensor("neg", neg)
    tp, tn = _temps(t_pos, t_neg)
    n, d = q.shape
    c_pos = (q.unsqueeze(1) - pos).square().sum(dim=-1)
    attraction = _attraction(c_pos, tp, detach_pos_weights)
    if neg.dim() == 2:
        checks.same_width("q", q, "neg", neg)
        scores = _scores(q, neg, tn)
        mean_neg = neg.mean(dim=0).unsqueeze(0)
    elif neg.dim() == 3 and neg.shape[0] == n and neg.shape[2] == d:
        scores = (neg * neg).sum(dim=-1) - 2.0 * torch.bmm(neg, q.unsqueeze(2)).squeeze(2)
        if tn > 0:
            scores = scores * (-tn)
        mean_neg = neg.mean(dim=1)
    else:
        raise ValueError(f"neg must be [N, M, d] with N={n}, d={d} or [M, d], got shape {tuple(neg.shape)}")
    if scores.shape[1] < 1:
        raise ValueError(f"neg needs at least one negative, got shape {tuple(neg.shape)}")
    w_scores = scores.detach() if detach_neg_weights else scores
    expected, entropy = _repulsion([(scores, w_scores, False)], (q * q).sum(dim=1), tn)
    loss = attraction.mean() - expected.mean()
    if stats is not None:
        with torch.no_grad():
            _record(
                stats,
                weight_entropy=entropy.mean(),
                pos_sim=(q.unsqueeze(1) * pos).sum(dim=-1).mean(),
                neg_sim=(q * mean_neg).sum(dim=1).mean(),
            )
    return loss


@full_precision
def cacr_minibatch(
    z: Tensor,
    zpos: Tensor,
    t_pos: float = 1.0,
    t_neg: float = 2.0,
    *,
    detach_pos_weights: bool = False,
    detach_neg_weights: bool = False,
    stats: dict | None = None,
) -> Tensor:
    """CACR mini-batch loss, paper Sec. 3.2 (docs/methods.md, section cacr), batch mean.

    The negatives of query ``z_i`` are the other queries ``z_j, j != i`` (Eq. 5's
    ``p(x-_i) = 1/(M-1) sum_{j != i} delta_{x_j}``); the positives are ``zpos[i]`` ``[K, d]``
    (or ``[N, d]`` for K = 1). One ``[N, N]`` matmul for the negatives.
    stats: ``weight_entropy`` (at most log(N - 1)), ``pos_sim``, ``neg_sim``.
    """
    checks.tensor("z", z, dim=2, min_rows=2)
    zpos = _positives(z, zpos)
    tp, tn = _temps(t_pos, t_neg)
    n = z.shape[0]
    c_pos = (z.unsqueeze(1) - zpos).square().sum(dim=-1)
    attraction = _attraction(c_pos, tp, detach_pos_weights)
    scores = _scores(z, z, tn)
    w_scores = scores.detach() if detach_neg_weights else scores
    expected, entropy = _repulsion([(scores, w_scores, True)], (z * z).sum(dim=1), tn)
    loss = attraction.mean() - expected.mean()
    if stats is not None:
        with torch.no_grad():
            total = z.sum(dim=0)
            neg_sim = (total.dot(total) - (z * z).sum()) / (n * (n - 1))
            _record(
                stats,
                weight_entropy=entropy.mean(),
                neg_sim=neg_sim,
                pos_sim=(z.unsqueeze(1) * zpos).sum(dim=-1).mean(),
            )
    return loss


@full_precision
def cacr_multiview(
    views: Tensor | Sequence[Tensor],
    t_pos: float = 1.0,
    t_neg: float = 2.0,
    alpha: float = 1.0,
    beta: float = 1.0,
    *,
    stats: dict | None = None,
) -> Tensor:
    """CACR as the authors' small-scale code computes it (docs/methods.md, section cacr_multiview).

    With V = K + 1 views ``v_x`` ``[N, d]``::

        L1 = (1/V) sum_x mean_i sum_{y != x} softmax_y(t+ ||v_x,i - v_y,i||^2) alpha ||.||^2
        L2 = (1/C(V,2)) sum_{x<y} mean_i sum_{j != i} softmax_j(-t- ||v_x,i - v_y,j||^2)
                                                      (-beta ||.||^2)
        L = L1 + L2

    Cross-view negatives, one direction per pair; weights differentiable; ``alpha`` and
    ``beta`` scale the costs but not the weight logits. V = 2 equals
    ``cacr(q=v0, pos=v1, neg=v1 rows j != i)``.

    Args:
        views: ``[N, V, d]`` or a sequence of V ``[N, d]`` tensors.
        stats: ``weight_entropy`` (mean over pairs), ``pos_sim``, ``neg_sim``.
    """
    views = _views("views", views)
    tp, tn = _temps(t_pos, t_neg)
    a = checks.non_negative("alpha", alpha)
    b = checks.non_negative("beta", beta)
    n, v, _ = views.shape
    if n < 2:
        raise ValueError(f"views needs at least 2 instances (negatives are other rows), got shape {tuple(views.shape)}")
    # Attraction: every view as query, the other views of the same instance as positives.
    c_pos = (views.unsqueeze(2) - views.unsqueeze(1)).square().sum(dim=-1)  # [N, V, V]
    not_self = ~torch.eye(v, dtype=torch.bool, device=views.device).expand(n, v, v)
    l1 = a * _attraction(c_pos, tp, False, valid=not_self).mean()
    # Repulsion: pairs x < y, query rows of view x against the other rows of view y.
    pairs = [(x, y) for x in range(v) for y in range(x + 1, v)]
    l2 = views.new_zeros(())
    entropies = []
    for x, y in pairs:
        qx, vy = views[:, x], views[:, y]
        scores = _scores(qx, vy, tn)
        expected, entropy = _repulsion([(scores, scores, True)], (qx * qx).sum(dim=1), tn)
        l2 = l2 - b * expected.mean()
        entropies.append(entropy.mean())
    loss = l1 + l2 / len(pairs)
    if stats is not None:
        with torch.no_grad():
            off_diag = ~torch.eye(n, dtype=torch.bool, device=views.device)
            dots = torch.bmm(views, views.transpose(1, 2))  # [N, V, V]
            # means over masks without selecting (a selection's size is read back to the host)
            pos_sim = torch.where(not_self, dots, 0.0).sum() / (n * v * (v - 1))
            neg = [torch.where(off_diag, views[:, x] @ views[:, y].T, 0.0).sum() / (n * (n - 1)) for x, y in pairs]
            _record(
                stats, weight_entropy=torch.stack(entropies).mean(), pos_sim=pos_sim, neg_sim=torch.stack(neg).mean()
            )
    return loss


@full_precision
def cacr_moco(
    q_views: Tensor | Sequence[Tensor],
    k_views: Tensor | Sequence[Tensor],
    queue: Tensor,
    t_pos: float = 1.0,
    t_neg: float = 2.0,
    intra_batch: bool = True,
    detach_queue_weights: bool = True,
    reuse_first_view_queue_dists: bool = False,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    stats: dict | None = None,
) -> Tensor:
    """CACR with MoCo-v2 (App. B, Alg. 3; authors' ImageNet builder; docs/methods.md, cacr_moco).

    For each query view x (``q = q_views[:, x]``, V views)::

        CA_x = mean_i sum_{y != x} pi+_y ||q_i - k_y,i||^2,  pi+ = softmax(t+ c), no gradient
        CR_x = -mean_i sum_j pi-_j c_ij over c = [ ||q_i - Q_j||^2 (queue) ;
                                                     ||q_i - q_j||^2, j != i (intra batch) ]
        pi- = softmax(-t- c)
        L = (alpha sum_x CA_x + beta sum_x CR_x) / V

    Args:
        q_views: ``[N, V, d]`` queries (online encoder) or a sequence of V ``[N, d]``.
        k_views: ``[N, V, d]`` keys of the same views (momentum encoder; constant).
        queue: ``[M, d]`` queue rows (constant).
        intra_batch: add the other queries to the negatives (App. B, official default).
        detach_queue_weights: the weight logits see the queue distances detached and the
            intra-batch ones not (official code). ``False`` = paper Alg. 3 (same value,
            different gradient).
        reuse_first_view_queue_dists: reproduce the official caching quirk: every view uses
            view 0's query-queue distances (costs and weights). Default off (paper).
        alpha, beta: cost scales of the code (not in the weight logits).
        stats: ``weight_entropy`` (mean over views), ``pos_sim``, ``neg_sim`` (queue part).
    """
    q_views = _views("q_views", q_views)
    k_views = _views("k_views", k_views)
    checks.same_shape("q_views", q_views, "k_views", k_views)
    checks.tensor("queue", queue, dim=2)
    checks.same_width("q_views", q_views, "queue", queue)
    tp, tn = _temps(t_pos, t_neg)
    a = checks.non_negative("alpha", alpha)
    b = checks.non_negative("beta", beta)
    n, v, d = q_views.shape
    if intra_batch and n < 2:
        raise ValueError(f"intra_batch needs at least 2 queries, got shape {tuple(q_views.shape)}")
    k_views = k_views.detach()
    queue = queue.detach()
    # Attraction against the other views' keys, weights without gradient.
    c_pos = (q_views.unsqueeze(2) - k_views.unsqueeze(1)).square().sum(dim=-1)  # [N, Vq, Vk]
    not_self = ~torch.eye(v, dtype=torch.bool, device=q_views.device).expand(n, v, v)
    attraction = _attraction(c_pos, tp, True, valid=not_self).mean()
    norms = (q_views * q_views).sum(dim=-1)  # [N, V]
    repulsion = q_views.new_zeros(())
    entropies = []
    first = _scores(q_views[:, 0], queue, tn) if reuse_first_view_queue_dists else None
    for x in range(v):
        q = q_views[:, x]
        row_const = norms[:, x]
        if first is None:
            block = _scores(q, queue, tn)
        elif x == 0:
            block = first
        else:  # view 0's distances, moved to this view's row constant ||q_x,i||^2
            shift = norms[:, 0] - row_const
            block = first + (shift * (-tn) if tn > 0 else shift).unsqueeze(1)
        blocks = [(block, block.detach() if detach_queue_weights else block, False)]
        if intra_batch:
            intra = _scores(q, q, tn)
            w_intra = intra
            if detach_queue_weights and tn > 0:
                # The queue block's weights see ||q_i||^2 detached; the intra block's see it
                # with its gradient (the code's intra distances are ||q_i - q_j||^2).
                w_intra = intra + ((row_const - row_const.detach()) * (-tn)).unsqueeze(1)
            blocks.append((intra, w_intra, True))
        expected, entropy = _repulsion(blocks, row_const, tn)
        repulsion = repulsion - expected.mean()
        entropies.append(entropy.mean())
    loss = (a * attraction * v + b * repulsion) / v
    if stats is not None:
        with torch.no_grad():
            dots = torch.bmm(q_views, k_views.transpose(1, 2))  # a mean over the mask, not a selection
            pos_sim = torch.where(not_self, dots, 0.0).sum() / (n * v * (v - 1))
            neg_sim = (q_views.mean(dim=(0, 1)) * queue.mean(dim=0)).sum()
            _record(stats, weight_entropy=torch.stack(entropies).mean(), pos_sim=pos_sim, neg_sim=neg_sim)
    return loss


# ----------------------------------------------------------------------------- plain-torch reference
def cacr_reference(
    q: Tensor,
    pos: Tensor,
    neg: Tensor,
    t_pos: float = 1.0,
    t_neg: float = 2.0,
    *,
    detach_pos_weights: bool = False,
    detach_neg_weights: bool = False,
) -> Tensor:
    """CACR Eq. 2-4 with explicit cost matrices c = ||q_i - x||^2 (an ``[N, M, d]`` difference
    tensor): L = mean_i sum_k softmax_k(t+ c+) c+ - mean_i sum_j softmax_j(-t- c-) c-, the
    weights optionally detached. The definition :func:`cacr` computes without the difference
    tensor (the repulsion through ``_repulsion._SoftminExpectation``); ``pos`` ``[N, K, d]``,
    ``neg`` ``[N, M, d]`` or shared ``[M, d]``."""
    pos = pos.unsqueeze(1) if pos.dim() == 2 else pos
    neg = neg.expand(q.shape[0], *neg.shape) if neg.dim() == 2 else neg
    c_pos = (q.unsqueeze(1) - pos).square().sum(dim=-1)
    c_neg = (q.unsqueeze(1) - neg).square().sum(dim=-1)
    w_pos = torch.softmax(t_pos * (c_pos.detach() if detach_pos_weights else c_pos), dim=1)
    w_neg = torch.softmax(-t_neg * (c_neg.detach() if detach_neg_weights else c_neg), dim=1)
    return (w_pos * c_pos).sum(dim=1).mean() - (w_neg * c_neg).sum(dim=1).mean()
