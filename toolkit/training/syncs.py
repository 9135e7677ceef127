"""Counting host reads: everything that makes the host wait for a value computed on the device.

On a GPU each of these waits for the device queue to drain: a tensor's ``item``, ``tolist``,
``cpu``, ``numpy``, ``float()`` / ``int()`` / ``bool()`` / ``index()``; and the operations whose
output shape or value the host must know, wherever they are called from (``if t.any():``,
``x[mask]`` with a bool mask, ``nonzero``, ``masked_select``, ``torch.equal``, ``unique``...).
:class:`SyncCounter` counts both for a ``with`` block, on any device, so a CPU test sees what a
GPU step would wait for: the tensor methods by wrapping them (on the CPU ``tolist``, ``cpu`` and
``numpy`` reach no operator), the operations with a ``TorchDispatchMode`` (every aten operator
call, however deep in torch it is made). A read is counted once: under a wrapped method the
operators it runs are not counted again.

Reads made by ``torch.optim`` through the tensor methods are not counted: they are of host-side
values (an optimizer's step count lives on the CPU unless it is ``capturable``). Every other read
is counted wherever it comes from (``f"{loss:.3f}"`` reads through ``torch._tensor``'s
``__format__``, a ``GradScaler`` step through ``item``). ``bench/precision_step.py``, the loop's tests
and the whole-step test (``tests/pipeline/test_host_reads.py``) read it per step.

:func:`cuda_branches` forces, on the CPU, every branch the toolkit takes on CUDA to avoid host
reads, so that the counter can check them here.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SYNC_METHODS", "SYNC_OPS", "SyncCounter", "cuda_branches"]

SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")

_aten = torch.ops.aten
# operator overload packet -> the name a read is counted under; each waits for the device
# (a value, or the size of an output that depends on values)
SYNC_OPS = {
    _aten._local_scalar_dense: "aten._local_scalar_dense",
    _aten.is_nonzero: "aten.is_nonzero",
    _aten.nonzero: "aten.nonzero",
    _aten.masked_select: "aten.masked_select",
    _aten.equal: "aten.equal",
    _aten._unique: "aten.unique",
    _aten._unique2: "aten.unique",
    _aten.unique_dim: "aten.unique",
    _aten.unique_consecutive: "aten.unique",
}
# indexing with a bool (or uint8) mask: the host needs the number of True entries
_MASK_INDEXED = {
    _aten.index: "aten.index (bool mask)",
    _aten.index_put: "aten.index_put (bool mask)",
    _aten.index_put_: "aten.index_put (bool mask)",
    _aten._index_put_impl_: "aten.index_put (bool mask)",
}
_MASK_DTYPES = (torch.bool, torch.uint8)
_TORCH_FILES = (str(Path(torch.__file__).parent),)


def _read_name(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The name ``func(*args, **kwargs)`` is counted under, or None when it reads nothing back."""
    packet = func.overloadpacket
    name = SYNC_OPS.get(packet)
    if name is not None:
        return name
    if packet is _aten.repeat_interleave and func._overloadname == "Tensor" and kwargs.get("output_size") is None:
        return "aten.repeat_interleave"  # without output_size: the sum of the repeats
    name = _MASK_INDEXED.get(packet)
    if name is not None and len(args) > 1:
        if any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in args[1] or ()):
            return name
    return None


def _caller(depth: int) -> str:
    """``file:line`` of the innermost frame outside torch, ``depth`` frames up at least."""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_FILES):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class _Ops(TorchDispatchMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's hook
        kwargs = kwargs or {}
        name = _read_name(func, args, kwargs)
        if name is not None and not self.counter._inside_method():
            self.counter._count(name, _caller(2))
        return func(*args, **kwargs)


class SyncCounter:
    """``with SyncCounter() as c: ...``; ``c.total`` and ``c.calls`` (by method or operator)
    count the reads, ``c.where`` by (name, ``file:line`` of the innermost caller outside torch)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.where: Counter[tuple[str, str]] = Counter()
        self._saved: dict[str, Any] = {}
        self._local = threading.local()
        self._mode: _Ops | None = None

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def clear(self) -> None:
        self.calls.clear()
        self.where.clear()

    def report(self) -> str:
        """Every read counted, one line each: ``count  name  where``."""
        return "\n".join(f"{n:4d}  {name}  {at}" for (name, at), n in self.where.most_common())

    def _count(self, name: str, at: str) -> None:
        self.calls[name] += 1
        self.where[(name, at)] += 1

    def _inside_method(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def __enter__(self) -> Self:
        for name in SYNC_METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def counted(
                tensor: torch.Tensor, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any
            ) -> Any:
                caller = sys._getframe(1).f_globals.get("__name__", "")
                if not caller.startswith("torch.optim") and not self._inside_method():
                    self._count(_name, _caller(2))
                local = self._local
                local.depth = getattr(local, "depth", 0) + 1
                try:
                    return _original(tensor, *args, **kwargs)
                finally:
                    local.depth -= 1

            setattr(torch.Tensor, name, counted)
        self._mode = _Ops(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()


@contextlib.contextmanager
def cuda_branches() -> Iterator[None]:
    """Take, on the CPU, every branch the toolkit takes on CUDA to keep a step free of host
    reads: the losses' row-max shift and their checks left to the records
    (``_kernel.ROW_MAX_DEVICES``), the samplers' ``topk`` ring cut and unchecked bank indices
    (``masks.HOST_READ_DEVICES``) and LARS's multi-tensor update (``optim.FOREACH_DEVICES``).
    For tests and benches; restored on exit."""
    from toolkit.losses.functional import _kernel
    from toolkit.samplers import masks
    from toolkit.training import optim

    saved = (_kernel.ROW_MAX_DEVICES, masks.HOST_READ_DEVICES, optim.FOREACH_DEVICES)
    _kernel.ROW_MAX_DEVICES = (*saved[0], "cpu")
    masks.HOST_READ_DEVICES = ()
    optim.FOREACH_DEVICES = (*saved[2], "cpu")
    try:
        yield
    finally:
        _kernel.ROW_MAX_DEVICES, masks.HOST_READ_DEVICES, optim.FOREACH_DEVICES = saved
