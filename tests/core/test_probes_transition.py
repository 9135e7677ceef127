"""Transition check (issue 14): each domain's old probe and the toolkit probe give the same
accuracy on fixed seeded problems. Replaced by reference tests once the old probes go."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from toolkit.probes import fit_linear_probe, knn_scores, linear_probe, topk_accuracy


def _problem(n=600, d=20, classes=4, spread=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d, generator=g)
    y = torch.arange(classes).repeat_interleave(n // classes)
    x = centres[y] + spread * torch.randn(len(y), d, generator=g)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm] * torch.linspace(0.1, 10, d) + 3.0, y[perm]
    return x[: n // 2], y[: n // 2], x[n // 2:], y[n // 2:]


def test_vision_linear_probe_same_accuracy():
    from domains.vision.probes import linear_probe as old
    xtr, ytr, xte, yte = _problem()
    for wd in (1e-2, 1e-3):
        a = old(xtr, ytr, xte, yte, 4, weight_decay=wd, epochs=100)["top1"]
        b = linear_probe(xtr, ytr, xte, yte, c=1.0 / (wd * len(ytr)))["top1"]
        assert a == pytest.approx(b, abs=1e-4), (wd, a, b)


def test_vision_knn_same_scores():
    from domains.vision.probes import knn_predict as old
    xtr, ytr, xte, yte = _problem()
    for kw in (dict(k=200, temperature=0.1), dict(k=5, weighted=False)):
        torch.testing.assert_close(old(xtr, ytr, xte, 4, **kw), knn_scores(xtr, ytr, xte, 4, **kw))


def test_toy_linear_probe_same_error():
    from domains.toy.evaluation import linear_probe_error as old
    xtr, ytr, xte, yte = _problem(d=3, spread=1.5)
    for c in (0.1, 1.0):
        a = old(xtr, ytr, xte, yte, c=c, max_iter=2000)
        b = 100.0 - linear_probe(xtr.double(), ytr, xte.double(), yte, c=c, max_iter=2000)["top1"]
        assert a == pytest.approx(b, abs=1e-9)


def test_tabular_linear_probe_same_accuracy():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "ctk-tabular"))
    try:
        from ctk_tabular.probe import linear_probe_top1 as old
    finally:
        sys.path.pop(0)
    xtr, ytr, xte, yte = _problem()
    a = old(xtr, ytr, xte, yte, c=0.5, max_iter=2000, seed=3)
    b = linear_probe(xtr, ytr, xte, yte, c=0.5, max_iter=2000, seed=3)["top1"]
    assert a == pytest.approx(b, abs=1e-9)


def test_text_fit_predict_same_predictions_dense_and_sparse():
    from domains.text.senteval.classifier import _fit_predict as old
    xtr, ytr, xte, yte = _problem()
    X, Xt = xtr.numpy(), xte.numpy()
    for c in (0.01, 1.0):
        a = old(X, ytr.numpy(), Xt, c, 1000)
        b = fit_linear_probe(X, ytr.numpy(), c=c, max_iter=1000).predict(Xt)
        assert np.array_equal(a, b)
    rng = np.random.default_rng(0)
    S = sp.csr_matrix((rng.random((300, 50)) < 0.1).astype(np.float32))
    ys = (np.asarray(S[:, :5].sum(1)).ravel() + rng.integers(0, 2, 300)) % 3
    for yy in (ys, ys % 2):
        a = old(S[:200], yy[:200], S[200:], 1.0, 1000)
        b = fit_linear_probe(S[:200], yy[:200], c=1.0, solver="liblinear").predict(S[200:])
        assert np.array_equal(a, b)
