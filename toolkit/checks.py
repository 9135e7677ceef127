"""Argument checks shared by the core: every failure is a ``ValueError`` naming the argument,
its value and what was expected (never a silent NaN later)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


class ArgumentError(ValueError):
    """A bad argument value; ``arg`` is the argument's name (recipes map it to a YAML path)."""

    def __init__(self, arg: str, message: str) -> None:
        super().__init__(message)
        self.arg = arg


def positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(name, f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ArgumentError(name, f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def integer(name: str, value: int, minimum: int = 0) -> int:
    """``value`` if it is an integer (not a bool) of at least ``minimum``, else an ArgumentError."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ArgumentError(name, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def in_range(
    name: str, value: float, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> float:
    lo_ok = value > low if low_open else value >= low
    hi_ok = value < high if high_open else value <= high
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (lo_ok and hi_ok):
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        raise ArgumentError(name, f"{name} must lie in {lb}{low}, {high}{rb}, got {value!r}")
    return float(value)


def choice(name: str, value: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ArgumentError(name, f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def tensor(name: str, x: Tensor, *, dim: int | None = None, min_rows: int = 1) -> Tensor:
    """A floating tensor with ``dim`` dimensions and at least ``min_rows`` rows."""
    if not isinstance(x, Tensor):
        raise ArgumentError(name, f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dim is not None and x.dim() != dim:
        raise ArgumentError(name, f"{name} must have {dim} dimensions, got shape {tuple(x.shape)}")
    if not torch.is_floating_point(x):
        raise ArgumentError(name, f"{name} must be a floating tensor, got dtype {x.dtype}")
    if x.dim() > 0 and x.shape[0] < min_rows:
        raise ArgumentError(name, f"{name} needs at least {min_rows} rows, got shape {tuple(x.shape)}")
    return x


def same_shape(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def same_width(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same embedding size, got "
            f"{a.shape[-1]} ({tuple(a.shape)}) and {b.shape[-1]} ({tuple(b.shape)})"
        )
