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
* ``distributed.shuffle_bn`` (MoCo, He et al. 2020, Sec. 3.3 "Shuffling BN"): the key encoder's
  input is gathered, permuted with one permutation shared by every rank, each rank encodes its
  slice of the shuffled batch, and the keys are gathered and un-shuffled (:class:`ShuffledKeys`);
  ``distributed.sync_bn`` converts BatchNorm to SyncBatchNorm (CUDA only, as torch's).
* Multi-node: ``ctk run ... --nnodes N --node-rank R --master-addr A --master-port P`` launches
  the node's ``--nproc`` processes with torchrun's static rendezvous (see :func:`launch`).
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


def torchrun_command(
    nproc: int,
    script: str,
    args: list[str],
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int = 29500,
) -> list[str]:
    """The torchrun command line of one node: ``--standalone`` on one node; on several,
    ``--nnodes N --node-rank R --master-addr A --master-port P`` (static rendezvous: node 0
    hosts the store at A:P; every node runs the same command with its own rank)."""
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank must lie in [0, --nnodes), got node rank {node_rank} of {nnodes} nodes")
    where = (
        ["--standalone"]
        if nnodes == 1
        else [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={master_addr}",
            f"--master-port={master_port}",
        ]
    )
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}", script, *args]


def launch(nproc: int, script: str, args: list[str], **nodes: Any) -> int:
    """Run ``script args`` under torchrun with ``nproc`` processes on this node (``nodes``:
    :func:`torchrun_command`'s multi-node arguments); returns the exit code.

    torchrun stops every rank when one fails; Ctrl-C is forwarded to the whole group.
    """
    cmd = torchrun_command(nproc, script, args, **nodes)
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


class _ContiguousGrad(torch.autograd.Function):
    """The identity, whose backward hands on a contiguous gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad.contiguous()


def all_gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` from every rank along dim 0, in rank order, keeping gradients.

    Each gathered part's gradient is made contiguous before torch's backward sees it: the gloo
    path of ``torch.distributed.nn.functional.all_gather``'s backward (torch 2.x) receives into
    ``empty_like`` buffers of the incoming gradients and fills them as if contiguous, so a
    strided gradient (a loss that transposes the views, as DINO's ``[V, B, K]``) came back with
    its entries scrambled."""
    from torch.distributed.nn.functional import all_gather

    return torch.cat([_ContiguousGrad.apply(part) for part in all_gather(x.contiguous())], dim=0)


@torch.no_grad()
def all_gather_no_grad(x: Tensor) -> Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


class ShuffledKeys(nn.Module):
    """MoCo's shuffle-BN around a key encoder (He et al. 2020, Sec. 3.3; the code's
    ``_batch_shuffle_ddp`` / ``_batch_unshuffle_ddp``).

    With local inputs ``x_r`` on rank r, the global batch ``X = cat_r x_r`` is permuted by
    ``perm`` (one permutation, the same on every rank: drawn from ``generator``, which every
    rank seeds alike), rank r encodes rows ``perm[r*n:(r+1)*n]`` of X (its BN statistics come
    from that shuffled sub-batch), the outputs are gathered and ``K[perm] = outputs``
    un-shuffles them; rank r returns its own rows of K. No gradient flows (keys are constants).
    """

    def __init__(self, key_encoder: nn.Module, ctx: Context, generator: torch.Generator) -> None:
        super().__init__()
        self.key_encoder, self.ctx, self.generator = key_encoder, ctx, generator

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        world, rank, n = self.ctx.world_size, self.ctx.rank, x.shape[0]
        gathered = all_gather_no_grad(x)
        perm = torch.randperm(gathered.shape[0], generator=self.generator).to(x.device)
        mine = self.key_encoder(gathered[perm[rank * n : (rank + 1) * n]])
        keys = torch.empty((world * n, *mine.shape[1:]), dtype=mine.dtype, device=mine.device)
        keys[perm] = all_gather_no_grad(mine)
        return keys[rank * n : (rank + 1) * n]


@dataclass
class Context:
    """The process group of this run (created by :meth:`from_env` under torchrun)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def from_env(cls, device: str = "auto") -> Context:
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
        """DDP-wrap the encoder (converted to SyncBatchNorm first with ``sync_bn``; the
        conversion is in place, so ``encoder`` itself then holds the SyncBatchNorm layers)."""
        if sync_bn:
            if self.device.type != "cuda":
                raise ValueError(
                    "distributed.sync_bn: true needs CUDA devices (torch's SyncBatchNorm "
                    f"runs on GPUs only), got device {self.device}; set it to false on CPU"
                )
            # in place for a non-BN root: the parameters stay the same objects
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
                v = v[self.rank * per : (self.rank + 1) * per]
            out[k] = v
        return out

    def gather_batch(self, batch: ContrastiveBatch) -> ContrastiveBatch:
        """The global ContrastiveBatch: views (with gradients), keys, natural and indices
        concatenated over ranks in rank order."""
        if batch.scores is not None:
            raise ValueError(
                "domain-scored batches (scores/positive_mask) cannot be gathered across "
                "ranks yet; run this domain with one process per run"
            )
        return replace(
            batch,
            views=all_gather_with_grad(batch.views) if batch.views is not None else None,
            natural=all_gather_with_grad(batch.natural) if batch.natural is not None else None,
            keys=all_gather_no_grad(batch.keys) if batch.keys is not None else None,
            indices=all_gather_no_grad(batch.indices) if batch.indices is not None else None,
            labels=all_gather_no_grad(batch.labels) if batch.labels is not None else None,
        )

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on at least one (one small all-reduce)."""
        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (pickled; for small host-side state)."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def close(self, clean: bool = True) -> None:
        """End the process group. After a run that ended normally (``clean``): a barrier, then
        the group is destroyed, so that no rank tears its connections down while another still
        uses them (a rank that destroys a gloo group early can hang there, and the other nodes'
        torchrun then waits for it at exit). After an error nothing collective is called (the
        other ranks may never arrive): the process exit and torchrun end the group."""
        if clean and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
