"""Metrics against pair-by-pair loop references (Wang & Isola / Wang & Liu Eq. 10-11, CACR
Eq. 8, LMCL Eq. 3 histograms, Wang & Liu Fig. 8 profile, K-means accuracy) and plot smoke
checks (the figures carry the elements the papers' figures have)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from toolkit.evaluation import metrics, plots


def emb(n, d, seed=0, unit=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True) if unit else x


def dist2(a, b):
    return sum((float(a[k]) - float(b[k])) ** 2 for k in range(len(a)))


def dot(a, b):
    return sum(float(a[k]) * float(b[k]) for k in range(len(a)))


# ----------------------------------------------------------------------------- alignment etc.
def test_alignment_and_uniformity_match_loops():
    x, y = emb(12, 4, 1), emb(12, 4, 2)
    assert metrics.alignment(x, y, alpha=1.5) == pytest.approx(
        sum(math.sqrt(dist2(x[i], y[i])) ** 1.5 for i in range(12)) / 12
    )
    assert metrics.alignment(x, y) == pytest.approx(sum(dist2(x[i], y[i]) for i in range(12)) / 12)
    pairs = [math.exp(-2.0 * dist2(x[i], x[j])) for i in range(12) for j in range(i + 1, 12)]
    assert metrics.uniformity(x) == pytest.approx(math.log(sum(pairs) / len(pairs)), rel=1e-12)
    pairs3 = [math.exp(-3.0 * dist2(x[i], x[j])) for i in range(12) for j in range(i + 1, 12)]
    assert metrics.uniformity(x, t=3.0) == pytest.approx(math.log(sum(pairs3) / len(pairs3)))
    # float32 input is accumulated in float64
    assert metrics.uniformity(x.float()) == pytest.approx(metrics.uniformity(x), rel=1e-6)


def test_uniformity_in_blocks_equals_one_block(monkeypatch):
    x = emb(40, 3, 3)
    whole = metrics.uniformity(x)
    monkeypatch.setattr(metrics, "_BLOCK", 50)  # forces single-row blocks
    assert metrics.uniformity(x) == pytest.approx(whole, rel=1e-12)


def test_tolerance_is_the_conditional_same_class_mean():
    f = emb(15, 4, 4)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 3, 2, 2, 0, 1, 4])
    same = [dot(f[i], f[j]) for i in range(15) for j in range(15) if i != j and int(labels[i]) == int(labels[j])]
    assert metrics.tolerance(f, labels) == pytest.approx(sum(same) / len(same), rel=1e-12)
    assert metrics.tolerance(f, labels.numpy()) == pytest.approx(sum(same) / len(same))
    with pytest.raises(ValueError, match="two samples"):
        metrics.tolerance(f[:3], torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="labels"):
        metrics.tolerance(f, labels[:5])


def test_conditional_entropy_matches_loop():
    q, neg = emb(5, 3, 5), emb(7, 3, 6)

    def entropy(logit_rows):
        total = 0.0
        for row in logit_rows:
            z = sum(math.exp(v) for v in row)
            total += -sum(math.exp(v) / z * (v - math.log(z)) for v in row)
        return total / len(logit_rows)

    shared = [[-2.0 * dist2(q[i], neg[j]) for j in range(7)] for i in range(5)]
    assert metrics.conditional_entropy(q, neg, 2.0) == pytest.approx(entropy(shared), rel=1e-10)
    batch = [[-2.0 * dist2(q[i], q[j]) for j in range(5) if j != i] for i in range(5)]
    assert metrics.conditional_entropy(q, None, 2.0) == pytest.approx(entropy(batch), rel=1e-10)
    per = torch.stack([neg[(torch.arange(7) + i) % 7][:4] for i in range(5)])
    rows = [[-2.0 * dist2(q[i], per[i, j]) for j in range(4)] for i in range(5)]
    assert metrics.conditional_entropy(q, per, 2.0) == pytest.approx(entropy(rows), rel=1e-10)
    assert metrics.conditional_entropy(q, neg, 0.0) == pytest.approx(math.log(7))  # maximum
    assert metrics.conditional_entropy(q, neg, 2.0) < math.log(7)


# ----------------------------------------------------------------------------- distances
def test_distance_histogram_matches_loop():
    f = emb(30, 3, 7)
    d = [(1 - dot(f[i], f[j])) / 2 for i in range(30) for j in range(i + 1, 30)]
    h = metrics.distance_histogram(f, bins=10, d_plus=0.1, d_minus=0.5)
    ref_counts, _ = np.histogram(d, bins=10, range=(0.0, 1.0))
    assert h["counts"].tolist() == ref_counts.tolist()
    assert h["num_pairs"] == len(d) == 435
    assert h["margin_occupancy"] == pytest.approx(sum(0.1 < v < 0.5 for v in d) / len(d))
    assert h["edges"].tolist() == pytest.approx(np.linspace(0, 1, 11).tolist())


def test_class_histograms_split_pairs(monkeypatch):
    f = emb(24, 3, 8)
    labels = torch.arange(24) % 3
    monkeypatch.setattr(metrics, "_BLOCK", 48)  # several row blocks
    h = metrics.class_distance_histograms(f, labels, bins=5, d_plus=0.2, d_minus=0.6)
    same = [(1 - dot(f[i], f[j])) / 2 for i in range(24) for j in range(i + 1, 24) if i % 3 == j % 3]
    diff = [(1 - dot(f[i], f[j])) / 2 for i in range(24) for j in range(i + 1, 24) if i % 3 != j % 3]
    assert h["same"].tolist() == np.histogram(same, bins=5, range=(0, 1))[0].tolist()
    assert h["different"].tolist() == np.histogram(diff, bins=5, range=(0, 1))[0].tolist()
    assert h["same_margin_occupancy"] == pytest.approx(sum(0.2 < v < 0.6 for v in same) / len(same))
    assert h["num_same"] + h["num_different"] == 276
    with pytest.raises(ValueError, match="d_plus must be < d_minus"):
        metrics.distance_histogram(f, d_plus=0.5, d_minus=0.5)


def test_similarity_profile_matches_loop():
    q, cand = emb(6, 4, 9), emb(20, 4, 10)
    idx = torch.tensor([0, 5, 7, 19, 3, 3])
    p = metrics.similarity_profile(q, cand, idx, top=4)
    tops = []
    for i in range(6):
        negs = sorted((dot(q[i], cand[j]) for j in range(20) if j != int(idx[i])), reverse=True)
        tops.append(negs[:4])
    assert p["negatives"].tolist() == pytest.approx(np.mean(tops, axis=0).tolist())
    assert p["positive"] == pytest.approx(np.mean([dot(q[i], cand[int(idx[i])]) for i in range(6)]))
    emb_pos = emb(6, 4, 11)
    p2 = metrics.similarity_profile(q, cand, emb_pos, top=20)
    pos2 = [dot(q[i], emb_pos[i]) for i in range(6)]
    rows = [sorted((dot(q[i], cand[j]) for j in range(20)), reverse=True) for i in range(6)]
    assert p2["positive"] == pytest.approx(np.mean(pos2))
    # the raw values and the spreads (population standard deviations, as the figure's bands)
    np.testing.assert_allclose(p2["positive_values"], pos2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(p2["negative_values"], rows, rtol=1e-12, atol=1e-14)

    def pstd(values):
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))

    assert p2["positive_std"] == pytest.approx(pstd(pos2), rel=1e-12)
    np.testing.assert_allclose(
        p2["negatives_std"], [pstd([r[k] for r in rows]) for k in range(20)], rtol=1e-10, atol=1e-14
    )
    with pytest.raises(ValueError, match="top"):
        metrics.similarity_profile(q, cand, idx, top=20)  # only 19 negatives per anchor


def test_cluster_accuracy_is_permutation_invariant():
    g = torch.Generator().manual_seed(12)
    centers = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    y = torch.arange(80) % 4
    x = centers[y] + 0.3 * torch.randn(80, 2, generator=g)
    permuted = torch.tensor([2, 0, 3, 1])[y]  # cluster ids carry no class order
    assert metrics.cluster_accuracy(x, permuted) == 1.0
    assert metrics.cluster_accuracy(x.numpy(), (permuted + 7).numpy(), seed=3) == 1.0
    merged = torch.where(y == 3, torch.tensor(2), y)  # 3 classes, 4 clusters: one unmatched
    assert metrics.cluster_accuracy(x, merged, n_clusters=4) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="n_clusters"):
        metrics.cluster_accuracy(x, y, n_clusters=0)


# ----------------------------------------------------------------------------- plots
def test_distance_histogram_figure_marks_the_margin():
    f = emb(40, 3, 13)
    fig = plots.distance_histogram_figure(f, bins=20, d_plus=0.15, d_minus=0.45)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    xs = sorted({round(float(line.get_xdata()[0]), 6) for line in ax.lines})
    assert xs == [0.15, 0.45]  # delta+ and delta- lines
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("margin occupancy" in t for t in labels)
    fig2 = plots.distance_histogram_figure(f, labels=torch.arange(40) % 2)
    labels2 = [t.get_text() for t in fig2.axes[0].get_legend().get_texts()]
    assert any("same class" in t for t in labels2) and any("different class" in t for t in labels2)


def test_profile_and_curve_figures(tmp_path):
    q, cand = emb(8, 4, 14), emb(30, 4, 15)
    prof = metrics.similarity_profile(q, cand, torch.arange(8))
    fig = plots.similarity_profile_figure(prof)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["pos"] + [f"n{k}" for k in range(1, 11)]
    many = plots.similarity_profile_figure({"tau=0.07": prof, "tau=0.2": prof})
    assert len(many.axes[0].lines) == 2
    curve = plots.loss_curve_figure(list(range(10)), [1.0 / (s + 1) for s in range(10)], smooth=3)
    assert len(curve.axes[0].lines) == 2
    generic = plots.curve_figure([0.07, 0.2, 0.5], {"uniformity": [3.8, 3.6, 3.2]}, "tau", "-L_uniformity", logx=True)
    generic.savefig(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0
    with pytest.raises(ValueError, match="values"):
        plots.curve_figure([1, 2], {"a": [1, 2, 3]}, "x", "y")
