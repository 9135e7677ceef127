"""A minimal domain for testing the shared loop: Gaussian blobs, a linear encoder, noise views."""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from pydantic import Field
from torch import nn

from domains.base import DataBundle, Domain, Encoder, Evaluation, Section
from toolkit.training.batches import TensorBatches


class PointsData(Section):
    n: int = Field(64, ge=8)
    dim: int = Field(4, ge=2)
    noise: float = Field(0.1, ge=0)
    poison_at_step: int | None = None


class PointsEncoder(Section):
    out_dim: int = Field(3, ge=1)


class LinearEncoder(Encoder):
    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, out_dim)
        self.out_dim = out_dim

    def features(self, x):
        return x

    def forward(self, x):
        return nnf.normalize(self.lin(x), dim=-1)


class PointsDomain(Domain):
    name = "points"
    description = "test-only: Gaussian blobs with noise views"
    DataConfig = PointsData
    EncoderConfig = PointsEncoder

    def build_data(self, recipe):
        g = torch.Generator().manual_seed(1234)
        n, d = recipe.data.n, recipe.data.dim
        y = torch.arange(n) % 2
        x = torch.randn(n, d, generator=g) + 3 * y[:, None].float()
        self.poison = recipe.data.poison_at_step
        self.noise = recipe.data.noise
        return DataBundle(
            TensorBatches({"x": x, "y": y}, recipe.budget.batch_size, seed=recipe.seed),
            num_instances=n,
            eval={"x": x, "y": y},
        )

    def build_encoder(self, recipe):
        return LinearEncoder(recipe.data.dim, recipe.encoder.out_dim)

    def make_views(self, batch, num_views, generator=None):
        x = batch["x"]
        noise = torch.randn((x.shape[0], num_views, *x.shape[1:]), generator=generator, device=x.device)
        views = x[:, None] + getattr(self, "noise", 0.1) * noise
        return views

    def contrastive_batch(self, batch, encoder, key_encoder, needs, num_views, step, generator=None):
        cb = super().contrastive_batch(batch, encoder, key_encoder, needs, num_views, step, generator)
        if self.poison is not None and step == self.poison:
            cb.views = cb.views * float("nan")
        return cb

    def evaluate(self, encoder, data, recipe):
        z = encoder(data.eval["x"])
        y = data.eval["y"]
        centre = torch.stack([z[y == c].mean(0) for c in (0, 1)])
        acc = ((z @ centre.t()).argmax(1) == y).float().mean().item()
        return Evaluation({"centroid_acc": acc, "mean_norm": z.norm(dim=1).mean().item()})
