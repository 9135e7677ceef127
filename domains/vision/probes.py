"""Offline probes on frozen features: linear classifier and nearest-neighbour classifiers.

* :func:`linear_probe`: multinomial logistic regression on features extracted once from the
  frozen backbone. Features are standardised with the training split's mean and std. Two
  solvers: ``lbfgs`` (full batch, L2 penalty ``weight_decay / 2 * ||W||^2``; the default:
  deterministic, a few seconds on CPU for 60k x 512) and ``adam`` / ``sgd`` mini-batch with a
  step schedule (the papers' protocols, e.g. Wang & Isola: Adam, lr 1e-3, betas (0.5, 0.999),
  100 epochs, x0.2 at 60 and 80, batch 128).
* :func:`knn_predict`: the weighted kNN of instance discrimination (Wu et al. 2018, Sec. 3.4):
  cosine similarities ``s_i`` of the test feature to its k nearest training features, class
  score ``sum_i exp(s_i / t) [y_i = c]``; k=200, t=0.1. With ``weighted=False`` a plain
  majority vote (ties go to the class with the larger summed similarity): the 5-NN of CPCL
  Table 1.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["extract", "linear_probe", "knn_predict", "topk_accuracy"]


@torch.no_grad()
def extract(fn: Callable[[Tensor], Tensor], images: Tensor,
            prepare: Callable[[Tensor], Tensor], batch_size: int = 512,
            device: torch.device | str | None = None) -> Tensor:
    """``fn(prepare(images[b]))`` over batches, concatenated on the CPU as float32."""
    out = []
    dev = torch.device(device) if device is not None else None
    for start in range(0, images.shape[0], batch_size):
        x = images[start:start + batch_size]
        if dev is not None:
            x = x.to(dev, non_blocking=True)
        out.append(fn(prepare(x)).float().cpu())
    return torch.cat(out) if out else torch.empty(0)


def topk_accuracy(scores: Tensor, labels: Tensor, k: int = 1) -> float:
    """Percentage of rows whose label is among the ``k`` highest scores."""
    k = min(k, scores.shape[1])
    top = scores.topk(k, dim=1).indices
    return float((top == labels[:, None]).any(dim=1).float().mean().item() * 100.0)


def _check(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor) -> None:
    if train_x.dim() != 2 or test_x.dim() != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be [N, d] with the same d, got {tuple(train_x.shape)} "
                         f"and {tuple(test_x.shape)}")
    if train_y.shape != (train_x.shape[0],) or test_y.shape != (test_x.shape[0],):
        raise ValueError("labels must have one entry per feature row")
    if train_x.shape[0] == 0 or test_x.shape[0] == 0:
        raise ValueError("probes need at least one training and one test feature")


def linear_probe(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor,
                 num_classes: int, *, solver: str = "lbfgs", epochs: int = 100,
                 lr: float | None = None, weight_decay: float = 1e-4, batch_size: int = 256,
                 milestones: Sequence[int] = (), gamma: float = 0.1,
                 betas: tuple[float, float] = (0.9, 0.999), momentum: float = 0.9,
                 final_lr: float | None = None, standardize: bool = True, seed: int = 0,
                 device: torch.device | str | None = None) -> dict[str, float]:
    """Train a softmax classifier on frozen features; return ``top1`` (and ``top5`` when
    ``num_classes > 10``) test accuracy in percent.

    ``epochs`` counts L-BFGS iterations for ``lbfgs``, passes over the data otherwise.
    ``final_lr`` (adam / sgd) decays the rate exponentially per epoch to reach it at the last
    epoch (CPCL's 1e-2 -> 1e-6), in place of ``milestones``. ``standardize=False`` keeps the raw
    features (protocols whose learning rate assumes them, e.g. Wu et al.'s SGD at lr 30).
    """
    _check(train_x, train_y, test_x, test_y)
    if solver not in ("lbfgs", "adam", "sgd"):
        raise ValueError(f"solver must be 'lbfgs', 'adam' or 'sgd', got {solver!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs!r}")
    dev = torch.device(device) if device is not None else train_x.device
    if final_lr is not None and final_lr <= 0:
        raise ValueError(f"final_lr must be > 0, got {final_lr!r}")
    xtr, xte = train_x.to(dev).float(), test_x.to(dev).float()
    if standardize:
        mean = xtr.mean(0, keepdim=True)
        std = xtr.std(0, keepdim=True).clamp(min=1e-6)
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    ytr, yte = train_y.to(dev).long(), test_y.to(dev).long()
    layer = torch.nn.Linear(xtr.shape[1], num_classes).to(dev)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)

    if solver == "lbfgs":
        opt = torch.optim.LBFGS(layer.parameters(), lr=lr or 1.0, max_iter=epochs,
                                history_size=20, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-6, tolerance_change=1e-9)

        def closure() -> Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(layer(xtr), ytr) + 0.5 * weight_decay * layer.weight.pow(2).sum()
            loss.backward()
            return loss

        opt.step(closure)
    else:
        if solver == "adam":
            opt = torch.optim.Adam(layer.parameters(), lr=lr or 1e-3, betas=betas,
                                   weight_decay=weight_decay)
        else:
            opt = torch.optim.SGD(layer.parameters(), lr=lr or 0.1, momentum=momentum,
                                  weight_decay=weight_decay)
        if final_lr is not None:
            base = opt.param_groups[0]["lr"]
            rate = (final_lr / base) ** (1.0 / max(1, epochs - 1))
            sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=rate)
        else:
            sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(milestones), gamma=gamma)
        g = torch.Generator().manual_seed(seed)
        n = xtr.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n, generator=g).to(dev)
            for start in range(0, n, batch_size):
                idx = perm[start:start + batch_size]
                opt.zero_grad()
                F.cross_entropy(layer(xtr[idx]), ytr[idx]).backward()
                opt.step()
            sched.step()
    with torch.no_grad():
        scores = layer(xte)
    out = {"top1": topk_accuracy(scores, yte, 1)}
    if num_classes > 10:
        out["top5"] = topk_accuracy(scores, yte, 5)
    return out


@torch.no_grad()
def knn_predict(train_x: Tensor, train_y: Tensor, test_x: Tensor, num_classes: int, *,
                k: int = 200, temperature: float = 0.1, weighted: bool = True,
                chunk: int = 1024, device: torch.device | str | None = None) -> Tensor:
    """Class scores ``[N_test, C]`` of the (weighted) kNN classifier on cosine similarity,
    computed on ``device`` (default: where ``train_x`` is)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    bank = F.normalize(train_x.float().to(device if device is not None else train_x.device), dim=1)
    labels = train_y.long().to(bank.device)
    k = min(k, bank.shape[0])
    out = []
    for start in range(0, test_x.shape[0], chunk):
        q = F.normalize(test_x[start:start + chunk].float().to(bank.device), dim=1)
        sims, idx = (q @ bank.t()).topk(k, dim=1)
        if weighted:
            w = (sims / temperature).exp()
        else:  # majority vote; a tiny similarity term breaks ties
            w = 1.0 + 1e-6 * sims
        votes = torch.zeros(q.shape[0], num_classes, device=bank.device)
        votes.scatter_add_(1, labels[idx], w)
        out.append(votes)
    return torch.cat(out)
