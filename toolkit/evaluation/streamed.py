"""Probes on frozen features streamed in chunks: memory bounded by a chunk, not by the dataset
(ImageNet's 1.28M training images go through a frozen backbone once per pass, never all held).

* :func:`chunked_knn_scores`: the weighted kNN of :func:`toolkit.evaluation.knn.knn_score_sets`
  (cosine similarity, ``k = 200``, ``t = 0.1``, and CPCL's 5-NN majority vote) from an iterable
  of training chunks. Each test row keeps a running top-``K`` (similarities and labels, ``K``
  the largest ``k``); each chunk's own top-``K`` is merged into it. Memory: the test features,
  ``M x K`` running neighbours, and one ``[query_chunk, n_chunk]`` similarity block; the
  training set is read once. The votes are :func:`~toolkit.evaluation.knn.knn_votes`, the
  code of ``knn_score_sets``: the same scores up to float round-off whatever the chunking (an
  exact tie of similarities at the ``k``-th neighbour may be broken for another neighbour).
* :func:`streamed_linear_probe`: a softmax classifier ``W x + b`` trained on the device with
  mini-batch SGD (momentum, optional Nesterov, step decay at ``milestones`` or an exponential
  decay to ``final_lr``), zero-initialised, so deterministic given the stream. ``weight_decay``
  penalises ``W`` only, as the L-BFGS probe's ``||W||^2 / (2 c N)`` does: ``weight_decay =
  1 / (c N)`` is that objective. ``train_epoch(epoch)`` returns the epoch's mini-batches (the
  caller re-streams, shuffled and augmented as it likes); top-1 / top-5 are counted over the
  whole test stream. :func:`tensor_epochs` / :func:`tensor_chunks` stream in-memory tensors.
* Standardisation (``standardize=True``): per-dimension mean and population std (as
  scikit-learn's ``StandardScaler``; a zero std counts as 1) from ONE streaming pass before
  training, merged chunk by chunk in float64 (Chan et al.'s pairwise update, no sum-of-squares
  cancellation): over ``stats_chunks`` when given, else over ``train_epoch(0)`` (so
  ``train_epoch`` must be callable twice for epoch 0; with augmentation the statistics are
  those of augmented views, as the probe will see). The papers' protocols below train on raw
  features (``standardize=False``); their learning rates (30) assume them.

The linear protocols the papers state for ImageNet-100:

* CACR, App. B.2 ("Linear Classification Evaluation", for ImageNet-100 and ImageNet-1K): SGD,
  100 epochs, momentum 0.9, mini-batch 256, lr 30.0 decayed x0.1 at epochs 60 and 80 (weight
  decay not stated; MoCo's protocol, which it cites, uses 0). Here: ``epochs=100, lr=30.0,
  momentum=0.9, milestones=(60, 80), gamma=0.1``, batch 256, ``standardize=False``.
* Wang & Liu (behaviour of the temperature), Sec. 5.1 "Evaluation": 100 epochs, SGD, lr 30.0
  x0.2 at epochs 40, 60 and 80, weight decay 0 (momentum and batch not stated).
* CPCL, Sec. 6.1 "Evaluation Protocol" (all datasets): 100 epochs, lr decayed exponentially
  from 1e-2 to 1e-6, weight decay 1e-6; optimizer and batch not stated (its pre-training uses
  Adam except on ImageNet; ``domains/vision/probes.py`` runs it with Adam). The SGD form:
  ``lr=1e-2, final_lr=1e-6, weight_decay=1e-6``. 5-NN reported on ImageNet-100 (Table 2).
* Ring, Sec. 5 "Training Details" (its ImageNet column): logistic regression on the pre-pool
  512x7x7 ResNet-18 output, SGD lr 0.01, momentum 0.9, no weight decay, 100 epochs, no decay
  of the rate (batch not stated).
* LMCL, Sec. 5.2: no linear protocol stated (ResNet-50, 100 pre-training epochs; Table 2
  reports top-1 and top-5 on ImageNet-100).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.evaluation.knn import check_knn, knn_votes, topk_hits

__all__ = [
    "chunked_knn_scores",
    "streamed_linear_probe",
    "fit_streamed_linear",
    "StreamedLinear",
    "feature_stats",
    "streamed_topk",
    "tensor_chunks",
    "tensor_epochs",
    "streamed_linear_probe_tensors",
]

Chunks = Iterable[tuple[Tensor, Tensor]]
ChunkSource = Chunks | Callable[[], Chunks]


def _similarities(q: Tensor, bank: Tensor) -> Tensor:
    """Cosine similarities ``[m, n]`` of unit rows: the one place a similarity block is made."""
    return q @ bank.t()


@torch.no_grad()
def chunked_knn_scores(
    train_chunks: Chunks,
    test_x: Tensor,
    num_classes: int,
    classifiers: Sequence[tuple[int, bool]] = ((200, True), (5, False)),
    *,
    temperature: float = 0.1,
    query_chunk: int = 4096,
    device: torch.device | str | None = None,
) -> list[Tensor]:
    """One ``[M, num_classes]`` score tensor per ``(k, weighted)`` of ``classifiers``, equal (to
    round-off) to ``knn_score_sets`` on the concatenated chunks; see the module doc.
    ``train_chunks``: ``(features [n_i, d], labels [n_i])`` pairs, read once; ``query_chunk``:
    test rows per similarity block; ``device``: where it runs (default: where ``test_x`` is)."""
    check_knn(classifiers, temperature)
    if test_x.dim() != 2:
        raise ValueError(f"test_x must be [M, d], got shape {tuple(test_x.shape)}")
    if query_chunk < 1:
        raise ValueError(f"query_chunk must be >= 1, got {query_chunk!r}")
    dev = torch.device(device) if device is not None else test_x.device
    queries = F.normalize(test_x.float().to(dev), dim=1)
    m, top = queries.shape[0], max(k for k, _ in classifiers)
    sims = torch.empty(m, 0, device=dev)
    labels = torch.empty(m, 0, dtype=torch.long, device=dev)
    for x, y in train_chunks:
        if x.dim() != 2 or x.shape[1] != queries.shape[1] or y.shape != (x.shape[0],):
            raise ValueError(
                f"a training chunk must be [n, {queries.shape[1]}] features with n labels, "
                f"got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        if x.shape[0] == 0:
            continue
        bank, lab = F.normalize(x.float().to(dev), dim=1), y.long().to(dev)
        merged_s, merged_l = [], []
        for start in range(0, m, query_chunk):
            rows = slice(start, start + query_chunk)
            s, i = _similarities(queries[rows], bank).topk(min(top, bank.shape[0]), dim=1)
            s, l = torch.cat([sims[rows], s], 1), torch.cat([labels[rows], lab[i]], 1)
            s, j = s.topk(min(top, s.shape[1]), dim=1)  # sorted, as knn_votes needs
            merged_s.append(s)
            merged_l.append(l.gather(1, j))
        sims, labels = torch.cat(merged_s), torch.cat(merged_l)
    if sims.shape[1] == 0:
        raise ValueError("train_chunks held no training rows")
    return knn_votes(sims, labels, num_classes, classifiers, temperature)


def _chunks(source: ChunkSource) -> Chunks:
    return source() if callable(source) else source


@torch.no_grad()
def feature_stats(chunks: ChunkSource) -> tuple[Tensor, Tensor]:
    """Per-dimension mean and population std (float64, on the chunks' device) in one pass,
    chunks merged by Chan et al.'s update; a zero std (a constant column) is returned as 1."""
    n, mean, m2 = 0, None, None
    for x, _ in _chunks(chunks):
        x = x.double()
        nb = x.shape[0]
        if nb == 0:
            continue
        mb = x.mean(0)
        m2b = ((x - mb) ** 2).sum(0)
        if mean is None:
            n, mean, m2 = nb, mb, m2b
            continue
        delta, total = mb - mean, n + nb
        mean = mean + delta * (nb / total)
        m2 = m2 + m2b + delta**2 * (n * nb / total)
        n = total
    if mean is None:
        raise ValueError("no rows to compute the feature statistics from")
    std = (m2 / n).sqrt()
    # scikit-learn's rule: a scale below 10 * machine epsilon is taken as 1
    return mean, torch.where(std < 10 * np.finfo(np.float64).eps, torch.ones_like(std), std)


class StreamedLinear:
    """A trained probe: ``scores(x)`` standardises (when fitted so) and applies ``W x + b``."""

    def __init__(self, layer: torch.nn.Linear, mean: Tensor | None, std: Tensor | None) -> None:
        self.layer, self.mean, self.std = layer, mean, std

    @torch.no_grad()
    def scores(self, x: Tensor) -> Tensor:
        return self.layer(self._input(x))

    def _input(self, x: Tensor) -> Tensor:
        x = x.to(self.layer.weight.device, non_blocking=True).float()
        return x if self.mean is None else (x - self.mean) / self.std


def fit_streamed_linear(
    train_epoch: Callable[[int], Chunks],
    num_classes: int,
    feature_dim: int,
    *,
    epochs: int,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
    final_lr: float | None = None,
    nesterov: bool = False,
    standardize: bool = True,
    stats_chunks: ChunkSource | None = None,
    device: torch.device | str | None = None,
) -> StreamedLinear:
    """Train the probe of :func:`streamed_linear_probe` and return it. ``final_lr``: decay the
    rate by one factor per epoch so that the last epoch runs at ``final_lr`` (CPCL), in place of
    ``milestones``. ``device``: default, where the first mini-batch is."""
    if epochs < 1 or lr <= 0 or weight_decay < 0 or not 0 <= momentum < 1 or num_classes < 2 or feature_dim < 1:
        raise ValueError(
            f"need epochs >= 1, lr > 0, weight_decay >= 0, 0 <= momentum < 1, num_classes >= 2, "
            f"feature_dim >= 1; got {epochs}, {lr}, {weight_decay}, {momentum}, "
            f"{num_classes}, {feature_dim}"
        )
    if final_lr is not None and (final_lr <= 0 or milestones):
        raise ValueError(f"final_lr must be > 0 and excludes milestones, got {final_lr!r} with {list(milestones)}")
    mean = std = None
    if standardize:
        mean, std = feature_stats(stats_chunks if stats_chunks is not None else (lambda: train_epoch(0)))
    dev = torch.device(device) if device is not None else None
    rate = (final_lr / lr) ** (1.0 / max(1, epochs - 1)) if final_lr is not None else 1.0
    probe = None
    for epoch in range(epochs):
        for x, y in train_epoch(epoch):
            if probe is None:  # built at the first mini-batch: its device, unless one is named
                dev = dev or x.device
                layer = torch.nn.Linear(feature_dim, num_classes).to(dev)
                torch.nn.init.zeros_(layer.weight)
                torch.nn.init.zeros_(layer.bias)
                probe = StreamedLinear(layer, *(None if t is None else t.to(dev).float() for t in (mean, std)))
                opt = torch.optim.SGD(
                    [
                        {"params": [layer.weight], "weight_decay": weight_decay},
                        {"params": [layer.bias], "weight_decay": 0.0},
                    ],
                    lr=lr,
                    momentum=momentum,
                    nesterov=nesterov,
                )
            if x.shape[1] != feature_dim:
                raise ValueError(f"mini-batches must have {feature_dim} features, got shape {tuple(x.shape)}")
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(layer(probe._input(x)), y.to(dev, non_blocking=True).long()).backward()
            opt.step()
        if probe is None:
            raise ValueError(f"train_epoch({epoch}) gave no mini-batches")
        if not bool(torch.isfinite(layer.weight).all()):
            raise ValueError(f"the linear probe diverged at epoch {epoch} (lr {lr} too high for these features?)")
        next_lr = lr * (
            rate ** (epoch + 1) if final_lr is not None else gamma ** sum(1 for m in milestones if m <= epoch + 1)
        )
        for group in opt.param_groups:
            group["lr"] = next_lr
    return probe


@torch.no_grad()
def streamed_topk(
    scores: Callable[[Tensor], Tensor], test_chunks: ChunkSource, topk: Sequence[int] = (1, 5)
) -> dict[str, float]:
    """``{"top1": %, "top5": %, ...}`` of ``scores(features)`` over every row of the stream."""
    hits, n = {k: 0 for k in topk}, 0
    for x, y in _chunks(test_chunks):
        s = scores(x)
        for k in topk:
            hits[k] += int(topk_hits(s, y.to(s.device).long(), k).sum())
        n += y.shape[0]
    if n == 0:
        raise ValueError("test_chunks held no rows")
    return {f"top{k}": 100.0 * hits[k] / n for k in topk}


def streamed_linear_probe(
    train_epoch: Callable[[int], Chunks],
    test_chunks: ChunkSource,
    num_classes: int,
    feature_dim: int,
    *,
    epochs: int,
    lr: float,
    topk: Sequence[int] = (1, 5),
    **fit,
) -> dict[str, float]:
    """Train a linear softmax probe with mini-batch SGD on the stream ``train_epoch(epoch)``
    and score the stream ``test_chunks`` (an iterable, or a callable returning one):
    ``{"top1": %, "top5": %}``. ``fit``: the options of :func:`fit_streamed_linear` (momentum,
    weight_decay, milestones, gamma, final_lr, nesterov, standardize, stats_chunks, device)."""
    probe = fit_streamed_linear(train_epoch, num_classes, feature_dim, epochs=epochs, lr=lr, **fit)
    return streamed_topk(probe.scores, test_chunks, topk)


def tensor_chunks(
    x: Tensor, y: Tensor, size: int, *, seed: int | None = None, epoch: int = 0
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(x, y)`` in slices of ``size`` rows: in order, or (``seed`` given) in the permutation
    drawn from ``(seed, epoch)``, the last slice partial."""
    if size < 1 or y.shape != (x.shape[0],):
        raise ValueError(f"need size >= 1 and one label per row, got {size!r}, {tuple(x.shape)}, {tuple(y.shape)}")
    order = None if seed is None else torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(x.shape[0]))
    for start in range(0, x.shape[0], size):
        rows = slice(start, start + size) if order is None else order[start : start + size].to(x.device)
        yield x[rows], y[rows]


def tensor_epochs(x: Tensor, y: Tensor, batch_size: int, seed: int = 0) -> Callable[[int], Chunks]:
    """``train_epoch`` for in-memory features: epoch ``e`` is a seeded shuffle into mini-batches."""
    return lambda epoch: tensor_chunks(x, y, batch_size, seed=seed, epoch=epoch)


def streamed_linear_probe_tensors(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    *,
    batch_size: int = 256,
    seed: int = 0,
    test_chunk: int = 4096,
    **probe,
) -> dict[str, float]:
    """:func:`streamed_linear_probe` on tensors held in memory (shuffled by ``seed``)."""
    return streamed_linear_probe(
        tensor_epochs(train_x, train_y, batch_size, seed),
        lambda: tensor_chunks(test_x, test_y, test_chunk),
        num_classes,
        train_x.shape[1],
        **probe,
    )
