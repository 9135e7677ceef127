"""Mixed precision at the boundary of every loss: the arithmetic runs in float32 or wider.

Under ``torch.autocast`` an encoder hands the loss float16 / bfloat16 embeddings, a momentum
encoder or a queue may hand it float32 keys, and the matmuls inside the loss would run in half
precision again. Half precision is too coarse for contrastive statistics: at tau = 0.05 a
logit reaches 20 (float16 exp overflows at 11.1), and a bfloat16 log-sum-exp over thousands of
negatives keeps 8 bits of mantissa. :func:`full_precision` wraps each public function of
``toolkit.losses.functional``: float16 / bfloat16 inputs are cast to float32 (as autocast's
float32 ops do) and the body runs with autocast disabled on the inputs' device, so
similarities, softmax statistics and the returned loss are float32, and a half-precision view
meets a float32 queue or momentum-encoder view in float32 (the gradient flows back to each
input in its own dtype through the cast). float32 and float64 inputs are left as they are (a
float32 / float64 mix stays an error of the loss's own checks), and with autocast off nothing
is cast or copied: the wrapper only inspects the arguments.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

_F = TypeVar("_F", bound=Callable[..., Any])
_HALF = (torch.float16, torch.bfloat16)


def _floating(x: Any) -> bool:
    return isinstance(x, Tensor) and x.is_floating_point()


def _half(x: Any) -> bool:
    return isinstance(x, Tensor) and x.dtype in _HALF


def _each_tensor(args: tuple, kwargs: dict):
    """Floating tensors among the arguments, one level into lists and tuples (views)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            yield from (v for v in value if _floating(v))
        elif _floating(value):
            yield value


def _up(value: Any) -> Any:
    """``value`` with its float16 / bfloat16 tensors (one level into sequences) in float32."""
    if _half(value):
        return value.float()
    if isinstance(value, (list, tuple)) and any(_half(v) for v in value):
        return type(value)(v.float() if _half(v) else v for v in value)
    return value


def full_precision(fn: _F) -> _F:
    """Run ``fn`` with its half-precision tensor arguments in float32 and autocast disabled on
    their device (see the module docstring)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tensors = list(_each_tensor(args, kwargs))
        if not tensors:
            return fn(*args, **kwargs)
        if any(t.dtype in _HALF for t in tensors):
            args = tuple(_up(a) for a in args)
            kwargs = {k: _up(v) for k, v in kwargs.items()}
        device = tensors[0].device.type
        guard = torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else contextlib.nullcontext()
        with guard:
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@full_precision
def similarities(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b^T`` in float32 (or wider) with autocast off: the similarities a selector
    ranks (half-precision rounding would turn near neighbours into ties)."""
    return a @ b.t()
