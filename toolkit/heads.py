"""Trainable heads the non-contrastive family puts beside the encoder, for any domain.

* :class:`MLPHead` -- the predictor of BYOL / SimSiam / MoCo v3 / NNCLR, and vision's projection head:
  ``Linear -> [BatchNorm] -> ReLU`` per hidden layer, then a ``Linear`` and, for MoCo v3, a
  ``BatchNorm1d(affine=False)`` on the output.
* :class:`DINOHead` -- DINO's projection head (Caron et al. 2021, Sec. 3.1 and App. A): an MLP of
  GELUs to a bottleneck, L2 normalisation, then a weight-normalised linear layer to ``out_dim``
  prototypes whose norm is fixed to 1 (``norm_last_layer``); the last layer can be frozen for the
  first steps (:meth:`DINOHead.cancel_gradients`).
* :class:`Prototypes` -- SwAV's prototype vectors (Caron et al. 2020, Sec. 3.1): a ``[K, d]``
  matrix trained with the encoder, L2-normalised after every optimizer step
  (:meth:`Prototypes.normalize_`) and frozen for the first ``freeze_steps`` steps.

Heads that freeze a part for the first steps say so through ``cancel_gradients(step)``: the
trainer calls it on every module that has it between the backward pass and the optimizer step
(:func:`cancel_gradients`), so the freeze holds for any optimizer and any domain.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit import checks

__all__ = ["MLPHead", "DINOHead", "Prototypes", "cancel_gradients"]


class MLPHead(nn.Module):
    """``in -> hidden[0] -> ... -> out_dim``: Linear (no bias before a batch norm), BatchNorm1d
    when ``batch_norm``, ReLU per hidden layer; a last Linear; with ``last_batch_norm`` a
    ``BatchNorm1d(out_dim, affine=False)`` after it (MoCo v3's predictor and projector)."""

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int] = (512,),
        out_dim: int = 128,
        batch_norm: bool = False,
        last_batch_norm: bool = False,
    ) -> None:
        super().__init__()
        checks.integer("in_dim", in_dim, 1)
        checks.integer("out_dim", out_dim, 1)
        if any(not isinstance(h, int) or h < 1 for h in hidden):
            raise checks.ArgumentError("hidden", f"hidden sizes must be integers >= 1, got {list(hidden)!r}")
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers.append(nn.Linear(d, h, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.ReLU(inplace=True))
            d = h
        layers.append(nn.Linear(d, out_dim, bias=not last_batch_norm))
        if last_batch_norm:
            layers.append(nn.BatchNorm1d(out_dim, affine=False))
        self.net = nn.Sequential(*layers)
        self.out_dim = out_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class DINOHead(nn.Module):
    """DINO's head: ``layers`` Linear layers with GELU (hidden ``hidden``, the last to
    ``bottleneck``), L2 normalisation, then a weight-normalised ``Linear(bottleneck, out_dim,
    bias=False)``. With ``norm_last_layer`` the weight norm's magnitude ``g`` is fixed at 1 (not
    trained): the prototypes' norms cannot grow. ``freeze_last_layer_steps``: the last layer gets
    no update for the first steps (the paper freezes it during the first epoch)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int = 65536,
        hidden: int = 2048,
        bottleneck: int = 256,
        layers: int = 3,
        batch_norm: bool = False,
        norm_last_layer: bool = True,
        freeze_last_layer_steps: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (("in_dim", in_dim), ("out_dim", out_dim), ("hidden", hidden), ("bottleneck", bottleneck)):
            checks.integer(name, value, 1)
        checks.integer("layers", layers, 1)
        checks.integer("freeze_last_layer_steps", freeze_last_layer_steps, 0)
        mlp: list[nn.Module] = []
        d = in_dim
        for i in range(layers):
            last = i == layers - 1
            out = bottleneck if last else hidden
            mlp.append(nn.Linear(d, out))
            if not last:
                if batch_norm:
                    mlp.append(nn.BatchNorm1d(out))
                mlp.append(nn.GELU())
            d = out
        self.mlp = nn.Sequential(*mlp)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        last_layer = nn.Linear(bottleneck, out_dim, bias=False)
        self.last_layer = nn.utils.parametrizations.weight_norm(last_layer)
        original0 = self.last_layer.parametrizations.weight.original0  # g, [out_dim, 1]
        with torch.no_grad():
            original0.fill_(1.0)
        if norm_last_layer:
            original0.requires_grad_(False)
        self.freeze_last_layer_steps = freeze_last_layer_steps
        self.out_dim = out_dim

    def forward(self, x: Tensor) -> Tensor:
        x = F.normalize(self.mlp(x), dim=-1, eps=1e-6)
        return self.last_layer(x)

    def cancel_gradients(self, step: int) -> None:
        """No update of the last layer before step ``freeze_last_layer_steps``."""
        if step < self.freeze_last_layer_steps:
            for p in self.last_layer.parameters():
                p.grad = None


class Prototypes(nn.Module):
    """SwAV's ``count`` prototype vectors of size ``dim`` (a bias-free linear layer whose rows
    are kept unit-norm). ``forward(z)`` gives the scores ``z c_k`` of (normalised) embeddings
    against every prototype; :meth:`normalize_` puts the rows back on the sphere after an
    optimizer step; :meth:`cancel_gradients` freezes them for the first ``freeze_steps`` steps
    (the paper: the first epoch, 313 iterations of its ImageNet batch)."""

    def __init__(self, dim: int, count: int = 3000, freeze_steps: int = 0) -> None:
        super().__init__()
        checks.integer("dim", dim, 1)
        checks.integer("count", count, 1)
        checks.integer("freeze_steps", freeze_steps, 0)
        self.weight = nn.Parameter(F.normalize(torch.randn(count, dim), dim=1))
        self.freeze_steps = freeze_steps

    def forward(self, z: Tensor) -> Tensor:
        return z @ self.weight.t()

    @torch.no_grad()
    def normalize_(self) -> None:
        self.weight.copy_(F.normalize(self.weight, dim=1))

    def cancel_gradients(self, step: int) -> None:
        if step < self.freeze_steps:
            self.weight.grad = None


def cancel_gradients(step: int, *modules: nn.Module) -> None:
    """Call ``cancel_gradients(step)`` on every submodule of ``modules`` that defines it (the
    parts frozen for the first steps: DINO's last layer, SwAV's prototypes)."""
    for root in modules:
        for m in root.modules():
            hook = getattr(m, "cancel_gradients", None)
            if callable(hook):
                hook(step)
