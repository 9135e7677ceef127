"""Data generators of the toy domain: CPCL's mixture and augmentation matrix, LMCL's cluster
sets; references written from the definitions (densities in loops, inverse transforms)."""

from __future__ import annotations

import math

import pytest
import torch

from domains.toy import clusters, mixture

torch.set_num_threads(1)

Z = 5.0  # sample statistics are held to Z standard errors of their known value


def se_mean(sd: float, n: int) -> float:
    """Standard error of a sample mean of n draws with standard deviation ``sd``."""
    return sd / math.sqrt(n)


def se_var(var: float, n: int) -> float:
    """Standard error of a Gaussian sample variance: var sqrt(2 / (n - 1))."""
    return var * math.sqrt(2.0 / (n - 1))


def test_circle_means_equally_spaced_on_radius_two():
    m = mixture.circle_means(4, 2.0)
    expected = torch.tensor([[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0], [0.0, -2.0]], dtype=torch.float64)
    assert torch.allclose(m, expected, atol=1e-12)


def test_mixture_means_variances_and_labels():
    n = 500_000  # a 1% error in the noise scale (2% in the variance) is 7 standard errors
    x, y = mixture.sample_mixture(n, 4, 2.0, 1.0, torch.Generator().manual_seed(0))
    assert x.shape == (4 * n, 2) and x.dtype == torch.float32
    assert torch.equal(torch.bincount(y), torch.full((4,), n))
    for k in range(4):
        pts = x[y == k].double()
        angle = 2 * math.pi * k / 4
        mean = torch.tensor([2 * math.cos(angle), 2 * math.sin(angle)], dtype=torch.float64)
        assert torch.allclose(pts.mean(0), mean, rtol=0, atol=Z * se_mean(1.0, n))
        cov = torch.cov(pts.T)
        diag, off = cov.diagonal(), cov[0, 1]
        assert torch.allclose(diag, torch.ones(2, dtype=torch.float64), rtol=0, atol=Z * se_var(1.0, n))
        assert abs(float(off)) < Z * se_mean(1.0, n)  # SE of a covariance of independent unit draws


def test_classes_label_components_modulo_classes():
    assert mixture.component_labels(4).tolist() == [0, 1, 2, 3]
    assert mixture.component_labels(8, 2).tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    x, y = mixture.sample_mixture(50, 8, 5.0, 1.0, torch.Generator().manual_seed(3), classes=2)
    means = mixture.circle_means(8, 5.0)
    for k in range(8):  # points are grouped by component; the label is k mod 2
        block = slice(50 * k, 50 * (k + 1))
        assert set(y[block].tolist()) == {k % 2}
        assert torch.allclose(x[block].double().mean(0), means[k], rtol=0, atol=Z * se_mean(1.0, 50))
    with pytest.raises(ValueError, match="classes"):
        mixture.sample_mixture(10, 4, classes=5)


def ref_bayes_error(points, labels, components, radius, variance, classes):
    """Error (%) of argmax over classes of the summed component densities, in loops."""
    means = [
        (radius * math.cos(2 * math.pi * i / components), radius * math.sin(2 * math.pi * i / components))
        for i in range(components)
    ]
    wrong = 0
    for (u, v), label in zip(points, labels):
        density = [0.0] * classes
        for i, (a, b) in enumerate(means):
            density[i % classes] += math.exp(-((u - a) ** 2 + (v - b) ** 2) / (2 * variance))
        wrong += max(range(classes), key=density.__getitem__) != label
    return 100.0 * wrong / len(labels)


@pytest.mark.parametrize("components,classes,radius", [(8, 2, 5.0), (8, 2, 4.0), (6, 3, 3.0), (4, 4, 2.0)])
def test_bayes_error_with_classes_is_the_summed_density_argmax(components, classes, radius):
    x, y = mixture.sample_mixture(300, components, radius, 1.0, torch.Generator().manual_seed(4), classes=classes)
    expected = ref_bayes_error(x.tolist(), y.tolist(), components, radius, 1.0, classes)
    assert mixture.bayes_error(x, y, components, radius, 1.0, classes) == pytest.approx(expected)


def test_alternating_mixture_is_far_from_linear():
    # the hard table's mixture: a linear probe on the raw points sits near chance, the Bayes
    # error near 5%, and the augmentation feature (an RBF-like feature of 1600 pool points)
    # near the Bayes error: room for encoders to differ
    from domains.toy.evaluation import linear_probe_error

    g = torch.Generator().manual_seed(0)
    shape = dict(components=8, radius=5.0, variance=1.0, classes=2)
    x, y = mixture.sample_mixture(100, generator=g, **shape)
    tx, ty = mixture.sample_mixture(100, generator=g, **shape)
    pool = mixture.gaussian_augment(x.repeat(2, 1), 4.0, g)
    bayes = mixture.bayes_error(tx, ty, 8, 5.0, 1.0, 2)
    assert 3.0 < bayes < 8.0
    assert linear_probe_error(x, y, tx, ty) > 40.0
    af = linear_probe_error(
        mixture.augmentation_matrix(x, pool, 4.0), y, mixture.augmentation_matrix(tx, pool, 4.0), ty
    )
    assert af < bayes + 4.0


def test_gaussian_augmentation_has_the_stated_variance():
    n = 1_000_000
    x = torch.zeros(n, 2, dtype=torch.float64)
    aug = mixture.gaussian_augment(x, 4.0, torch.Generator().manual_seed(1))
    assert aug.var(0).sub(4.0).abs().max() < Z * se_var(4.0, n)
    assert aug.mean(0).abs().max() < Z * se_mean(2.0, n)


