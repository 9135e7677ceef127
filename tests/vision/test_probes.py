"""Probes on a known-separable toy set, and the weighted kNN against a loop reference."""
from __future__ import annotations

import math

import pytest
import torch

from domains.vision.probes import knn_predict, linear_probe, topk_accuracy


def _blobs(n_per=60, classes=4, dim=16, spread=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(classes, dim, generator=g)
    y = torch.arange(classes).repeat_interleave(n_per)
    x = centres[y] + spread * torch.randn(len(y), dim, generator=g)
    perm = torch.randperm(len(y), generator=g)
    return x[perm], y[perm]


@pytest.mark.parametrize("solver", ["lbfgs", "adam", "sgd"])
def test_linear_probe_separates_gaussian_blobs(solver):
    x_all, y_all = _blobs(n_per=100)
    tr, te = slice(0, 240), slice(240, 400)
    res = linear_probe(x_all[tr], y_all[tr], x_all[te], y_all[te], 4, solver=solver, epochs=30)
    assert res["top1"] >= 99.0
    assert "top5" not in res  # top-5 only above 10 classes


def test_linear_probe_reports_top5_above_ten_classes():
    x, y = _blobs(n_per=20, classes=12, spread=0.2)
    res = linear_probe(x[:160], y[:160], x[160:], y[160:], 12, epochs=50)
    assert res["top1"] >= 99.0 and res["top5"] == 100.0


def test_knn_and_five_nn_separate_gaussian_blobs():
    x, y = _blobs(n_per=100)
    scores = knn_predict(x[:300], y[:300], x[300:], 4, k=200, temperature=0.1)
    assert topk_accuracy(scores, y[300:]) >= 99.0
    scores5 = knn_predict(x[:300], y[:300], x[300:], 4, k=5, weighted=False)
    assert topk_accuracy(scores5, y[300:]) >= 99.0


def test_weighted_knn_matches_a_loop_reference():
    g = torch.Generator().manual_seed(3)
    bank, labels = torch.randn(50, 8, generator=g), torch.randint(0, 5, (50,), generator=g)
    queries = torch.randn(7, 8, generator=g)
    k, t = 10, 0.1
    scores = knn_predict(bank, labels, queries, 5, k=k, temperature=t, chunk=3)
    for q in range(7):
        sims = []
        for i in range(50):  # cosine similarity, written out
            dot = sum(float(queries[q, d] * bank[i, d]) for d in range(8))
            nq = math.sqrt(sum(float(queries[q, d]) ** 2 for d in range(8)))
            nb = math.sqrt(sum(float(bank[i, d]) ** 2 for d in range(8)))
            sims.append((dot / (nq * nb), int(labels[i])))
        sims.sort(reverse=True)
        ref = [0.0] * 5
        for s, lab in sims[:k]:
            ref[lab] += math.exp(s / t)
        assert torch.allclose(scores[q], torch.tensor(ref), rtol=1e-4)


def test_probe_arguments_are_checked():
    x, y = _blobs(n_per=5)
    with pytest.raises(ValueError, match="solver"):
        linear_probe(x, y, x, y, 4, solver="newton")
    with pytest.raises(ValueError, match="same d"):
        linear_probe(x, y, x[:, :3], y, 4)
    with pytest.raises(ValueError, match="k must be"):
        knn_predict(x, y, x, 4, k=0)
