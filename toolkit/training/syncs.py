"""Counting host syncs: the tensor methods that read a value back to the host.

On a GPU each of ``item``, ``tolist``, ``cpu``, ``numpy``, ``float()`` / ``int()`` /
``bool()`` of a tensor waits for the device queue to drain. :class:`SyncCounter` wraps them
for a ``with`` block and counts the calls (on any device, so CPU tests see what a GPU run
would wait for); ``bench/precision_step.py`` and the loop's tests read it per step. Reads made
by torch's own code are not counted: they are of host-side values (an optimizer's step count
lives on the CPU unless it is ``capturable``).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Self

import torch

__all__ = ["SYNC_METHODS", "SyncCounter"]

SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


class SyncCounter:
    """``with SyncCounter() as c: ...``; ``c.total`` and ``c.calls`` (by method) count the reads."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def __enter__(self) -> Self:
        for name in SYNC_METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def counted(
                tensor: torch.Tensor, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any
            ) -> Any:
                caller = sys._getframe(1).f_globals.get("__name__", "")
                if not caller.startswith("torch."):
                    self.calls[_name] += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
