"""Worker for the 2-process gloo tests: every loss's loss and gradients, the MoCo queue,
MoCo's shuffle-BN, the per-rank views of the pretrainer, and the non-contrastive family's whole
objective (loss, predictor, target network, prototypes, centre, support set) over a few steps."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as nnf
from torch import nn

from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.heads import DINOHead, cancel_gradients
from toolkit.losses.base import ContrastiveBatch, RunLength
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


# The family: (label, objective section, extras). Extras: ``local`` multi-crop local views after
# the 2 global ones, ``dino`` the encoder ends in a DINO head (its last layer frozen for the first
# step), ``labels`` the batch carries class labels. Every part with state is switched on: SwAV's
# prototype freeze and its queue (in use from step 1), DINO's teacher-temperature warm-up, the
# cosine momentum of the target networks, NNCLR's support set.
FAMILY = [
    ("byol", {"loss": {"name": "byol"}, "predictor": {"hidden": [8]}, "target": {"momentum": 0.9}}, {}),
    ("simsiam", {"loss": {"name": "simsiam"}, "predictor": {"hidden": [8]}, "target": {"momentum": 0.0}}, {}),
    (
        "moco_v3",
        {
            "loss": {"name": "moco_v3", "temperature": 0.5},
            "predictor": {"hidden": [8], "last_batch_norm": True},
            "target": {"momentum": 0.9},
        },
        {},
    ),
    ("barlow_twins", {"loss": {"name": "barlow_twins", "lambd": 0.05}}, {}),
    ("vicreg", {"loss": {"name": "vicreg"}}, {}),
    (
        "swav",
        {
            "loss": {
                "name": "swav",
                "prototypes": 6,
                "temperature": 0.5,
                "freeze_prototypes_steps": 1,
                "queue_size": 12,
                "queue_start_step": 1,
            }
        },
        {"local": 1},
    ),
    (
        "dino",
        {
            "loss": {"name": "dino", "student_temperature": 0.5, "teacher_temperature": 0.3, "warmup_epochs": 1.0},
            "target": {"momentum": 0.9},
        },
        {"local": 1, "dino": True},
    ),
    ("supcon", {"loss": {"name": "supcon", "temperature": 0.5}}, {"labels": True}),
    (
        "nnclr",
        {
            "loss": {"name": "nnclr", "temperature": 0.5},
            "predictor": {"hidden": [8]},
            "negatives": {"source": "support_set", "size": 12},
        },
        {},
    ),
]
FAMILY_STEPS, FAMILY_EPOCH = 3, 2  # DINO's warm-up: one epoch of 2 steps; the momentum: cosine over 3
LABELS = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


class FamilyEncoder(nn.Module):
    """A small MLP (no batch norm: on CPU each rank's would see its own slice), optionally ending
    in DINO's head; unnormalised outputs (Barlow Twins and VICReg read raw projections)."""

    def __init__(self, dino: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D_IN, 8), nn.Tanh(), nn.Linear(8, D_OUT))
        self.head = (
            DINOHead(D_OUT, out_dim=8, hidden=8, bottleneck=4, layers=2, freeze_last_layer_steps=1) if dino else None
        )
        self.out_dim = 8 if dino else D_OUT

    def forward(self, x):
        z = self.net(x)
        return self.head(z) if self.head is not None else z


def family_inputs(step):
    """The global batch of a step: 2 global views, 1 local view of each of N instances."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(N, 2, D_IN, generator=g, dtype=torch.float64), torch.randn(
        N, 1, D_IN, generator=g, dtype=torch.float64
    )


def _grads(prefix, module):
    return {f"{prefix}.{k}": None if p.grad is None else p.grad.detach().clone() for k, p in module.named_parameters()}


def _tensors(prefix, module):
    return {f"{prefix}.{k}": v.detach().clone() for k, v in module.state_dict().items() if torch.is_tensor(v)}


def run_family_case(case, ctx=None, gather=True):
    """``FAMILY_STEPS`` steps as the pretrainer takes them (encoder DDP-wrapped, keys from the
    target network on the rank's slice, the batch gathered, the objective's predictor / prototypes
    trained beside the encoder, the frozen parts' gradients cancelled, ``after_step``). Returns
    ``[(loss, {param: grad}) per step]`` (the encoder's gradients after DDP's averaging and the
    objective's own) and the encoder's and objective's state after the last step."""
    _, section, extra = case
    torch.manual_seed(0)
    encoder = FamilyEncoder(extra.get("dino", False)).double()
    objective = objective_mod.build(rc.ObjectiveSection.model_validate(section))
    length = RunLength(lambda: FAMILY_STEPS, FAMILY_EPOCH)
    objective.attach(encoder, encoder.out_dim, N, torch.Generator().manual_seed(3), length)
    objective.double()
    model = ctx.wrap(encoder) if ctx else encoder
    opt = torch.optim.SGD([*encoder.parameters(), *objective.trainable_parameters()], lr=0.1)
    steps = []
    for s in range(FAMILY_STEPS):
        x, x_local = family_inputs(s)
        labels, indices = LABELS, torch.arange(N)
        if ctx:
            sl = slice(ctx.rank * N // ctx.world_size, (ctx.rank + 1) * N // ctx.world_size)
            x, x_local, labels, indices = x[sl], x_local[sl], labels[sl], indices[sl]
        n = x.shape[0]
        z = model(x.flatten(0, 1)).view(n, 2, -1)
        keys = None
        if objective.key_encoder is not None:
            with torch.no_grad():
                keys = objective.key_encoder(x.flatten(0, 1)).view(n, 2, -1)
        local = extra.get("local", 0)
        if local:
            z = torch.cat([z, model(x_local[:, :local].flatten(0, 1)).view(n, local, -1)], dim=1)
        cb = ContrastiveBatch(
            views=z,
            keys=keys,
            indices=indices,
            labels=labels if extra.get("labels") else None,
            global_views=2 if local else None,
            step=s,
        )
        if ctx and gather:
            cb = ctx.gather_batch(cb)
        objective.prepare(cb)
        out = objective(cb)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        cancel_gradients(s, encoder, objective)
        steps.append((float(out.loss.detach()), {**_grads("encoder", encoder), **_grads("objective", objective)}))
        opt.step()
        objective.after_step(cb, encoder)
    return steps, {**_tensors("encoder", encoder), **_tensors("objective", objective)}


def run_family(ctx=None, gather=True):
    return {case[0]: run_family_case(case, ctx, gather) for case in FAMILY}


def main() -> None:
    out_dir = sys.argv[1]
    ctx = Context.from_env("cpu")
    torch.save(
        {
            "losses": run_losses(ctx),
            "queue": run_queue(ctx),
            "shuffle_bn": run_shuffle_bn(ctx),
            "views": run_views(ctx),
            "family": run_family(ctx),
            "family_per_rank": run_family(ctx, gather=False),
        },
        os.path.join(out_dir, f"rank{ctx.rank}.pt"),
    )
    dist.barrier()
    ctx.close()


if __name__ == "__main__":
    main()
