"""Past one device: torchrun + DistributedDataParallel with correct cross-rank negatives.

* ``ctk run RECIPE --nproc N`` re-launches itself under ``torch.distributed.run`` (torchrun);
  plain ``torchrun --nproc_per_node N cli.py run RECIPE`` works the same. One process per
  device: NCCL on GPUs, gloo on CPU.
* The recipe's ``budget.batch_size`` is the *global* batch: rank r takes the r-th contiguous
  slice of every global batch, and :meth:`Context.gather_batch` concatenates the ranks' slices in
  rank order, so every rank sees exactly the single-process batch.
* The gather is autograd-aware (``torch.distributed.nn.functional.all_gather``: its backward
  sums the gradients of each rank's slice over the ranks). Every rank computes the loss of the
  whole global batch; each rank's slice therefore receives world_size x its gradient, and DDP's
  averaging over ranks divides that back: the parameter gradients equal the single-process
  gradients on the global batch (the classic bug is a plain all_gather, which is 1/world_size
  off).
* Keys, indices and queue/bank updates use the gathered tensors, in rank order, after the loss,
  so queues and banks stay identical on every rank. Rank 0 alone logs and writes checkpoints.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from toolkit.losses.base import ContrastiveBatch


def launch(nproc: int, script: str, args: list[str]) -> int:
    """Run ``script args`` under torchrun with ``nproc`` processes; returns the exit code.

    torchrun stops every rank when one fails; Ctrl-C is forwarded to the whole group.
    """
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           script, *args]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return 130


def all_gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` from every rank along dim 0, in rank order, keeping gradients."""
    from torch.distributed.nn.functional import all_gather
    return torch.cat(all_gather(x.contiguous()), dim=0)


@torch.no_grad()
def all_gather_no_grad(x: Tensor) -> Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


@dataclass
class Context:
    """The process group of this run (created by :meth:`from_env` under torchrun)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def from_env(cls, device: str = "auto") -> "Context":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        if use_cuda:
            torch.cuda.set_device(local)
            dev = torch.device("cuda", local)
        else:
            dev = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        return cls(rank, world, local, dev)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, encoder: nn.Module, sync_bn: bool = False) -> nn.Module:
        """DDP-wrap the encoder (SyncBatchNorm first when asked and on GPUs)."""
        if sync_bn and self.device.type == "cuda":
            encoder = nn.SyncBatchNorm.convert_sync_batchnorm(encoder)
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(encoder, device_ids=ids)

    def shard(self, batch: dict[str, Any]) -> dict[str, Any]:
        """This rank's contiguous slice of a global batch (every tensor along dim 0)."""
        out = {}
        for k, v in batch.items():
            if isinstance(v, Tensor) and v.dim() > 0:
                n = v.shape[0]
                if n % self.world_size:
                    raise ValueError(f"the global batch ({n}) must divide evenly over {self.world_size} processes")
                per = n // self.world_size
                v = v[self.rank * per:(self.rank + 1) * per]
            out[k] = v
        return out

    def gather_batch(self, batch: ContrastiveBatch) -> ContrastiveBatch:
        """The global ContrastiveBatch: views (with gradients), keys, natural and indices
        concatenated over ranks in rank order."""
        if batch.scores is not None:
            raise ValueError("domain-scored batches (scores/positive_mask) cannot be gathered across "
                             "ranks yet; run this domain with one process per run")
        return replace(
            batch,
            views=all_gather_with_grad(batch.views) if batch.views is not None else None,
            natural=all_gather_with_grad(batch.natural) if batch.natural is not None else None,
            keys=all_gather_no_grad(batch.keys) if batch.keys is not None else None,
            indices=all_gather_no_grad(batch.indices) if batch.indices is not None else None)

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on at least one (one small all-reduce)."""
        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