def test_augmentation_matrix_rows_sum_to_one_and_match_the_density():
    g = torch.Generator().manual_seed(2)
    nat = torch.randn(5, 2, generator=g)
    aug = 3 * torch.randn(7, 2, generator=g)
    a = mixture.augmentation_matrix(nat, aug, 4.0)
    assert a.shape == (5, 7)
    assert torch.allclose(a.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-12)
    for i in range(5):
        dens = [
            math.exp(-((float(aug[l, 0]) - float(nat[i, 0])) ** 2 + (float(aug[l, 1]) - float(nat[i, 1])) ** 2) / 8)
            / (2 * math.pi * 4)
            for l in range(7)
        ]
        for l in range(7):
            assert float(a[i, l]) == pytest.approx(dens[l] / sum(dens), rel=1e-6)
    # far-away points underflow to zero instead of NaN
    far = mixture.augmentation_matrix(torch.zeros(1, 2), torch.tensor([[0.0, 0.0], [1e4, 0.0]]), 4.0)
    assert torch.isfinite(far).all() and float(far[0, 0]) == 1.0


def test_normalized_augmentation_matrix_divides_columns_by_root_degree():
    a = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    ahat = mixture.normalized_augmentation_matrix(a)
    d = [0.7, 0.8, 0.5]
    for i in range(2):
        for l in range(3):
            assert float(ahat[i, l]) == pytest.approx(float(a[i, l]) / math.sqrt(d[l]))
    with pytest.raises(ValueError, match="all-zero column"):
        mixture.normalized_augmentation_matrix(torch.tensor([[1.0, 0.0]]))


@pytest.mark.parametrize("name, classes", [("three_bars", 3), ("nested_moons", 2), ("sector_blobs", 3)])
def test_cluster_sets_shapes_labels_and_half_plane(name, classes):
    x, y = clusters.make_cluster_set(name, 150, torch.Generator().manual_seed(0))
    assert x.shape == (classes * 150, 2) and x.dtype == torch.float32
    assert y.dtype == torch.long and torch.equal(torch.bincount(y), torch.full((classes,), 150))
    assert (x[:, 0] > 0).all()  # right of the origin: classes live in angular sectors
    again, _ = clusters.make_cluster_set(name, 150, torch.Generator().manual_seed(0))
    assert torch.equal(x, again)  # the seed fixes the draw


def test_three_bars_geometry():
    n = 500_000  # 1% of the length, gap or width is > 7 standard errors of its statistic
    x, y = clusters.three_bars(
        n, length=3.0, gap=1.0, width=0.2, offset=1.5, generator=torch.Generator().manual_seed(1)
    )
    for k in range(3):
        bar = x[y == k].double()
        assert bar[:, 0].min() >= 1.5 and bar[:, 0].max() <= 4.5
        # U[1.5, 4.5]: mean 3, sd 3 / sqrt(12)
        assert float(bar[:, 0].mean()) == pytest.approx(3.0, abs=Z * se_mean(3.0 / math.sqrt(12), n))
        assert float(bar[:, 1].mean()) == pytest.approx(k - 1.0, abs=Z * se_mean(0.2, n))
        # sd of a Gaussian sample sd: sigma / sqrt(2 (n - 1))
        assert float(bar[:, 1].std()) == pytest.approx(0.2, abs=Z * 0.2 / math.sqrt(2 * (n - 1)))


def test_nested_moons_invert_to_canonical_moons():
    x, y = clusters.nested_moons(3000, noise=0.0, offset=3.0, generator=torch.Generator().manual_seed(2))
    theta = math.atan(clusters.MOON_SLOPE)
    c, s = math.cos(theta), math.sin(theta)
    p = x.double() - torch.tensor([3.0, 0.0], dtype=torch.float64)
    canon = torch.stack([c * p[:, 0] - s * p[:, 1], s * p[:, 0] + c * p[:, 1]], 1)  # rotate back
    canon[:, 1] += clusters.MOON_INTERCEPT
    upper, lower = canon[y == 0], canon[y == 1]
    assert torch.allclose(upper.norm(dim=1), torch.ones(len(upper), dtype=torch.float64), atol=1e-5)
    assert (upper[:, 1] >= -1e-5).all()
    centre = torch.tensor([1.0, 0.5], dtype=torch.float64)
    assert torch.allclose((lower - centre).norm(dim=1), torch.ones(len(lower), dtype=torch.float64), atol=1e-5)
    assert (lower[:, 1] <= 0.5 + 1e-5).all()


def test_sector_blobs_means():
    n = 100_000
    x, y = clusters.sector_blobs(
        n, classes=3, radius=4.0, spread=0.5, sector=90.0, generator=torch.Generator().manual_seed(3)
    )
    for k, deg in enumerate([-45.0, 0.0, 45.0]):
        m = torch.tensor([4 * math.cos(math.radians(deg)), 4 * math.sin(math.radians(deg))], dtype=torch.float64)
        assert torch.allclose(x[y == k].double().mean(0), m, rtol=0, atol=Z * se_mean(0.5, n))
        assert torch.allclose(
            x[y == k].double().std(0),
            torch.full((2,), 0.5, dtype=torch.float64),
            rtol=0,
            atol=Z * 0.5 / math.sqrt(2 * (n - 1)),
        )


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: clusters.make_cluster_set("two_spirals", 10), "name"),
        (lambda: clusters.three_bars(0), "per_class"),
        (lambda: clusters.three_bars(10, width=-1.0), "width"),
        (lambda: mixture.sample_mixture(10, variance=0.0), "variance"),
        (lambda: mixture.augmentation_matrix(torch.zeros(2, 2), torch.zeros(3, 3), 1.0), "embedding size"),
    ],
)
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call()
