"""Worker for the two-rank ``compile: auto`` test (gloo on the CPU; the device is called CUDA,
the compiler and the figures are injected): in each scenario the two ranks time, or fail,
differently, and each writes down the choice it took and what it ran."""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from toolkit.training import speed
from toolkit.training.distributed import Context

CUDA = torch.device("cuda")
GRAPHS = speed.AUTO_MODE

# rank -> (eager ms, compiled ms); "fail": where that rank's trial raises
SCENARIOS: dict[str, dict[str, object]] = {
    # rank 0 alone would compile (50% faster), rank 1 alone would not (5%): the slowest decides
    "margin": {"ms": {0: (10.0, 5.0), 1: (10.0, 9.5)}},
    # rank 1's eager step is compute-bound: neither rank compiles, rank 0 included
    "compute-bound": {"ms": {0: (8.0, 2.0), 1: (30.0, 2.0)}},
    # both fast enough: both keep the compiled model
    "kept": {"ms": {0: (10.0, 4.0), 1: (11.0, 5.0)}},
    # rank 1's compiled first pass raises: both stay eager, and rank 0 times no compiled pass
    "compiled failure": {"ms": {0: (10.0, 4.0), 1: (10.0, 4.0)}, "fail": (1, "compiled pass")},
    # rank 0's eager timing raises: both stay eager without compiling
    "eager failure": {"ms": {0: (10.0, 4.0), 1: (10.0, 4.0)}, "fail": (0, "eager timing")},
}


class Wrapped(nn.Module):
    """What the injected compiler makes: the model itself, or one that raises at its first call."""

    def __init__(self, model: nn.Module, fails: bool) -> None:
        super().__init__()
        self.inner, self.fails = model, fails

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fails:
            raise RuntimeError("injected: the compiler failed on this rank")
        return self.inner(x)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _pass(model: nn.Module) -> None:
    model.zero_grad(set_to_none=True)
    model(torch.randn(16, 6)).sum().backward()


def scenario(ctx: Context, spec: dict) -> dict:
    rank = ctx.rank
    eager_ms, compiled_ms = spec["ms"][rank]
    fail_rank, where = spec.get("fail", (None, None))
    fails_here = fail_rank == rank
    seen: list[str] = []

    def compiler(model: nn.Module, mode: str) -> nn.Module:
        seen.append("compile")
        return Wrapped(model, fails_here and where == "compiled pass")

    def measure(model: nn.Module, mode: str) -> tuple[float, float]:
        seen.append(f"time {mode}")
        if fails_here and where == "eager timing" and mode == "off":
            raise torch.OutOfMemoryError("injected: CUDA out of memory on this rank")
        return (eager_ms if mode == "off" else compiled_ms), 1.0

    choice = speed.choose_compile(
        "auto", _net(), CUDA, _pass, measure, compiler=compiler, agree=ctx.all_gather_object, steps=100_000
    )
    return {"mode": choice.mode, "reason": choice.reason, "kept": choice.step_model is not None, "seen": seen}


def ddp_trial(ctx: Context) -> dict:
    """The real passes of a DDP model (its all-reduce in every backward), each rank's figures
    injected apart: both ranks agree, and the model comes back as it was on each."""
    model = nn.parallel.DistributedDataParallel(_net())
    before = copy.deepcopy(model.state_dict())

    def measure(m: nn.Module, mode: str) -> tuple[float, float]:
        _, warm = speed.time_passes(m, _pass, torch.device("cpu"), warmup=1, rounds=2, passes=2)
        return {("off", 0): 9.0, ("off", 1): 10.0, (GRAPHS, 0): 4.0, (GRAPHS, 1): 9.5}[mode, ctx.rank], warm

    choice = speed.choose_compile(
        "auto", model, CUDA, _pass, measure, compiler=lambda m, mode: m, agree=ctx.all_gather_object, steps=10**9
    )
    after = model.state_dict()
    return {
        "mode": choice.mode,
        "reason": choice.reason,
        "restored": all(torch.equal(before[k], after[k]) for k in before),
        "grads": [p.grad is None for p in model.parameters()],
    }


def main() -> None:
    out_dir = sys.argv[1]
    ctx = Context.from_env("cpu")
    results = {name: scenario(ctx, spec) for name, spec in SCENARIOS.items()}
    results["ddp"] = ddp_trial(ctx)
    torch.save(results, os.path.join(out_dir, f"rank{ctx.rank}.pt"))
    dist.barrier()
    ctx.close()


if __name__ == "__main__":
    main()
