"""The momentum (key) encoder: the hand-written ``toolkit.samplers.sources.MomentumEncoder``
against ``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn``, on a ResNet-18
(CIFAR stem) on the CPU.

Prints, for the same sequence of query-encoder weights: the largest difference of the key
parameters from the plain-loop reference ``theta_k <- m theta_k + (1 - m) theta_q`` (started
from a copy of the query encoder), whether BatchNorm buffers equal the query's (MoCo copies
them), the state_dict keys each adds, and the seconds per 100 updates with their ratio.

Run: ``python bench/ema.py [--updates 100] [--momentum 0.99]``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from domains.vision.encoders import build_backbone
from toolkit.samplers.sources import MomentumEncoder
from toolkit.training.precision import machine_line  # noqa: E402


def _perturb(net: torch.nn.Module, step: int) -> None:
    """A stand-in for an optimiser step and a forward pass in train mode: new parameters and
    new BatchNorm running statistics."""
    g = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1e-2 * torch.randn(p.shape, generator=g))
        for b in net.buffers():
            if b.is_floating_point():
                b.add_(1e-2 * torch.randn(b.shape, generator=g))
            else:
                b.add_(1)


def _time(update, net: torch.nn.Module, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        update(net)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--momentum", type=float, default=0.99)
    args = ap.parse_args()
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    m, n = args.momentum, args.updates
    torch.manual_seed(0)
    query, _ = build_backbone("resnet18", 3, 32, stem="cifar")
    hand = MomentumEncoder(query, m)
    ema = AveragedModel(query, multi_avg_fn=get_ema_multi_avg_fn(m), use_buffers=False)
    ema_buf = AveragedModel(query, multi_avg_fn=get_ema_multi_avg_fn(m), use_buffers=True)
    # its first update copies the query (n_averaged == 0); MoCo's key starts as that copy
    # already, so count the copy as the first average
    primed = AveragedModel(query, multi_avg_fn=get_ema_multi_avg_fn(m), use_buffers=False)
    primed.n_averaged.fill_(1)
    ref = [p.detach().clone() for p in query.parameters()]

    # values: the same sequence of query weights for each
    for step in range(5):
        _perturb(query, step)
        hand.update(query)
        ema.update_parameters(query)
        ema_buf.update_parameters(query)
        primed.update_parameters(query)
        with torch.no_grad():
            for r, q in zip(ref, query.parameters()):
                r.mul_(m).add_(q, alpha=1 - m)

    def gap(mod: torch.nn.Module) -> float:
        return max(float((p.detach() - r).abs().max()) for p, r in zip(mod.parameters(), ref))

    def buffers_copied(mod: torch.nn.Module) -> bool:
        return all(torch.equal(a, b) for a, b in zip(mod.buffers(), query.buffers()))

    print(f"after 5 updates, m = {m}: max |theta_k - loop reference|")
    print(
        f"  MomentumEncoder                         {gap(hand.module):.2e}  buffers = query's: {buffers_copied(hand.module)}"
    )
    print(
        f"  AveragedModel(ema, use_buffers=False)   {gap(ema.module):.2e}  buffers = query's: {buffers_copied(ema.module)}"
    )
    print(
        f"  AveragedModel(ema, use_buffers=True)    {gap(ema_buf.module):.2e}  buffers = query's: {buffers_copied(ema_buf.module)}"
    )
    print(
        f"  the same, use_buffers=False, n_averaged primed to 1  {gap(primed.module):.2e}  "
        f"buffers = query's: {buffers_copied(primed.module)}"
    )
    extra = sorted(set(ema.state_dict()) - {"module." + k for k in query.state_dict()})
    print(
        f"  state_dict keys besides module.*: MomentumEncoder {sorted(set(hand.state_dict()) - {'module.' + k for k in query.state_dict()})}, AveragedModel {extra}"
    )

    # time: n updates each, interleaved twice to even out a shared CPU
    t_hand = t_ema = 0.0
    for _ in range(2):
        t_hand += _time(hand.update, query, n)
        t_ema += _time(primed.update_parameters, query, n)
    t_hand, t_ema = t_hand / 2, t_ema / 2
    print(
        f"{n} updates, ResNet-18 CIFAR stem ({sum(p.numel() for p in query.parameters()) / 1e6:.1f} M parameters), "
        f"{torch.get_num_threads()} thread(s):"
    )
    print(f"  MomentumEncoder.update        {t_hand:.3f} s")
    print(f"  AveragedModel.update_parameters (use_buffers=False)  {t_ema:.3f} s")
    print(f"  ratio AveragedModel / MomentumEncoder = {t_ema / t_hand:.2f}")


if __name__ == "__main__":
    main()
