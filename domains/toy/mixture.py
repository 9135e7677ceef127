"""The Gaussian-mixture experiment of CPCL, Sec. 5 (docs/methods.md, section CPCL Sec. 5).

Natural data ``x_bar ~ sum_i pi_i N(mu_i, s I)`` in 2-D with ``c = 4`` components,
``pi_i = 1/c``, component variance ``s = 1`` and means equally spaced on the circle of radius 2
(``mu_i = 2 (cos 2 pi i / c, sin 2 pi i / c)``: the paper says "uniformly distributed on a
circle", ctk takes equal spacing); 200 points per component, labelled by component.
Augmentation: ``A(x_bar) = x_bar + xi``, ``xi ~ N(0, s_a I)`` with ``s_a = 4`` (a variance).

The finite augmentation feature of Sec. 4.1 / 5: augment every natural point twice
(``L = 2 N = 1600`` augmented points) and set ``A[x_bar, x] = p(x | x_bar)`` normalised over the
``L`` columns of each row (the paper: "we normalize the probability for each x_bar"). Its rows
are the *augmentation feature* (AF) that Figure 3(b) probes as a dashed baseline, and
``A_hat = A D^{-1/2}`` with ``d_x = sum_{x_bar} A[x_bar, x]`` is the matrix CPCL performs PCA on.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit import checks

__all__ = [
    "circle_means",
    "component_labels",
    "sample_mixture",
    "gaussian_augment",
    "augmentation_matrix",
    "normalized_augmentation_matrix",
    "bayes_error",
]


def circle_means(components: int = 4, radius: float = 2.0) -> Tensor:
    """``[c, 2]`` means ``radius * (cos 2 pi i / c, sin 2 pi i / c)``, ``i = 0..c-1``."""
    if not isinstance(components, int) or components < 1:
        raise ValueError(f"components must be a positive integer, got {components!r}")
    checks.non_negative("radius", radius)
    angle = 2 * math.pi * torch.arange(components, dtype=torch.float64) / components
    return radius * torch.stack([angle.cos(), angle.sin()], dim=1)


def component_labels(components: int = 4, classes: int | None = None) -> Tensor:
    """The class of each component: ``i mod classes`` (``classes=None``: one class per
    component, the paper's labelling). With an even number of components and ``classes=2``
    the labels alternate around the circle, so no line separates the classes."""
    if classes is not None and (not isinstance(classes, int) or not 1 <= classes <= components):
        raise ValueError(f"classes must be an integer in [1, components={components}] or None, got {classes!r}")
    return torch.arange(components) % (classes or components)


def sample_mixture(
    per_component: int = 200,
    components: int = 4,
    radius: float = 2.0,
    variance: float = 1.0,
    generator: torch.Generator | None = None,
    classes: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``per_component`` points from each isotropic Gaussian ``N(mu_i, variance I)``.

    Returns ``x: [c * per_component, 2]`` (float32) and the labels ``y`` (long): the
    component, or its class under :func:`component_labels` when ``classes`` is given;
    grouped by component (the batches shuffle them)."""
    if not isinstance(per_component, int) or per_component < 1:
        raise ValueError(f"per_component must be a positive integer, got {per_component!r}")
    checks.positive("variance", variance)
    means = circle_means(components, radius)
    labels = component_labels(components, classes)
    noise = torch.randn(components, per_component, 2, generator=generator, dtype=torch.float64)
    x = means[:, None, :] + math.sqrt(variance) * noise
    y = labels.repeat_interleave(per_component)
    return x.reshape(-1, 2).float(), y


def gaussian_augment(x: Tensor, variance: float, generator: torch.Generator | None = None) -> Tensor:
    """``x + xi`` with ``xi ~ N(0, variance I)`` (same shape, dtype and device as ``x``)."""
    checks.non_negative("variance", variance)
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return x + math.sqrt(variance) * noise.to(x.device)


def augmentation_matrix(natural: Tensor, augmented: Tensor, variance: float) -> Tensor:
    """Row-normalised augmentation probabilities ``A[i, l] = p(x_l | x_bar_i) / sum_l' p(x_l' | x_bar_i)``
    for the isotropic Gaussian augmentation of the given ``variance`` (float64 ``[N, L]``; every
    row sums to 1). Computed as a softmax of ``-||x_l - x_bar_i||^2 / (2 variance)``, so far
    points underflow to 0 instead of producing NaN."""
    checks.tensor("natural", natural, dim=2)
    checks.tensor("augmented", augmented, dim=2)
    checks.same_width("natural", natural, "augmented", augmented)
    checks.positive("variance", variance)
    a, b = natural.double(), augmented.double()
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return torch.softmax(-sq.clamp_min(0) / (2 * variance), dim=1)


def normalized_augmentation_matrix(a: Tensor) -> Tensor:
    """``A_hat = A D^{-1/2}`` with ``D = diag(d_x)``, ``d_x = sum_{x_bar} A[x_bar, x]``
    (CPCL Eq. 3)."""
    checks.tensor("a", a, dim=2)
    d = a.sum(0)
    if (d <= 0).any():
        raise ValueError("a has an all-zero column (an augmented point no natural point can produce)")
    return a / d.sqrt()[None, :]


def bayes_error(
    x: Tensor, y: Tensor, components: int = 4, radius: float = 2.0, variance: float = 1.0, classes: int | None = None
) -> float:
    """Error (%) on ``(x, y)`` of the Bayes classifier of the mixture: the class whose
    components (:func:`component_labels`) have the largest summed density at x. With one
    class per component, equal weights and one shared isotropic variance it is the nearest
    mean (``variance`` then does not matter). No classifier of the points, linear or not,
    does better in expectation; for the paper's mixture (4 means at radius 2, variance 1) its
    expected error is 15.11% (the probability that N((2, 0), I) leaves the sector
    |angle| < 45 degrees)."""
    checks.tensor("x", x, dim=2)
    checks.positive("variance", variance)
    labels = component_labels(components, classes)
    log_density = -torch.cdist(x.double(), circle_means(components, radius)).square() / (2 * variance)
    score = torch.stack(
        [torch.logsumexp(log_density[:, labels == k], dim=1) for k in range(int(labels.max()) + 1)], dim=1
    )
    return float(100.0 * (score.argmax(dim=1) != y).double().mean())
