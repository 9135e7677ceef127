"""The quick-thought contrastive batch (Logeswaran & Lee 2018, Sec. 3, Eq. 1-2).

For a batch of contiguous sentences s_1..s_N, the candidates of s_a are the other sentences of
the batch, scored ``c(s_a, s_c) = f(s_a) . g(s_c)`` (Eq. 2, an inner product). The positives
are the sentences in the context window of s_a: the same book and ``1 <= |pos_c - pos_a| <=
window`` (window 1 in the paper: the previous and the next sentence). The QT softmax loss is
then, per anchor and positive p,

    l_ap = -c_ap / tau + log sum_{c != a} exp(c_ac / tau),      tau = 1 for the paper,

averaged over the anchor's positives and over the anchors (``info_nce_scores``). The authors'
code spreads one unit of target mass uniformly over the context sentences, which is that same
per-anchor mean; the paper's Eq. 1 writes the sum (2x for window 1, away from run edges).

Options documented here because the paper leaves them open or its code differs:

* ``score='dot'`` is Eq. 2; ``'cosine'`` scores the L2-normalised f and g instead (bounded
  scores, for DCL / HCL whose exponentials of raw inner products overflow).
* ``self_candidate='exclude'`` drops c = a from the softmax (``valid_mask``, the paper's
  "other sentences"); ``'zero_logit'`` is the authors' code: the diagonal score is set to 0
  and stays in the denominator (``scores = tf.matrix_set_diag(scores, 0)``).
* ``views`` stacks the L2-normalised f and g embeddings, ``[N, 2, d]``, so view-based
  regularizers (LMCL's distance polarization) act on the sentence embeddings.

The non-contrastive family (BYOL, SimSiam, Barlow Twins, VICReg, ...; a loss whose class says
``two_branches``) gets :func:`neighbour_pair_batch` instead: no score matrix, one row per pair
of neighbouring sentences ``(a, b)`` (same book, ``1 <= pos_b - pos_a <= window``), the two
branches ``f(s_a)`` and ``g(s_b)`` — the quick-thought pairing with its softmax over candidates
replaced by the family's objective — and, with a target network, the target's ``f'(s_a)``,
``g'(s_b)`` as keys. ``data.pairs: both`` adds every pair reversed, ``f(s_b)`` with ``g(s_a)``:
f then meets g of the sentences before it as well as after, as the softmax's positives do.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.losses.base import ContrastiveBatch

__all__ = [
    "neighbour_mask",
    "neighbour_pair_batch",
    "quick_thought_batch",
    "PAIR_DIRECTIONS",
    "SCORES",
    "SELF_CANDIDATE",
]

SCORES = ("dot", "cosine")
SELF_CANDIDATE = ("exclude", "zero_logit")
PAIR_DIRECTIONS = ("forward", "both")  # the family's neighbour pairs: (earlier, later) only, or both orders


def neighbour_mask(book: Tensor, position: Tensor, window: int = 1) -> Tensor:
    """``[N, N]`` bool: c is a positive of a when both come from the same book and
    ``1 <= |position_c - position_a| <= window``. Never true across books or on the diagonal."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if book.shape != position.shape or book.dim() != 1:
        raise ValueError(
            f"book and position must be 1-D and of equal length, got shapes "
            f"{tuple(book.shape)} and {tuple(position.shape)}"
        )
    same_book = book[:, None] == book[None, :]
    gap = (position[:, None] - position[None, :]).abs()
    return same_book & (gap >= 1) & (gap <= window)


def quick_thought_batch(
    batch: Mapping[str, Tensor],
    encoder: nn.Module,
    window: int = 1,
    score: str = "dot",
    self_candidate: str = "exclude",
    step: int = 0,
) -> ContrastiveBatch:
    """Encode a batch of contiguous sentences and build the quick-thought score matrix.

    ``encoder(x, pair=True)`` must return ``(f(x), g(x))`` (a :class:`QuickThoughtEncoder`,
    possibly wrapped for distributed training).
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    if self_candidate not in SELF_CANDIDATE:
        raise ValueError(f"self_candidate must be one of {', '.join(SELF_CANDIDATE)}, got {self_candidate!r}")
    for key in ("x", "book", "position"):
        if key not in batch:
            raise ValueError(f"batch must hold {key!r} (got keys {sorted(batch)})")
    u, v = encoder(batch["x"], pair=True)
    un, vn = F.normalize(u, dim=1), F.normalize(v, dim=1)
    scores = un @ vn.t() if score == "cosine" else u @ v.t()
    n = scores.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=scores.device)
    positives = neighbour_mask(batch["book"], batch["position"], window)
    if self_candidate == "exclude":
        valid = ~eye
    else:
        scores = scores.masked_fill(eye, 0.0)
        valid = None
    return ContrastiveBatch(
        views=torch.stack([un, vn], dim=1),
        scores=scores,
        positive_mask=positives,
        valid_mask=valid,
        indices=batch.get("index"),
        step=step,
    )


def neighbour_pair_batch(
    batch: Mapping[str, Tensor],
    encoder: nn.Module,
    key_encoder: nn.Module | None = None,
    window: int = 1,
    step: int = 0,
    directions: str = "forward",
) -> ContrastiveBatch:
    """The contrastive batch of the non-contrastive family: ``views[p] = [f(s_a), g(s_b)]`` for
    every pair ``p = (a, b)`` of neighbouring sentences of the batch (raw embeddings: the losses
    normalise or standardise as their papers do), ``keys`` the same from ``key_encoder`` (no
    gradient). Selecting the pairs reads the pair count on the host (one ``nonzero`` a step);
    the text domain's step stays eager (``variable_shapes``). ``directions='both'``: the
    forward pairs, then the same pairs reversed (``[f(s_b), g(s_a)]``)."""
    if directions not in PAIR_DIRECTIONS:
        raise ValueError(f"directions must be one of {', '.join(PAIR_DIRECTIONS)}, got {directions!r}")
    for key in ("x", "book", "position"):
        if key not in batch:
            raise ValueError(f"batch must hold {key!r} (got keys {sorted(batch)})")
    forward = torch.triu(neighbour_mask(batch["book"], batch["position"], window))
    a, b = forward.nonzero(as_tuple=True)
    if directions == "both":
        a, b = torch.cat([a, b]), torch.cat([b, a])
    if a.numel() < 2:
        raise ValueError(
            f"a batch of {batch['x'].shape[0]} sentences holds {a.numel()} neighbouring pairs; the objective needs "
            "at least 2 (raise budget.batch_size or data.run_length)"
        )
    u, v = encoder(batch["x"], pair=True)
    keys = None
    if key_encoder is not None:
        with torch.no_grad():
            ku, kv = key_encoder(batch["x"], pair=True)
            keys = torch.stack([ku[a], kv[b]], dim=1)
    return ContrastiveBatch(views=torch.stack([u[a], v[b]], dim=1), keys=keys, step=step)
