"""Frozen features computed once and read many times: the cache behind the streamed probes.

A probe that does not augment sees the same features every epoch, so a streamed split goes
through the frozen backbone ONCE (:func:`cache_features`) and every epoch of the SGD probe, its
standardisation statistics, the kNN and the test scoring read the cache. Where the rows go,
decided when the first chunk shows their width (``rows x d`` float32 bytes against a budget):

* ``device``: a float32 tensor on the features' CUDA device, when it fits in ``memory_limit``
  (default: half of the device's free memory);
* ``memory``: a float32 tensor in host memory (on the CPU this is also the device), when it fits
  in ``memory_limit`` (default: half of the host's available memory);
* ``file``: a file of float16 rows (a numpy memory map) in a fresh folder under ``folder``
  (default: the system's temporary folder, ``$TMPDIR``), removed by :meth:`FeatureCache.close`.
  float16 keeps 11 significant bits (a relative error below 2^-11 on each value); a row with a
  value beyond float16's range (65,504) turns the file into float32 rows from then on.

:meth:`FeatureCache.chunks` reads the rows in order, or in a given permutation (``order``), in
slices of ``size`` rows as float32 on the cache's device: given the permutation a re-streaming
loader draws for an epoch, the probe sees the same mini-batches as when it re-streamed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["FeatureCache", "cache_features", "host_memory_available", "WHERE"]

WHERE = ("device", "memory", "file")
FP16_MAX = float(np.finfo(np.float16).max)


def host_memory_available() -> int:
    """Bytes of host memory available to a new allocation: ``MemAvailable`` of ``/proc/meminfo``
    (Linux), else the free pages."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 2
    return host_memory_available() // 2


