"""The vision domain's probe helpers on frozen features.

* :func:`extract`: features of the frozen backbone, batch by batch, on the CPU.
* :func:`minibatch_linear_probe`: the papers' mini-batch protocols for the linear classifier
  (softmax regression trained with Adam or SGD and a step / exponential schedule, e.g.
  Wang & Isola: Adam, lr 1e-3, betas (0.5, 0.999), 100 epochs, x0.2 at 60 and 80, batch 128;
  CPCL: Adam 1e-2 -> 1e-6). These are training schedules, not an optimum, so they stay here;
  the full-batch probe (``evaluation.linear.solver = lbfgs``) is
  :func:`toolkit.evaluation.probes.linear_probe`, and the kNN is :func:`toolkit.evaluation.knn.knn_scores`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.evaluation.knn import topk_accuracy

__all__ = ["extract", "minibatch_linear_probe"]


@torch.no_grad()
def extract(
    fn: Callable[[Tensor], Tensor],
    images: Tensor,
    prepare: Callable[[Tensor], Tensor],
    batch_size: int = 512,
    device: torch.device | str | None = None,
) -> Tensor:
    """``fn(prepare(images[b]))`` over batches, concatenated on the CPU as float32."""
    out = []
    dev = torch.device(device) if device is not None else None
    for start in range(0, images.shape[0], batch_size):
        x = images[start : start + batch_size]
        if dev is not None:
            x = x.to(dev, non_blocking=True)
        out.append(fn(prepare(x)).float().cpu())
    return torch.cat(out) if out else torch.empty(0)


def _check(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor) -> None:
    if train_x.dim() != 2 or test_x.dim() != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"features must be [N, d] with the same d, got {tuple(train_x.shape)} and {tuple(test_x.shape)}"
        )
    if train_y.shape != (train_x.shape[0],) or test_y.shape != (test_x.shape[0],):
        raise ValueError("labels must have one entry per feature row")
    if train_x.shape[0] == 0 or test_x.shape[0] == 0:
        raise ValueError("probes need at least one training and one test feature")


def minibatch_linear_probe(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    *,
    solver: str = "adam",
    epochs: int = 100,
    lr: float | None = None,
    weight_decay: float = 1e-4,
    batch_size: int = 256,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.9,
    final_lr: float | None = None,
    standardize: bool = True,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Train a softmax classifier on frozen features with mini-batch Adam / SGD; return
    ``top1`` (and ``top5`` when ``num_classes > 10``) test accuracy in percent.

    ``epochs`` counts passes over the data. ``final_lr`` decays the rate exponentially per
    epoch to reach it at the last epoch (CPCL's 1e-2 -> 1e-6), in place of ``milestones``. ``standardize=False`` keeps the raw
    features (protocols whose learning rate assumes them, e.g. Wu et al.'s SGD at lr 30).
    """
    _check(train_x, train_y, test_x, test_y)
    if solver not in ("adam", "sgd"):
        raise ValueError(
            f"solver must be 'adam' or 'sgd' (lbfgs is toolkit.evaluation.probes.linear_probe), got {solver!r}"
        )
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

    if solver == "adam":
        opt = torch.optim.Adam(layer.parameters(), lr=lr or 1e-3, betas=betas, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(layer.parameters(), lr=lr or 0.1, momentum=momentum, weight_decay=weight_decay)
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
            idx = perm[start : start + batch_size]
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
