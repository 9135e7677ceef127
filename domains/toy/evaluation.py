"""Evaluation of toy embeddings: CPCL's linear probe and LMCL's k-means accuracy.

* ``linear_probe_error`` (CPCL Sec. 5, Fig. 3b): the toolkit's linear probe (logistic
  regression) fitted on the embeddings of the training points, error rate (%) on fresh test
  points. Features are standardised first (the augmentation feature's entries are ~1/L, far
  from unit scale).
* ``kmeans_accuracy`` (LMCL Sec. 5.1, Table 1): k-means with as many clusters as classes on the
  embeddings of all points, Hungarian-matched accuracy (%) (``toolkit.evaluation.metrics.cluster_accuracy``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor, nn

from toolkit.evaluation.probes import C_GRID, fit_linear_probe

__all__ = ["embed", "linear_probe_error", "kmeans_accuracy", "sector_accuracy_ceiling"]


@torch.no_grad()
def embed(encoder: nn.Module, x: Tensor, batch_size: int = 8192) -> Tensor:
    """``encoder.features`` of ``x`` in eval mode, in chunks, on the encoder's device; CPU result."""
    device = next(encoder.parameters()).device
    was = encoder.training
    encoder.eval()
    out = [encoder.features(x[i : i + batch_size].to(device)).cpu() for i in range(0, len(x), batch_size)]
    encoder.train(was)
    return torch.cat(out)


def _numpy(t: Tensor | np.ndarray) -> np.ndarray:
    return t.detach().cpu().double().numpy() if isinstance(t, Tensor) else np.asarray(t, dtype=np.float64)


def linear_probe_error(
    train_z: Tensor,
    train_y: Tensor,
    test_z: Tensor,
    test_y: Tensor,
    c: float = 1.0,
    max_iter: int = 2000,
    *,
    standardize: bool = True,
    select_c: bool = False,
    c_grid: Sequence[float] = C_GRID,
    seed: int = 0,
) -> float:
    """Test error (%) of :func:`toolkit.evaluation.probes.fit_linear_probe` (multinomial logistic regression,
    L2 with inverse strength ``c``, lbfgs, in float64) fitted on ``(train_z, train_y)``;
    ``select_c`` chooses ``c`` from ``c_grid`` on a held-out tenth of the training points."""
    if len(train_z) != len(train_y) or len(test_z) != len(test_y):
        raise ValueError(
            f"features and labels must align, got train {len(train_z)} vs {len(train_y)}, "
            f"test {len(test_z)} vs {len(test_y)}"
        )
    if train_z.shape[1:] != test_z.shape[1:]:
        raise ValueError(
            f"train_z and test_z must have the same width, got {tuple(train_z.shape)} and {tuple(test_z.shape)}"
        )
    # one BLAS thread: these problems are tiny, and threads only contend on a shared CPU
    with threadpool_limits(1):
        probe = fit_linear_probe(
            _numpy(train_z),
            np.asarray(train_y),
            c=c,
            max_iter=max_iter,
            standardize=standardize,
            select=select_c,
            c_grid=c_grid,
            seed=seed,
        )
        pred = probe.predict(_numpy(test_z))
    return float(100.0 * (pred != np.asarray(test_y)).mean())


def kmeans_accuracy(z: Tensor, y: Tensor, num_clusters: int | None = None, seed: int = 0) -> float:
    """Accuracy (%) of k-means on ``z`` against ``y`` after the best one-to-one matching of
    clusters to classes (:func:`toolkit.evaluation.metrics.cluster_accuracy`: 10 k-means++ restarts,
    ``random_state=seed``)."""
    from toolkit.evaluation.metrics import cluster_accuracy

    with threadpool_limits(1):
        return 100.0 * cluster_accuracy(z, y, n_clusters=num_clusters, seed=seed)


def sector_accuracy_ceiling(x: Tensor, y: Tensor) -> float | None:
    """For two classes: the best Hungarian-matched accuracy (%) of any split of the points into
    two angular sectors about the origin; None for other class counts.

    It bounds ``kmeans_accuracy`` of every normalised linear embedding ``P x / ||P x||``: 2-means
    on the unit circle splits it by a line, i.e. into two arcs, and a linear map keeps the
    circular order of directions, so each arc holds the points of one angular sector."""
    labels = np.asarray(y)
    if len(np.unique(labels)) != 2:
        return None
    pts = _numpy(x)
    order = np.argsort(np.arctan2(pts[:, 1], pts[:, 0]), kind="stable")
    ones = np.concatenate([[0], np.cumsum(labels[order] == labels.max())])
    n, total = len(order), ones[-1]
    # class "max" inside the sorted run [i, j), the other class outside; arcs across the
    # wrap-around point are complements of such runs, which the max(acc, 1 - acc) covers
    inside = ones[None, :] - ones[:, None]  # [i, j]: ones in [i, j)
    width = np.arange(n + 1)[None, :] - np.arange(n + 1)[:, None]
    correct = inside + (n - total) - (width - inside)
    valid = width >= 0
    acc = np.where(valid, np.maximum(correct, n - correct), 0).max() / n
    return float(100.0 * acc)