class FeatureCache:
    """``rows`` features of width ``dim`` and their labels, filled chunk by chunk with
    :meth:`add`; see the module doc. ``where`` is one of :data:`WHERE`; ``path`` the file (or
    None)."""

    def __init__(self, rows: int, dim: int, device: torch.device, where: str, folder: str | None = None) -> None:
        if where not in WHERE:
            raise ValueError(f"where must be one of {', '.join(WHERE)}, got {where!r}")
        self.rows, self.dim, self.device, self.where = rows, dim, device, where
        self.filled = 0
        self.labels = torch.empty(rows, dtype=torch.long)
        self.path: Path | None = None
        self._folder: Path | None = None
        if where == "file":
            self._folder = Path(tempfile.mkdtemp(prefix="ctk-features-", dir=folder))
            self._open(np.float16)
            self.x: Tensor | np.ndarray = self._map
        else:
            self.x = torch.empty(rows, dim, dtype=torch.float32, device=device if where == "device" else "cpu")

    def _open(self, dtype: type) -> None:
        assert self._folder is not None
        self.path = self._folder / f"features-{np.dtype(dtype).name}.npy"
        self._map = np.lib.format.open_memmap(self.path, mode="w+", dtype=dtype, shape=(self.rows, self.dim))

    def _widen(self) -> None:
        """float16 rows to float32: a value is beyond float16's range."""
        old, old_path = self._map, self.path
        self._open(np.float32)
        self._map[: self.filled] = old[: self.filled]
        del old
        assert old_path is not None
        old_path.unlink()
        self.x = self._map

    @torch.no_grad()
    def add(self, x: Tensor, y: Tensor) -> None:
        """Append a chunk of rows ``x`` ``[n, dim]`` with labels ``y`` ``[n]``."""
        n = x.shape[0]
        if x.dim() != 2 or x.shape[1] != self.dim or y.shape != (n,):
            raise ValueError(
                f"a chunk must be [n, {self.dim}] features with n labels, got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        if self.filled + n > self.rows:
            raise ValueError(f"the cache holds {self.rows} rows; a chunk of {n} after {self.filled} overflows it")
        rows = slice(self.filled, self.filled + n)
        if self.where == "file":
            if self._map.dtype == np.float16 and bool((x.abs() > FP16_MAX).any()):
                self._widen()
            self._map[rows] = x.detach().float().cpu().numpy()
        else:
            self.x[rows] = x.detach().to(self.x.device, non_blocking=True).float()
        self.labels[rows] = y.detach().long().cpu()
        self.filled += n

    def __len__(self) -> int:
        return self.filled

    def _rows(self, index: slice | np.ndarray) -> Tensor:
        if self.where == "file":
            block = self._map[index] if isinstance(index, slice) else self._map[np.sort(index)]
            out = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))
            if not isinstance(index, slice):  # read in file order, handed back in the asked order
                out = out[torch.from_numpy(np.argsort(np.argsort(index)))]
            return out.to(self.device, non_blocking=True)
        rows = index if isinstance(index, slice) else torch.from_numpy(index).to(self.x.device)
        return self.x[rows].to(self.device, non_blocking=True)

    def chunks(self, size: int, order: np.ndarray | None = None) -> Iterator[tuple[Tensor, Tensor]]:
        """``(features float32 [<= size, dim] on the device, labels)``: the rows in order, or in
        the permutation ``order``, the last slice partial."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        n = self.filled
        if order is not None and len(order) != n:
            raise ValueError(f"order must list each of the {n} rows once, got {len(order)} entries")
        for start in range(0, n, size):
            if order is None:
                index: slice | np.ndarray = slice(start, start + size)
                labels = self.labels[index]
            else:
                index = np.asarray(order[start : start + size], dtype=np.int64)
                labels = self.labels[torch.from_numpy(index)]
            yield self._rows(index), labels.to(self.device, non_blocking=True)

    def epochs(self, size: int, order: Callable[[int], np.ndarray]) -> Callable[[int], Iterator[tuple[Tensor, Tensor]]]:
        """``train_epoch`` of a probe: epoch ``e`` is the rows in the permutation ``order(e)``."""
        return lambda epoch: self.chunks(size, order(epoch))

    def tensors(self) -> tuple[Tensor, Tensor]:
        """All the rows as one float32 tensor on the device, and the labels."""
        return self._rows(slice(0, self.filled)), self.labels[: self.filled].to(self.device)

    def close(self) -> None:
        """Let go of the rows; a file's folder is removed."""
        self.x = torch.empty(0)
        if self._folder is not None:
            self._map = None  # the memory map closes with its last reference
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> FeatureCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@torch.no_grad()
def cache_features(
    chunks: Iterable[tuple[Tensor, Tensor]],
    rows: int,
    *,
    device: torch.device | str | None = None,
    memory_limit: int | None = None,
    folder: str | None = None,
) -> FeatureCache:
    """Read ``chunks`` (``(features [n_i, d], labels [n_i])``, at most ``rows`` rows in all)
    once into a :class:`FeatureCache`, placed as the module doc says: on ``device`` (default:
    where the first chunk is) or in host memory when ``rows x d`` float32 bytes fit in
    ``memory_limit`` (default: half of what is free there), else in a file under ``folder``."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows!r}")
    if memory_limit is not None and memory_limit < 0:
        raise ValueError(f"memory_limit must be >= 0 bytes or None, got {memory_limit!r}")
    cache: FeatureCache | None = None
    try:
        for x, y in chunks:
            if cache is None:
                if x.dim() != 2:
                    raise ValueError(f"features must be [n, d], got shape {tuple(x.shape)}")
                dev = torch.device(device) if device is not None else x.device
                need = rows * x.shape[1] * 4
                if dev.type == "cuda" and need <= (memory_limit if memory_limit is not None else _budget(dev)):
                    where = "device"
                else:
                    host = memory_limit if memory_limit is not None else _budget(torch.device("cpu"))
                    where = "memory" if need <= host else "file"
                cache = FeatureCache(rows, x.shape[1], dev, where, folder)
            cache.add(x, y)
    except BaseException:
        if cache is not None:
            cache.close()
        raise
    if cache is None:
        raise ValueError("no features to cache: the chunks held no rows")
    return cache
