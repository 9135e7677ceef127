"""Seeded, resumable batch iteration for in-memory datasets.

The order of epoch ``e`` depends only on ``(seed, e)``, so a resumed run sees the same batches
as an uninterrupted one (the loop skips the batches already done in the current epoch).
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

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


class TensorBatches:
    """Batches of dicts from in-memory tensors of equal length: ``{"x": ..., "y": ...,
    "index": ...}``. ``index`` (dataset positions) is added automatically."""

    def __init__(self, tensors: Mapping[str, Tensor], batch_size: int, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = True) -> None:
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

    def __iter__(self) -> Iterator[dict[str, Any]]:
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.long)
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            batch = {k: v[idx] for k, v in self.tensors.items()}
            batch["index"] = idx
            yield batch
