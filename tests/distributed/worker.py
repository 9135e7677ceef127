"""Worker for the 2-process gloo tests: every loss's loss and gradients, the MoCo queue,
MoCo's shuffle-BN and the per-rank views of the pretrainer."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as nnf
from torch import nn

from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.losses.base import ContrastiveBatch
from toolkit.training.distributed import Context

LOSSES = [
    ("nt_xent", {"name": "nt_xent", "temperature": 0.5}, []),
    ("dcl", {"name": "dcl", "temperature": 0.5, "tau_plus": 0.1}, []),
    ("hcl", {"name": "hcl", "temperature": 0.5, "tau_plus": 0.1, "beta": 1.0}, []),
    ("cacr", {"name": "cacr", "t_pos": 1.0, "t_neg": 2.0}, []),
    ("spectral", {"name": "spectral", "mu": 1.0}, []),
    ("cpcl_a", {"name": "cpcl_a", "K": 2.0}, []),
    ("cpcl_full", {"name": "cpcl_full", "K": 2.0, "alpha": 1.0}, []),
    (
        "nt_xent+dp",
        {"name": "nt_xent", "temperature": 0.5},
        [{"name": "distance_polarization", "weight": 1.0, "d_plus": 0.2, "d_minus": 0.6}],
    ),
]
N, D_IN, D_OUT = 8, 6, 4


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(D_IN, D_OUT)

    def forward(self, x):
        return nnf.normalize(self.lin(x), dim=-1)


def inputs():
    g = torch.Generator().manual_seed(7)
    return torch.randn(N, 2, D_IN, generator=g, dtype=torch.float64), torch.randn(
        N, D_IN, generator=g, dtype=torch.float64
    )


def step(encoder, model, objective, views, natural, ctx=None):
    """One loss + backward; returns (loss, {param name: grad})."""
    n, v = views.shape[:2]
    z = model(views.flatten(0, 1)).view(n, v, -1)
    cb = ContrastiveBatch(views=z, natural=model(natural), indices=torch.arange(n))
    if ctx is not None:
        cb = ctx.gather_batch(cb)
    out = objective(cb)
    encoder.zero_grad()
    out.loss.backward()
    return float(out.loss.detach()), {k: p.grad.detach().clone() for k, p in encoder.named_parameters()}


def build(spec, regs, source=None):
    cfg = rc.ObjectiveSection.model_validate(
        {"loss": spec, "regularizers": regs, **({"negatives": source} if source else {})}
    )
    return objective_mod.build(cfg)


def run_losses(ctx=None):
    views, natural = inputs()
    results = {}
    for label, spec, regs in LOSSES:
        torch.manual_seed(0)
        encoder = Linear().double()
        model = ctx.wrap(encoder) if ctx else encoder
        if ctx:
            sl = slice(ctx.rank * N // ctx.world_size, (ctx.rank + 1) * N // ctx.world_size)
            v, nat = views[sl], natural[sl]
        else:
            v, nat = views, natural
        results[label] = step(encoder, model, build(spec, regs), v, nat, ctx)
    return results


def run_queue(ctx=None, steps=3, size=32):
    """A few MoCo steps with a queue; returns the final queue and pointer."""
    views, _ = inputs()
    torch.manual_seed(0)
    encoder = Linear().double()
    model = ctx.wrap(encoder) if ctx else encoder
    objective = build(
        {"name": "moco_infonce", "temperature": 0.2}, [], {"source": "queue", "size": size, "momentum": 0.9}
    )
    objective.attach(encoder, D_OUT, N, torch.Generator().manual_seed(3))
    objective.double()
    opt = torch.optim.SGD(encoder.parameters(), lr=0.5)
    for s in range(steps):
        x = views + 0.1 * s
        if ctx:
            sl = slice(ctx.rank * N // ctx.world_size, (ctx.rank + 1) * N // ctx.world_size)
            x = x[sl]
        n = x.shape[0]
        flat = x.flatten(0, 1)
        z = model(flat).view(n, 2, -1)
        with torch.no_grad():
            keys = objective.key_encoder(flat).view(n, 2, -1)
        cb = ContrastiveBatch(views=z, keys=keys, step=s)
        if ctx:
            cb = ctx.gather_batch(cb)
        objective.prepare(cb)
        out = objective(cb)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        objective.after_step(cb, encoder)
    return objective.queue.queue.clone(), int(objective.queue.ptr)


class BNKeyEncoder(nn.Module):
    """A key encoder whose output depends on its batch's statistics (BatchNorm)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.bn = nn.Linear(D_IN, D_OUT), nn.BatchNorm1d(D_OUT)

    def forward(self, x):
        return nnf.normalize(self.bn(self.lin(x)), dim=-1)


SHUFFLE_SEED = 11


def run_shuffle_bn(ctx):
    """Keys of ShuffledKeys on this rank's slice of the global batch, and the BN running mean."""
    from toolkit.training.distributed import ShuffledKeys

    x = inputs()[1]
    torch.manual_seed(0)
    enc = BNKeyEncoder().double()
    n = N // ctx.world_size
    keys = ShuffledKeys(enc, ctx, torch.Generator().manual_seed(SHUFFLE_SEED))(x[ctx.rank * n : (ctx.rank + 1) * n])
    return keys, enc.bn.running_mean.clone()


def run_views(ctx=None):
    """The first training batch's views as the pretrainer of rank ``ctx.rank`` draws them."""
    import yaml

    from tests.pipeline.conftest import POINTS_RECIPE
    from tests.pipeline.points_domain import PointsDomain
    from toolkit.training.pretrainer import Pretrainer
    from toolkit.training.trainer import RunOptions

    recipe = rc.validate(yaml.safe_load(POINTS_RECIPE), PointsDomain.sections())
    domain = PointsDomain(recipe)
    trainer = Pretrainer(recipe, domain, None, RunOptions(distributed=ctx, progress=False))
    batch = next(iter(trainer.data.train))
    return domain.make_views(batch, 2, trainer.views_gen)


def main() -> None:
    out_dir = sys.argv[1]
    ctx = Context.from_env("cpu")
    torch.save(
        {
            "losses": run_losses(ctx),
            "queue": run_queue(ctx),
            "shuffle_bn": run_shuffle_bn(ctx),
            "views": run_views(ctx),
        },
        os.path.join(out_dir, f"rank{ctx.rank}.pt"),
    )
    dist.barrier()
    ctx.close()


if __name__ == "__main__":
    main()
