"""Stateful negative sources: the MoCo queue, the memory bank, and the momentum encoder.

All three are ``nn.Module``s whose state lives in buffers, so ``state_dict`` checkpoints them
and a resumed run continues with the same queue / bank / key encoder.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from toolkit import checks
from toolkit.samplers import masks


def _random_unit_rows(rows: int, dim: int, generator: torch.Generator | None = None) -> Tensor:
    return nnf.normalize(torch.randn(rows, dim, generator=generator), dim=1)


class MoCoQueue(nn.Module):
    """FIFO of ``size`` keys (rows), as in MoCo (He et al. 2020, Alg. 1).

    The queue is read with :meth:`rows` (a detached copy, so the loss may hold it while
    :meth:`enqueue` later overwrites the buffer) and written with :meth:`enqueue` *after* the
    loss, so an anchor's own key of this step is never among its negatives. Wrap-around is
    handled for batch sizes that do not divide ``size``. Initial rows are random unit vectors.
    """

    def __init__(self, size: int, dim: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if not isinstance(size, int) or size < 1:
            raise checks.ArgumentError("size", f"size must be an integer >= 1, got {size!r}")
        if not isinstance(dim, int) or dim < 1:
            raise checks.ArgumentError("dim", f"dim must be an integer >= 1, got {dim!r}")
        self.register_buffer("queue", _random_unit_rows(size, dim, generator))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self._host: tuple[int, int] | None = (0, 0)  # (ptr, filled) mirrored on the host

    @property
    def size(self) -> int:
        return self.queue.shape[0]

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._host = None  # read the loaded buffers once, at the next enqueue

    def rows(self) -> Tensor:
        return self.queue.detach().clone()

    @torch.no_grad()
    def enqueue(self, keys: Tensor) -> None:
        checks.tensor("keys", keys, dim=2)
        if keys.shape[1] != self.queue.shape[1]:
            raise checks.ArgumentError(
                "keys", f"keys must have {self.queue.shape[1]} columns, got shape {tuple(keys.shape)}"
            )
        keys = keys.detach().to(self.queue.dtype)
        if keys.shape[0] > self.size:
            keys = keys[-self.size :]
        if self._host is None:
            self._host = (int(self.ptr), int(self.filled))
        b, (start, filled) = keys.shape[0], self._host
        idx = (torch.arange(b, device=self.queue.device) + start) % self.size
        self.queue[idx] = keys
        # the buffers (checkpointed) follow the host mirror: no read from the device per step
        self._host = ((start + b) % self.size, min(self.size, filled + b))
        self.ptr.fill_(self._host[0])
        self.filled.fill_(self._host[1])


class MemoryBank(nn.Module):
    """One slot per dataset index (instance discrimination, Wu et al. 2018).

    :meth:`update` sets ``bank[i] = normalize(m * bank[i] + (1 - m) * z_i)``; ``m = 0``
    replaces the slot (the Ring repository's default), ``m = 0.5`` is Wu et al.'s.
    """

    def __init__(
        self, num_instances: int, dim: int, momentum: float = 0.5, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if not isinstance(num_instances, int) or num_instances < 2:
            raise checks.ArgumentError("num_instances", f"num_instances must be an integer >= 2, got {num_instances!r}")
        self.momentum = checks.in_range("momentum", momentum, 0.0, 1.0, high_open=True)
        self.register_buffer("bank", _random_unit_rows(num_instances, dim, generator))

    def rows(self) -> Tensor:
        return self.bank.detach().clone()

    @torch.no_grad()
    def update(self, indices: Tensor, z: Tensor) -> None:
        if indices.dim() != 1 or indices.shape[0] != z.shape[0]:
            raise checks.ArgumentError(
                "indices", f"indices must be [N] matching z [N, d], got {tuple(indices.shape)} and {tuple(z.shape)}"
            )
        # the range reads the indices: checked where that waits for nothing (HOST_READ_DEVICES);
        # on a GPU the indexing below checks it on the device
        if indices.device.type in masks.HOST_READ_DEVICES and (
            int(indices.max()) >= self.bank.shape[0] or int(indices.min()) < 0
        ):
            raise checks.ArgumentError(
                "indices",
                f"indices must lie in [0, {self.bank.shape[0]}), got range "
                f"[{int(indices.min())}, {int(indices.max())}]",
            )
        mixed = self.momentum * self.bank[indices] + (1 - self.momentum) * z.detach().to(self.bank.dtype)
        self.bank[indices] = nnf.normalize(mixed, dim=1)


class MomentumEncoder(nn.Module):
    """An exponential-moving-average copy of an encoder (MoCo's key encoder, CURL's):
    ``theta_k <- m * theta_k + (1 - m) * theta_q``; buffers (batch-norm statistics) are copied.

    Kept hand-written rather than ``torch.optim.swa_utils.AveragedModel`` with
    ``get_ema_multi_avg_fn(m)`` (``bench/ema.py``, ResNet-18 CIFAR stem, CPU, 1 thread):
    AveragedModel's first ``update_parameters`` copies the query instead of averaging
    (5e-2 off the loop reference after 5 updates at m = 0.99) unless its ``n_averaged``
    counter is primed to 1; primed, with ``use_buffers=False`` (buffers copied, as here), it
    matches only to rounding (3.6e-7: ``lerp`` rounds differently from ``mul_`` / ``add_``,
    so training runs would no longer reproduce their recorded results bit for bit); and it
    adds an ``n_averaged`` entry to the Objective's state_dict, which checkpoints written so
    far lack (a strict load fails). Its update is faster (100 updates: 0.59 s against
    0.82 s), a few milliseconds per step next to a ResNet-18 forward and backward pass.
    """

    def __init__(self, encoder: nn.Module, momentum: float) -> None:
        super().__init__()
        self.momentum = checks.in_range("momentum", momentum, 0.0, 1.0)
        self.module = copy.deepcopy(encoder)
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, encoder: nn.Module, momentum: float | None = None) -> None:
        """One EMA step with the constant ``momentum`` or, when given, this step's ``momentum``
        (a schedule's value: BYOL's cosine from 0.996 to 1)."""
        m = self.momentum if momentum is None else momentum
        for pk, pq in zip(self.module.parameters(), encoder.parameters()):
            pk.mul_(m).add_(pq.detach(), alpha=1 - m)
        for bk, bq in zip(self.module.buffers(), encoder.buffers()):
            bk.copy_(bq)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The EMA copy's forward pass, with whatever arguments the encoder takes (quick-thought's
        ``pair=True``)."""
        return self.module(*args, **kwargs)
