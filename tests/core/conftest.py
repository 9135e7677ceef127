"""Shared fixtures of the core loss tests: seeded inputs, float32 / float64 parametrisation and
the tolerance each dtype is held to against the float64 loop references."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

DTYPES = [torch.float32, torch.float64]


@pytest.fixture(params=DTYPES, ids=["f32", "f64"])
def dtype(request) -> torch.dtype:
    return request.param


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """float32 against a float64 reference: ~1e-5 relative; float64: round-off only."""
    if dtype == torch.float32:
        return {"rtol": 2e-5, "atol": 2e-6}
    return {"rtol": 1e-9, "atol": 1e-11}


@pytest.fixture
def close() -> Callable[..., None]:
    """close(actual, expected, dtype): torch.testing.assert_close at the dtype's tolerance,
    comparing in float64 (the reference is float64)."""

    def check(actual, expected, dtype: torch.dtype, **extra) -> None:
        # python floats must not pass through the float32 default dtype
        actual = (
            torch.as_tensor(actual, dtype=torch.float64) if not torch.is_tensor(actual) else actual.detach().double()
        )
        expected = (
            torch.as_tensor(expected, dtype=torch.float64)
            if not torch.is_tensor(expected)
            else expected.detach().double()
        )
        torch.testing.assert_close(actual, expected, **{**tolerance(dtype), **extra})

    return check


@pytest.fixture
def rows() -> Callable[..., torch.Tensor]:
    """rows(n, d, seed=0, dtype=float64, unit=True, scale=1.0, grad=True): seeded embeddings
    (drawn in float64, then cast, so float32 and float64 runs see the same numbers)."""

    def make(
        n: int,
        d: int,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
        unit: bool = True,
        scale: float = 1.0,
        grad: bool = True,
    ) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        if unit:
            x = x / x.norm(dim=1, keepdim=True)
        x = (x * scale).to(dtype)
        return x.requires_grad_(grad)

    return make


@pytest.fixture
def leaves() -> Callable[..., list[torch.Tensor]]:
    """leaves(*xs): float64 leaf copies of the inputs, for the loop references (their own
    autograd graph, so reference gradients come from the reference alone)."""

    def make(*xs: torch.Tensor) -> list[torch.Tensor]:
        return [x.detach().double().requires_grad_(True) for x in xs]

    return make
