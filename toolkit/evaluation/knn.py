"""The nearest-neighbour classifier on frozen features and the top-k counts every probe reports,
shared by every domain.

* :func:`knn_scores`: the weighted kNN of instance discrimination (Wu et al. 2018, Sec. 3.4;
  the InstDisc kNN monitor): cosine similarities ``s_i`` of a test feature to its ``k`` nearest
  training features, class score ``sum_i exp(s_i / t) [y_i = c]`` (k = 200, t = 0.1 there).
  ``weighted=False`` is the plain majority vote of the ``k`` neighbours (ties go to the class
  with the larger summed similarity). :func:`knn_score_sets` gives several such classifiers
  from one similarity pass (the weighted kNN and the 5-NN of an evaluation);
  :func:`knn_votes` is their vote, shared with the chunked kNN of
  :mod:`toolkit.evaluation.streamed`. The kNN stays in torch: it is a matrix product and a
  top-k, cheap on any device, so it runs where the features are.
* :func:`topk_hits` / :func:`topk_accuracy`: which rows have their label among the ``k``
  highest scores, and the percentage of them. The percentage is computed from the integer
  count of hits (``100 * hits / rows`` in float64), so the same predictions give the same
  number on every device (a float32 mean of the hits differs in its last bits between CUDA
  and the CPU).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "knn_scores",
    "knn_score_sets",
    "knn_votes",
    "check_knn",
    "topk_accuracy",
    "topk_hits",
    "topk_count",
]


def topk_hits(scores: Tensor, labels: Tensor, k: int = 1) -> Tensor:
    """Per row, whether its label is among the ``k`` highest scores (a bool vector; ``k`` is
    capped at the number of columns)."""
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices
    return (top == labels[:, None].to(top.device)).any(dim=1)


def topk_count(scores: Tensor, labels: Tensor, k: int = 1) -> int:
    """The number of rows whose label is among the ``k`` highest scores."""
    return int(topk_hits(scores, labels, k).sum().item())


def topk_accuracy(scores: Tensor, labels: Tensor, k: int = 1) -> float:
    """Percentage of rows whose label is among the ``k`` highest scores: ``100 * count / rows``
    from the integer count, the same on every device for the same predictions."""
    if scores.shape[0] == 0:
        raise ValueError("topk_accuracy needs at least one row of scores, got none")
    return 100.0 * topk_count(scores, labels, k) / scores.shape[0]


@torch.no_grad()
def knn_scores(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    num_classes: int,
    *,
    k: int = 200,
    temperature: float = 0.1,
    weighted: bool = True,
    chunk: int = 1024,
    device: torch.device | str | None = None,
) -> Tensor:
    """Class scores ``[N_test, num_classes]`` of the (weighted) kNN classifier on cosine
    similarity, computed on ``device`` (default: where ``train_x`` is)."""
    return knn_score_sets(
        train_x, train_y, test_x, num_classes, [(k, weighted)], temperature=temperature, chunk=chunk, device=device
    )[0]


@torch.no_grad()
def knn_score_sets(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    num_classes: int,
    classifiers: Sequence[tuple[int, bool]],
    *,
    temperature: float = 0.1,
    chunk: int = 1024,
    device: torch.device | str | None = None,
) -> list[Tensor]:
    """The scores of several kNN classifiers, one ``[N_test, num_classes]`` tensor per
    ``(k, weighted)`` in ``classifiers``, from one similarity pass: each test row's neighbours
    are ranked once (up to the largest ``k``) and each classifier votes with its first ``k``."""
    check_knn(classifiers, temperature)
    if train_x.dim() != 2 or test_x.dim() != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"features must be [N, d] with the same d, got {tuple(train_x.shape)} and {tuple(test_x.shape)}"
        )
    if train_y.shape != (train_x.shape[0],):
        raise ValueError(f"train_y must have one entry per training row, got shape {tuple(train_y.shape)}")
    bank = F.normalize(train_x.float().to(device if device is not None else train_x.device), dim=1)
    labels = train_y.long().to(bank.device)
    out: list[list[Tensor]] = [[] for _ in classifiers]
    for start in range(0, test_x.shape[0], chunk):
        q = F.normalize(test_x[start : start + chunk].float().to(bank.device), dim=1)
        sims, idx = (q @ bank.t()).topk(min(max(k for k, _ in classifiers), bank.shape[0]), dim=1)
        for scores, votes in zip(out, knn_votes(sims, labels[idx], num_classes, classifiers, temperature)):
            scores.append(votes)
    return [torch.cat(scores) for scores in out]


def check_knn(classifiers: Sequence[tuple[int, bool]], temperature: float) -> None:
    """Refuse a ``k`` below 1 or a temperature that is not positive."""
    for k, _ in classifiers:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def knn_votes(
    sims: Tensor,
    neighbour_labels: Tensor,
    num_classes: int,
    classifiers: Sequence[tuple[int, bool]],
    temperature: float,
) -> list[Tensor]:
    """The class scores ``[M, num_classes]`` of each ``(k, weighted)`` classifier, from each test
    row's nearest neighbours ranked by cosine similarity: ``sims`` ``[M, K]`` sorted in
    descending order along a row and their labels ``neighbour_labels`` ``[M, K]``; a classifier
    votes with the first ``min(k, K)`` (``K``: the largest ``k``, or all training rows if fewer)."""
    out = []
    for k, weighted in classifiers:
        s, lab = sims[:, :k], neighbour_labels[:, :k]
        if weighted:
            w = (s / temperature).exp()
        else:  # majority vote; a tiny similarity term breaks ties
            w = 1.0 + 1e-6 * s
        votes = torch.zeros(sims.shape[0], num_classes, device=sims.device)
        votes.scatter_add_(1, lab, w)
        out.append(votes)
    return out
