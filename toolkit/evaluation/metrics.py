"""Representation metrics of the papers, computed on embeddings without gradient.

* :func:`alignment`, :func:`uniformity` -- Wang & Isola 2020 (used by Wang & Liu Eq. 10 and
  CACR); :func:`tolerance` -- Wang & Liu Eq. 11 (docs/methods.md, section Metrics).
* :func:`conditional_entropy` -- CACR's H(X-|X) of the repulsion weights (Eq. 8, Fig. 3; row 15).
* :func:`distance_histogram`, :func:`class_distance_histograms` -- LMCL Fig. 2 / Fig. 5: the
  pairwise distances ``D = (1 - f f^T) / 2`` and the share inside the margin ``(d+, d-)``.
* :func:`similarity_profile` -- Wang & Liu Fig. 8: the positive similarity and the similarities
  of the 10 nearest negatives, sorted.
* :func:`cluster_accuracy` -- LMCL Table 1's K-means accuracy with Hungarian matching (row 22).

Every function takes tensors (or arrays), works under ``torch.no_grad`` in float64 where
accumulation matters, and returns plain Python floats or numpy arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from toolkit import checks

__all__ = [
    "alignment",
    "uniformity",
    "tolerance",
    "conditional_entropy",
    "distance_histogram",
    "class_distance_histograms",
    "similarity_profile",
    "cluster_accuracy",
]

_BLOCK = 1 << 22  # entries of a pairwise block held at once (chunked metrics)


def _as_tensor(name: str, x: Any, dim: int | None = None, min_rows: int = 1) -> Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    checks.tensor(name, x, dim=dim, min_rows=min_rows)
    return x.detach()


def _labels(labels: Any, n: int) -> Tensor:
    if isinstance(labels, np.ndarray):
        labels = torch.from_numpy(labels)
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(
            f"labels must be a 1-D tensor/array with {n} entries, got "
            f"{type(labels).__name__} of shape {tuple(getattr(labels, 'shape', ()))}"
        )
    if torch.is_floating_point(labels):
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    return labels.to(torch.long)


def _rows(n: int, width: int) -> int:
    return max(1, _BLOCK // max(1, width))


@torch.no_grad()
def alignment(x: Tensor, y: Tensor, alpha: float = 2.0) -> float:
    """Alignment (Wang & Isola 2020, Eq. 4): ``mean_i ||x_i - y_i||^alpha`` over positive pairs."""
    x = _as_tensor("x", x, dim=2)
    y = _as_tensor("y", y, dim=2)
    checks.same_shape("x", x, "y", y)
    a = checks.positive("alpha", alpha)
    return float((x.double() - y.double()).norm(dim=1).pow(a).mean())


@torch.no_grad()
def uniformity(x: Tensor, t: float = 2.0) -> float:
    """Uniformity loss (Wang & Isola 2020, Eq. 5; Wang & Liu Eq. 10):
    ``log mean_{i<j} exp(-t ||x_i - x_j||^2)`` over the ``N(N-1)/2`` distinct pairs.

    This is the loss value (lower = more uniform; at most 0). Wang & Liu's Table 1 and Figs. 4/6
    print its negative, ``-L_uniformity`` (values up to about 3.9 at t = 2); report that as
    ``neg_uniformity``. Computed in float64 row blocks (no ``N x N`` matrix at once).
    """
    x = _as_tensor("x", x, dim=2, min_rows=2).double()
    tt = checks.positive("t", t)
    n = x.shape[0]
    sq = (x * x).sum(dim=1)
    step = _rows(n, n)
    parts = []
    for start in range(0, n - 1, step):
        rows = slice(start, min(n - 1, start + step))
        d2 = (sq[rows, None] + sq[None, :] - 2.0 * x[rows] @ x.T).clamp_min(0.0)
        i = torch.arange(rows.start, rows.stop, device=x.device).unsqueeze(1)
        upper = torch.arange(n, device=x.device).unsqueeze(0) > i
        parts.append(torch.logsumexp((-tt * d2).masked_fill(~upper, float("-inf")).flatten(), 0))
    total = torch.logsumexp(torch.stack(parts), 0)
    return float(total - math.log(n * (n - 1) / 2))


@torch.no_grad()
def tolerance(f: Tensor, labels: Tensor) -> float:
    """Tolerance (Wang & Liu Eq. 11, as docs/methods.md, section Metrics, reads it): the mean of
    ``f_i . f_j`` over ordered same-class pairs ``i != j`` (the *conditional* expectation given
    ``l(x) = l(y)``). Per class c, ``sum_{i != j in c} f_i.f_j = ||sum_c f||^2 - sum_c ||f_i||^2``.
    """
    f = _as_tensor("f", f, dim=2).double()
    labels = _labels(labels, f.shape[0])
    classes, inverse, counts = torch.unique(labels, return_inverse=True, return_counts=True)
    sums = f.new_zeros(len(classes), f.shape[1]).index_add_(0, inverse, f)
    norms = f.new_zeros(len(classes)).index_add_(0, inverse, (f * f).sum(dim=1))
    pairs = (counts * (counts - 1)).sum()
    if int(pairs) == 0:
        raise ValueError("tolerance needs a class with at least two samples; every label in labels is unique")
    return float(((sums * sums).sum(dim=1) - norms).sum() / pairs)


@torch.no_grad()
def conditional_entropy(q: Tensor, neg: Tensor | None = None, t_neg: float = 2.0) -> float:
    """CACR's conditional entropy H(X-|X) (Eq. 8; docs/methods.md, section CACR).

    ``pi-(j | i) = softmax_j(-t- ||q_i - neg_j||^2)``; returns ``mean_i -sum_j pi- log pi-``.
    ``neg`` is ``[M, d]`` shared negatives (maximum ``log M``), ``[N, M, d]`` per anchor, or
    ``None`` for the other queries ``j != i`` (maximum ``log(N - 1)``).
    """
    q = _as_tensor("q", q, dim=2).double()
    t = checks.non_negative("t_neg", t_neg)
    if neg is None:
        if q.shape[0] < 2:
            raise ValueError(f"in-batch negatives need at least 2 queries, got shape {tuple(q.shape)}")
        d2 = torch.cdist(q, q).square()
        logits = (-t * d2).masked_fill(torch.eye(q.shape[0], dtype=torch.bool, device=q.device), float("-inf"))
    else:
        neg = _as_tensor("neg", neg).double()
        if neg.dim() == 2 and neg.shape[1] == q.shape[1]:
            logits = -t * torch.cdist(q, neg).square()
        elif neg.dim() == 3 and neg.shape[0] == q.shape[0] and neg.shape[2] == q.shape[1]:
            logits = -t * (neg - q.unsqueeze(1)).square().sum(dim=-1)
        else:
            raise ValueError(f"neg must be [M, d] or [N, M, d] matching q {tuple(q.shape)}, got {tuple(neg.shape)}")
    logp = torch.log_softmax(logits, dim=1)
    p = logp.exp()
    return float(-(p * logp.masked_fill(p == 0, 0.0)).sum(dim=1).mean())


def _pair_blocks(f: Tensor, labels: Tensor | None = None):
    """Yield ``(D, same)`` over row blocks: LMCL's ``D_ij = (1 - f_i.f_j) / 2`` (Eq. 3) for the
    pairs i < j of the block, flattened, and whether each pair shares a label (or None)."""
    n = f.shape[0]
    step = _rows(n, n)
    cols = torch.arange(n, device=f.device).unsqueeze(0)
    for start in range(0, n - 1, step):
        stop = min(n - 1, start + step)
        upper = cols > torch.arange(start, stop, device=f.device).unsqueeze(1)
        d = ((1.0 - f[start:stop] @ f.T) / 2.0)[upper]
        same = None if labels is None else (labels[start:stop, None] == labels[None, :])[upper]
        yield d, same


class _Counter:
    """Accumulates a histogram on [0, 1] and the count inside the margin ``(d+, d-)``."""

    def __init__(self, bins: int, d_plus: float, d_minus: float) -> None:
        self.bins, self.d_plus, self.d_minus = bins, d_plus, d_minus
        self.counts = torch.zeros(bins, dtype=torch.float64)
        self.inside = 0
        self.total = 0

    def add(self, d: Tensor) -> None:
        if d.numel():  # histc runs on d's device; the counts stay on the host
            self.counts += torch.histc(d.clamp(0.0, 1.0), bins=self.bins, min=0.0, max=1.0).cpu().double()
            self.inside += int(((d > self.d_plus) & (d < self.d_minus)).sum())
            self.total += d.numel()

    def result(self) -> tuple[np.ndarray, float]:
        return (self.counts.round().to(torch.int64).numpy(), self.inside / self.total if self.total else 0.0)


def _check_margin(bins: int, d_plus: float, d_minus: float) -> None:
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    checks.in_range("d_plus", d_plus, 0.0, 1.0)
    checks.in_range("d_minus", d_minus, 0.0, 1.0)
    if d_plus >= d_minus:
        raise ValueError(f"d_plus must be < d_minus (the margin (d+, d-)), got d_plus={d_plus!r}, d_minus={d_minus!r}")


@torch.no_grad()
def distance_histogram(f: Tensor, bins: int = 50, d_plus: float = 0.1, d_minus: float = 0.5) -> dict[str, Any]:
    """Histogram of LMCL's pairwise distances ``D_ij = (1 - f_i.f_j)/2``, ``i < j`` (Fig. 2).

    Returns ``counts`` (int array, ``bins`` equal bins on ``[0, 1]``; distances outside are
    clipped into the end bins, which only happens for non-unit rows), ``edges``,
    ``margin_occupancy`` (share of pairs strictly inside the margin ``(d_plus, d_minus)``, where
    the DP regulariser is non-zero; report it as ``dp_margin_occupancy``) and ``num_pairs``.
    Computed in row blocks.
    """
    f = _as_tensor("f", f, dim=2, min_rows=2).double()
    _check_margin(bins, d_plus, d_minus)
    counter = _Counter(bins, d_plus, d_minus)
    for d, _ in _pair_blocks(f):
        counter.add(d)
    counts, occ = counter.result()
    return {
        "counts": counts,
        "edges": np.linspace(0.0, 1.0, bins + 1),
        "margin_occupancy": occ,
        "num_pairs": counter.total,
        "d_plus": d_plus,
        "d_minus": d_minus,
    }


@torch.no_grad()
def class_distance_histograms(
    f: Tensor, labels: Tensor, bins: int = 50, d_plus: float = 0.1, d_minus: float = 0.5
) -> dict[str, Any]:
    """:func:`distance_histogram` split into same-class and different-class pairs (LMCL Fig. 2's
    intra- vs inter-cluster view). Keys: ``same`` / ``different`` (counts), ``edges``,
    ``same_margin_occupancy``, ``different_margin_occupancy``, ``margin_occupancy`` (all pairs),
    ``num_same``, ``num_different``."""
    f = _as_tensor("f", f, dim=2, min_rows=2).double()
    labels = _labels(labels, f.shape[0])
    _check_margin(bins, d_plus, d_minus)
    same_c, diff_c = _Counter(bins, d_plus, d_minus), _Counter(bins, d_plus, d_minus)
    for d, same in _pair_blocks(f, labels):
        same_c.add(d[same])
        diff_c.add(d[~same])
    same_counts, same_occ = same_c.result()
    diff_counts, diff_occ = diff_c.result()
    total = same_c.total + diff_c.total
    return {
        "same": same_counts,
        "different": diff_counts,
        "edges": np.linspace(0.0, 1.0, bins + 1),
        "same_margin_occupancy": same_occ,
        "different_margin_occupancy": diff_occ,
        "margin_occupancy": (same_c.inside + diff_c.inside) / total,
        "num_same": same_c.total,
        "num_different": diff_c.total,
        "d_plus": d_plus,
        "d_minus": d_minus,
    }


@torch.no_grad()
def similarity_profile(q: Tensor, candidates: Tensor, positives: Tensor, top: int = 10) -> dict[str, Any]:
    """Wang & Liu Fig. 8 (Sec. 5.2): positive similarity and the ``top`` nearest negatives.

    ``s_ij = q_i . candidates_j``. ``positives`` is either ``[N]`` integer indices into
    ``candidates`` (memory-bank style: the anchor's own entry is its positive and is not a
    negative) or ``[N, d]`` positive embeddings (then every candidate is a negative). For each
    anchor the negative similarities are sorted descending and the first ``top`` kept.

    Returns ``positive`` (mean ``s_ii``), ``negatives`` (array ``[top]``: mean of the k-th
    nearest negative's similarity, k = 1..top), their standard deviations ``positive_std`` /
    ``negatives_std``, and the raw ``positive_values`` ``[N]`` / ``negative_values`` ``[N, top]``.
    """
    q = _as_tensor("q", q, dim=2).double()
    cand = _as_tensor("candidates", candidates, dim=2).double()
    checks.same_width("q", q, "candidates", cand)
    sims = q @ cand.T
    if isinstance(positives, np.ndarray):
        positives = torch.from_numpy(positives)
    if isinstance(positives, Tensor) and not torch.is_floating_point(positives):
        if positives.shape != (q.shape[0],):
            raise ValueError(f"positives as indices must have shape ({q.shape[0]},), got {tuple(positives.shape)}")
        idx = positives.long().unsqueeze(1).to(sims.device)
        pos = sims.gather(1, idx).squeeze(1)
        sims = sims.scatter(1, idx, float("-inf"))
        available = cand.shape[0] - 1
    else:
        p = _as_tensor("positives", positives, dim=2).double()
        checks.same_shape("q", q, "positives", p)
        pos = (q * p).sum(dim=1)
        available = cand.shape[0]
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= available:
        raise ValueError(f"top must be an integer in [1, {available}] (the negatives per anchor), got {top!r}")
    negs, pos = torch.topk(sims, top, dim=1, sorted=True).values.cpu(), pos.cpu()  # numpy reads the host
    return {
        "positive": float(pos.mean()),
        "negatives": negs.mean(dim=0).numpy(),
        "positive_std": float(pos.std(unbiased=False)),
        "negatives_std": negs.std(dim=0, unbiased=False).numpy(),
        "positive_values": pos.numpy(),
        "negative_values": negs.numpy(),
    }


def cluster_accuracy(
    features: Tensor | np.ndarray, labels: Tensor | np.ndarray, n_clusters: int | None = None, seed: int = 0
) -> float:
    """K-means clustering accuracy with Hungarian matching (LMCL Table 1; docs/methods.md).

    K-means (scikit-learn, ``n_init=10``, ``random_state=seed``) with ``n_clusters`` (default:
    the number of distinct labels); clusters are matched one-to-one to classes maximising the
    agreement (``scipy.optimize.linear_sum_assignment``); accuracy = matched samples / N.
    With more clusters than classes the unmatched clusters count as errors.
    """
    from scipy.optimize import linear_sum_assignment
    from sklearn.cluster import KMeans

    if isinstance(features, Tensor):
        x = features.detach().cpu().double().numpy()
    else:
        x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"features must be [N, d], got shape {x.shape}")
    y = labels.detach().cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be {x.shape[0]} integers, got {y.dtype} of shape {y.shape}")
    classes, y_idx = np.unique(y, return_inverse=True)
    k = len(classes) if n_clusters is None else n_clusters
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= x.shape[0]:
        raise ValueError(f"n_clusters must be an integer in [1, {x.shape[0]}], got {n_clusters!r}")
    pred = KMeans(n_clusters=int(k), n_init=10, random_state=seed).fit_predict(x)
    agreement = np.zeros((int(k), len(classes)), dtype=np.int64)
    np.add.at(agreement, (pred, y_idx), 1)
    rows, cols = linear_sum_assignment(agreement, maximize=True)
    return float(agreement[rows, cols].sum() / x.shape[0])
