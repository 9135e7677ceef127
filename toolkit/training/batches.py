"""Seeded, resumable batch iteration.

The order of epoch ``e`` depends only on ``(seed, e)``, so a resumed run sees the same batches
as an uninterrupted one. :class:`Batches` is the face the training loop reads; a training set
that is not one (any iterable of batch dicts) is re-iterated and the batches already done in a
resumed epoch are skipped (:func:`epoch_batches`). :class:`TensorBatches` serves in-memory
tensors; streamed datasets (``domains/vision/streaming.py``) start an epoch at any batch
without reading the ones before it, and give each rank its own share of every batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor


class SeededEpochSampler(torch.utils.data.Sampler[int]):
    """A permutation of ``range(n)`` per epoch, from ``seed`` and the epoch (call
    :meth:`set_epoch`); use it as a DataLoader sampler for datasets not held in memory."""

    def __init__(self, n: int, seed: int = 0, shuffle: bool = True) -> None:
        self.n, self.seed, self.shuffle, self.epoch = n, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.n))
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class DataStop(RuntimeError):
    """The training data cannot go on (e.g. too many unreadable images): the loop checkpoints
    the last step and stops; the message lists what went wrong. ``resume_args``: what the
    printed resume command needs added for the run to go on (e.g. `` --set KEY=VALUE``)."""

    def __init__(self, message: str = "", resume_args: str = "") -> None:
        super().__init__(message)
        self.resume_args = resume_args


class Batches:
    """What the training loop iterates: an epoch's batches of dicts, from any batch on.

    Subclasses implement ``__len__`` (batches per epoch) and :meth:`iter_from`; the defaults
    below say what the loop may rely on."""

    #: True when every rank already gets its own share of each global batch (the loop then
    #: does not slice the batch by rank itself)
    sharded: bool = False

    def set_epoch(self, epoch: int) -> None:
        """Order the next iteration as epoch ``epoch``."""

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def iter_from(self, start: int) -> Iterator[dict[str, Any]]:  # pragma: no cover - abstract
        """The current epoch's batches from batch ``start`` on (a resumed epoch)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_from(0)

    def metrics(self) -> dict[str, float]:
        """Counters the loop logs with the training metrics (e.g. ``data_bad_images``)."""
        return {}


def epoch_orders() -> tuple[type, ...]:
    """What orders an epoch when the loop calls its ``set_epoch(epoch)``: the training batches
    (:class:`Batches`), :class:`SeededEpochSampler` and torch's ``DistributedSampler`` (a
    ``DataBundle.sampler``)."""
    from torch.utils.data.distributed import DistributedSampler

    return (Batches, SeededEpochSampler, DistributedSampler)


def epoch_batches(train: Any, start: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index in epoch, batch)`` of the current epoch from batch ``start`` on."""
    if isinstance(train, Batches):
        return enumerate(train.iter_from(start), start=start)
    return ((i, b) for i, b in enumerate(train) if i >= start)


class TensorBatches(Batches):
    """Batches of dicts from in-memory tensors of equal length: ``{"x": ..., "y": ...,
    "index": ...}``. ``index`` (dataset positions) is added automatically."""

    def __init__(
        self,
        tensors: Mapping[str, Tensor],
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        lengths = {k: len(v) for k, v in tensors.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"tensors must have equal lengths, got {lengths}")
        self.tensors = dict(tensors)
        self.n = next(iter(lengths.values()))
        if batch_size < 1 or (drop_last and batch_size > self.n):
            raise ValueError(f"batch_size must lie in [1, {self.n}] (dataset size), got {batch_size}")
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler = SeededEpochSampler(self.n, seed, shuffle)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def iter_from(self, start: int) -> Iterator[dict[str, Any]]:
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.long)
        for b in range(start, len(self)):
            idx = order[b * self.batch_size : (b + 1) * self.batch_size]
            batch = {k: v[idx] for k, v in self.tensors.items()}
            batch["index"] = idx
            yield batch
