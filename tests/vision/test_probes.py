"""The papers' mini-batch linear protocols on a known-separable toy set (the full-batch probe
and the kNN are tested against references in tests/core/test_probes.py)."""

from __future__ import annotations

import pytest
import torch

from domains.vision.probes import minibatch_linear_probe


def _blobs(n_per=60, classes=4, dim=16, spread=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(classes, dim, generator=g)
    y = torch.arange(classes).repeat_interleave(n_per)
    x = centres[y] + spread * torch.randn(len(y), dim, generator=g)
    perm = torch.randperm(len(y), generator=g)
    return x[perm], y[perm]


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_minibatch_linear_probe_separates_gaussian_blobs(solver):
    x_all, y_all = _blobs(n_per=100)
    tr, te = slice(0, 240), slice(240, 400)
    res = minibatch_linear_probe(x_all[tr], y_all[tr], x_all[te], y_all[te], 4, solver=solver, epochs=30)
    assert res["top1"] >= 99.0
    assert "top5" not in res  # top-5 only above 10 classes


def test_minibatch_linear_probe_reports_top5_above_ten_classes():
    x, y = _blobs(n_per=20, classes=12, spread=0.2)
    res = minibatch_linear_probe(x[:160], y[:160], x[160:], y[160:], 12, epochs=50)
    assert res["top1"] >= 99.0 and res["top5"] == 100.0


def test_probe_arguments_are_checked():
    x, y = _blobs(n_per=5)
    with pytest.raises(ValueError, match="solver"):
        minibatch_linear_probe(x, y, x, y, 4, solver="lbfgs")
    with pytest.raises(ValueError, match="same d"):
        minibatch_linear_probe(x, y, x[:, :3], y, 4)


@pytest.mark.parametrize("select_c", [False, True])
def test_lbfgs_probe_is_sklearn_logistic_regression_with_c_from_weight_decay(select_c):
    """``evaluation.linear`` lbfgs: C = 1 / (weight_decay N) on standardised features, or C
    chosen on a held-out tenth of the training features (``select_c``)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedShuffleSplit

    from domains.vision.config import EvaluationConfig
    from domains.vision.evaluation import probe_features

    x, y = _blobs(n_per=100, spread=4.0)
    xtr, ytr, xte, yte = x[:240].numpy(), y[:240].numpy(), x[240:].numpy(), y[240:].numpy()
    mean, std = xtr.mean(0), xtr.std(0)
    cfg = EvaluationConfig(
        linear={"weight_decay": 1e-2, "epochs": 500, "select_c": select_c, "c_grid": [0.001, 0.1]},
        knn={"enabled": False},
    )

    def plain(a, c):
        clf = LogisticRegression(C=c, max_iter=500).fit((xtr[a] - xtr[a].mean(0)) / xtr[a].std(0), ytr[a])
        return clf, xtr[a].mean(0), xtr[a].std(0)

    c = 1.0 / (1e-2 * 240)
    if select_c:
        fit, val = next(StratifiedShuffleSplit(1, test_size=0.1, random_state=0).split(xtr, ytr))
        accs = []
        for cc in (0.001, 0.1):
            clf, m, s = plain(fit, cc)
            accs.append(np.mean(clf.predict((xtr[val] - m) / s) == ytr[val]))
        c = (0.001, 0.1)[int(np.argmax(accs))]
    clf = LogisticRegression(C=c, max_iter=500).fit((xtr - mean) / std, ytr)
    ref = 100.0 * np.mean(clf.predict((xte - mean) / std) == yte)
    got = probe_features(x[:240], y[:240], x[240:], y[240:], 4, cfg, seed=0)["linear_top1"]
    assert got == pytest.approx(ref) and 25.0 < ref < 100.0
