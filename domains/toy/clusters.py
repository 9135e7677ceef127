"""2-D cluster sets for the LMCL toy (LMCL Sec. 5.1, Table 1), defined by ctk.

LMCL cites "Three-Bars" and "Nested-Moons" to Chen et al. (2018) without defining them
(docs/methods.md, section LMCL Table 1), so these generators are ours; ``docs/toy-datasets.md``
gives the definitions and the reasoning. One constraint shapes all of them: the LMCL embedding
is ``phi(x) = P x / ||P x||`` with ``P`` a 2x2 matrix, which depends on ``x`` only through its
direction from the origin, and ``x`` and ``-x`` land on opposite points. So a class boundary
that a linear embedding can draw is a line through the origin: every set keeps its points in
the half-plane ``x_1 > 0`` and its classes in angular sectors seen from the origin, while the
clusters' shapes (long bars, interleaved moons) mislead k-means in the raw Euclidean space.

Every generator takes ``per_class`` (points per class) and a ``torch.Generator`` and returns
``x: [C * per_class, 2]`` float32 and ``y: [C * per_class]`` long labels ``0..C-1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from toolkit import checks

__all__ = ["three_bars", "nested_moons", "sector_blobs", "CLUSTER_SETS", "make_cluster_set"]

# The two-moons decision line y = MOON_SLOPE * x + MOON_INTERCEPT (logistic regression on 5000
# canonical moons with noise 0.1: 88.3% accuracy, the best a straight line does) becomes the
# horizontal axis through the origin.
MOON_SLOPE = 0.193
MOON_INTERCEPT = 0.149


def _check_count(per_class: int) -> None:
    if not isinstance(per_class, int) or per_class < 1:
        raise ValueError(f"per_class must be a positive integer, got {per_class!r}")


def three_bars(
    per_class: int = 200,
    length: float = 3.0,
    gap: float = 1.0,
    width: float = 0.2,
    offset: float = 1.5,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Three parallel horizontal bars right of the origin.

    Bar ``k = 0, 1, 2``: ``x_1 ~ U[offset, offset + length]``, ``x_2 = (k - 1) gap + N(0, width^2)``.
    The bars are longer than their spacing, so k-means in the plane prefers to cut them across
    (64.5 +- 1.7% accuracy over seeds 0-4 with the defaults), while each bar spans its own
    angular sector."""
    _check_count(per_class)
    for name, v in (("length", length), ("gap", gap), ("width", width), ("offset", offset)):
        checks.positive(name, v)
    along = offset + length * torch.rand(3, per_class, generator=generator, dtype=torch.float64)
    heights = (torch.arange(3, dtype=torch.float64) - 1.0) * gap
    across = heights[:, None] + width * torch.randn(3, per_class, generator=generator, dtype=torch.float64)
    x = torch.stack([along, across], dim=-1).reshape(-1, 2)
    y = torch.arange(3).repeat_interleave(per_class)
    return x.float(), y


def nested_moons(
    per_class: int = 200, noise: float = 0.1, offset: float = 3.0, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Two interleaved half-moons, each nested in the other's hollow, placed so that their best
    straight separator passes through the origin.

    Canonical moons (as scikit-learn's ``make_moons``): class 0 ``(cos t, sin t)``, class 1
    ``(1 - cos t, 1/2 - sin t)``, ``t ~ U[0, pi]``, plus ``N(0, noise^2 I)``. Then
    ``x <- R(-theta) (x - (0, b)) + (offset, 0)`` with ``theta = atan(MOON_SLOPE)``,
    ``b = MOON_INTERCEPT``: the line ``x_2 = MOON_SLOPE x_1 + b`` becomes the ``x_1`` axis and
    the moons sit at ``x_1`` in about ``[offset - 1.2, offset + 2.3]``. k-means in the plane
    scores 77.3 +- 1.4% (seeds 0-4); no line does better than about 88%."""
    _check_count(per_class)
    checks.non_negative("noise", noise)
    checks.positive("offset", offset)
    t = math.pi * torch.rand(2, per_class, generator=generator, dtype=torch.float64)
    upper = torch.stack([t[0].cos(), t[0].sin()], dim=-1)
    lower = torch.stack([1.0 - t[1].cos(), 0.5 - t[1].sin()], dim=-1)
    x = torch.cat([upper, lower]) + noise * torch.randn(2 * per_class, 2, generator=generator, dtype=torch.float64)
    theta = math.atan(MOON_SLOPE)
    c, s = math.cos(theta), math.sin(theta)
    rot = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)  # rotation by -theta
    x = (x - torch.tensor([0.0, MOON_INTERCEPT], dtype=torch.float64)) @ rot.T
    x = x + torch.tensor([offset, 0.0], dtype=torch.float64)
    y = torch.arange(2).repeat_interleave(per_class)
    return x.float(), y


def sector_blobs(
    per_class: int = 200,
    classes: int = 3,
    radius: float = 4.0,
    spread: float = 0.5,
    sector: float = 90.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """A control set: ``classes`` isotropic Gaussian blobs ``N(m_k, spread^2 I)`` with means at
    ``radius`` from the origin, at angles equally spaced over ``[-sector/2, sector/2]`` degrees.
    Well separated in the plane and in angle: every method should score near 100%."""
    _check_count(per_class)
    if not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    checks.positive("radius", radius)
    checks.positive("spread", spread)
    checks.in_range("sector", sector, 0.0, 180.0, low_open=True, high_open=True)
    angles = torch.linspace(-sector / 2, sector / 2, classes, dtype=torch.float64) * math.pi / 180
    means = radius * torch.stack([angles.cos(), angles.sin()], dim=1)
    x = means[:, None, :] + spread * torch.randn(classes, per_class, 2, generator=generator, dtype=torch.float64)
    y = torch.arange(classes).repeat_interleave(per_class)
    return x.reshape(-1, 2).float(), y


CLUSTER_SETS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "three_bars": three_bars,
    "nested_moons": nested_moons,
    "sector_blobs": sector_blobs,
}


def make_cluster_set(
    name: str, per_class: int, generator: torch.Generator | None = None, **params: float
) -> tuple[Tensor, Tensor]:
    """The named cluster set (see :data:`CLUSTER_SETS`); ``params`` override its defaults."""
    checks.choice("name", name, tuple(CLUSTER_SETS))
    return CLUSTER_SETS[name](per_class=per_class, generator=generator, **params)
