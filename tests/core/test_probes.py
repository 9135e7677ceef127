"""toolkit.evaluation.probes and .knn against plain references: scikit-learn's LogisticRegression fitted directly,
and a hand-written loop kNN (Wu et al. 2018, Sec. 3.4)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedShuffleSplit

import toolkit.evaluation.probes as probes
from toolkit.evaluation.knn import knn_score_sets, knn_scores, topk_accuracy
from toolkit.evaluation.probes import (
    fit_linear_probe,
    linear_probe,
    linear_probes,
    workers,
)


def _problem(n=400, d=12, classes=4, spread=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d, generator=g)
    y = torch.arange(classes).repeat_interleave(n // classes)
    x = centres[y] + spread * torch.randn(len(y), d, generator=g)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm] * torch.linspace(0.1, 10, d) + 3.0, y[perm]  # columns on very different scales
    return x[: n // 2].double(), y[: n // 2], x[n // 2 :].double(), y[n // 2 :]


def _plain(xtr, ytr, xte, c, standardize=True, tol=1e-10):
    xtr, xte = xtr.numpy(), xte.numpy()
    if standardize:  # written out: the training rows' mean and (population) std
        mean, std = xtr.mean(0), xtr.std(0)
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    return LogisticRegression(C=c, max_iter=5000, tol=tol).fit(xtr, ytr.numpy()), xte


@pytest.mark.parametrize("standardize", [True, False])
@pytest.mark.parametrize("c", [0.01, 1.0])
def test_linear_probe_matches_sklearn_fitted_directly(c, standardize):
    xtr, ytr, xte, yte = _problem()
    ref, xte_ref = _plain(xtr, ytr, xte, c, standardize)
    probe = fit_linear_probe(xtr, ytr, c=c, standardize=standardize, max_iter=5000)
    assert probe.c == c
    # the probe stops at scikit-learn's default tolerance (1e-4): the same fit, written out with
    # that tolerance, is deterministic L-BFGS on the same numbers, so it agrees to round-off
    same, xte_same = _plain(xtr, ytr, xte, c, standardize, tol=1e-4)
    np.testing.assert_allclose(probe.scores(xte), same.decision_function(xte_same), rtol=0, atol=1e-9)
    # and that stopping point is near the optimum (the 1e-10 fit); a 1% change of c moves the
    # scores by 1e-2 (measured), more than this gap, so the first check is the one that binds
    np.testing.assert_allclose(probe.scores(xte), ref.decision_function(xte_ref), rtol=0, atol=2e-2)
    acc = 100.0 * np.mean(ref.predict(xte_ref) == yte.numpy())
    assert linear_probe(xtr, ytr, xte, yte, c=c, standardize=standardize, max_iter=5000)["top1"] == pytest.approx(acc)


def test_top5_counts_labels_among_the_five_largest_scores():
    xtr, ytr, xte, yte = _problem(n=480, classes=12, spread=4.0)
    res = linear_probe(xtr, ytr, xte, yte, c=0.1, topk=(1, 5))
    ref, xte_ref = _plain(xtr, ytr, xte, 0.1)
    s = ref.decision_function(xte_ref)
    top5 = np.mean([int(yte[i]) in set(np.argsort(-s[i])[:5]) for i in range(len(s))]) * 100
    assert res["top5"] == pytest.approx(top5) and res["top1"] <= res["top5"] < 100.0


def test_held_out_c_is_chosen_on_the_training_rows_only():
    xtr, ytr, xte, yte = _problem(spread=3.0)
    grid = (0.0001, 0.01, 1.0)
    split = next(StratifiedShuffleSplit(1, test_size=0.2, random_state=5).split(np.zeros(len(ytr)), ytr))
    accs = []
    for c in grid:  # the reference selection, written out
        ref, xva = _plain(xtr[split[0]], ytr[split[0]], xtr[split[1]], c)
        accs.append(np.mean(ref.predict(xva) == ytr[split[1]].numpy()))
    best = grid[int(np.argmax(accs))]
    for n_jobs in (1, 2):  # the selection fits in this process or in two worker processes
        probe = fit_linear_probe(xtr, ytr, select=True, c_grid=grid, holdout=0.2, seed=5, n_jobs=n_jobs)
        assert probe.c == best
    # the test rows play no part: scrambling their labels changes nothing but the score
    res = linear_probe(xtr, ytr, xte, torch.roll(yte, 1), select=True, c_grid=grid, holdout=0.2, seed=5)
    assert res["c"] == best


def _few_informative(seed, n=300, d=100, classes=3, informative=8):
    """Eight informative columns among 100 noisy ones: weak penalties overfit, so the held-out
    accuracy rises and then falls along a c grid (for seed 3: unimodal; for seed 2: not)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.zeros(classes, d)
    centres[:, :informative] = torch.randn(classes, informative, generator=g)
    y = torch.arange(classes).repeat_interleave(n // classes)
    x = centres[y] + torch.randn(len(y), d, generator=g)
    perm = torch.randperm(len(y), generator=g)
    return x[perm].double(), y[perm]


def _held_out_curve(x, y, grid, holdout=0.25, seed=0):
    fit, val = next(StratifiedShuffleSplit(1, test_size=holdout, random_state=seed).split(np.zeros(len(y)), y))
    accs = []
    for c in grid:  # the exhaustive grid, written out
        ref, xva = _plain(x[fit], y[fit], x[val], c, tol=1e-4)
        accs.append(float(np.mean(ref.predict(xva) == y[val].numpy())))
    return accs


GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


def test_ascending_search_chooses_the_grids_c_where_the_held_out_curve_has_one_peak(monkeypatch):
    x, y = _few_informative(seed=3)
    accs = _held_out_curve(x, y, GRID)
    peak = int(np.argmax(accs))
    assert 0 < peak < len(GRID) - 1  # the curve rises to one peak, then falls: the precondition
    assert all(a <= b for a, b in zip(accs[:peak], accs[1 : peak + 1]))
    assert all(a >= b for a, b in zip(accs[peak:], accs[peak + 1 :]))
    fitted = []
    real = probes._held_out_accuracy
    monkeypatch.setattr(probes, "_held_out_accuracy", lambda x, y, c, *a: fitted.append(c) or real(x, y, c, *a))
    grid = fit_linear_probe(x, y, select=True, c_grid=GRID, holdout=0.25, n_jobs=1)
    assert grid.c == GRID[peak] and fitted == list(GRID)
    fitted.clear()
    ascend = fit_linear_probe(x, y, select=True, c_grid=GRID[::-1], holdout=0.25, n_jobs=1, search="ascend")
    assert ascend.c == GRID[peak] and fitted == list(GRID[: peak + 2])  # stops one past the peak
    np.testing.assert_array_equal(ascend.scores(x), grid.scores(x))


def test_ascending_search_stops_at_the_first_fall_whatever_the_workers():
    x, y = _few_informative(seed=2)
    accs = _held_out_curve(x, y, GRID)
    best, top = GRID[0], accs[0]
    for c, a in zip(GRID[1:], accs[1:]):  # the rule, written out: walk up until the accuracy falls
        if a < top:
            break
        if a > top:
            best, top = c, a
    assert best != GRID[int(np.argmax(accs))]  # here the curve has two peaks: the rule, not the grid
    for n_jobs in (1, 2, 3):
        assert fit_linear_probe(x, y, select=True, c_grid=GRID, holdout=0.25, n_jobs=n_jobs, search="ascend").c == best


def test_several_probes_at_once_equal_one_after_another():
    xtr, ytr, xte, yte = _problem(spread=3.0)
    jobs = [
        dict(train_x=xtr, train_y=ytr, test_x=xte, test_y=yte, c=0.1),
        dict(
            train_x=xtr[:, :4],
            train_y=ytr,
            test_x=xte[:, :4],
            test_y=yte,
            select=True,
            c_grid=(0.01, 1.0),
            search="ascend",
        ),
        dict(
            train_x=xtr.numpy(),
            train_y=ytr.numpy(),
            test_x=xte.numpy(),
            test_y=yte.numpy(),
            select=True,
            c_grid=(0.01, 1.0),
        ),
    ]
    alone = [linear_probe(**job) for job in jobs]
    assert linear_probes(jobs, n_jobs=2) == alone == linear_probes(jobs, n_jobs=1)


def test_features_on_any_device_and_dtype_give_the_same_fit():
    xtr, ytr, xte, yte = _problem()
    a = linear_probe(xtr, ytr, xte, yte, c=0.5)
    b = linear_probe(xtr.numpy(), ytr.numpy(), xte.numpy(), yte.numpy(), c=0.5)
    assert a == b
    if torch.cuda.is_available():
        assert linear_probe(xtr.cuda(), ytr.cuda(), xte.cuda(), yte.cuda(), c=0.5) == a


def test_sparse_features_use_liblinear_one_vs_rest():
    rng = np.random.default_rng(0)
    X = sp.csr_matrix((rng.random((300, 40)) < 0.15).astype(np.float64))
    y = (np.asarray(X[:, :4].sum(1)).ravel() + rng.integers(0, 2, 300)) % 3
    probe = fit_linear_probe(X[:200], y[:200], c=1.0, solver="liblinear")
    for cls in range(3):  # one binary liblinear fit per class, by hand
        ref = LogisticRegression(C=1.0, solver="liblinear").fit(X[:200], (y[:200] == cls).astype(int))
        np.testing.assert_allclose(probe.scores(X[200:])[:, cls], ref.decision_function(X[200:]), rtol=1e-6)
    with pytest.raises(ValueError, match="liblinear"):
        fit_linear_probe(X, y)


def test_probe_arguments_are_checked():
    xtr, ytr, xte, yte = _problem(n=40)
    with pytest.raises(ValueError, match="c must be"):
        fit_linear_probe(xtr, ytr, c=0.0)
    with pytest.raises(ValueError, match="c_grid entry"):
        fit_linear_probe(xtr, ytr, select=True, c_grid=(1.0, -1.0))
    with pytest.raises(ValueError, match="y must have one entry"):
        fit_linear_probe(xtr, ytr[:-1])
    with pytest.raises(ValueError, match="solver"):
        fit_linear_probe(xtr, ytr, solver="newton")
    with pytest.raises(ValueError, match="NaN"):
        fit_linear_probe(xtr * float("nan"), ytr)
    with pytest.raises(ValueError, match="n_jobs must be an integer >= 1 or None"):
        fit_linear_probe(xtr, ytr, select=True, c_grid=(0.1, 1.0), n_jobs=0)
    with pytest.raises(ValueError, match="columns"):
        linear_probe(xtr, ytr, xte[:, :3], yte)
    with pytest.raises(ValueError, match="search must be one of grid, ascend"):
        fit_linear_probe(xtr, ytr, select=True, search="golden")
    with pytest.warns(UserWarning, match="raise evaluation.max_iter"):
        fit_linear_probe(xtr, ytr, c=100.0, max_iter=1, warn_convergence="raise evaluation.max_iter")


def _loop_knn(bank, labels, queries, classes, k, t, weighted):
    out = []
    for q in queries.tolist():
        sims = []
        for i, b in enumerate(bank.tolist()):  # cosine similarity, written out
            dot = sum(a * c for a, c in zip(q, b))
            sims.append((dot / (math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(c * c for c in b))), int(labels[i])))
        sims.sort(reverse=True)
        votes = [0.0] * classes
        for s, lab in sims[:k]:
            votes[lab] += math.exp(s / t) if weighted else 1.0
        out.append(votes)
    return torch.tensor(out)


def test_weighted_knn_matches_a_loop_reference():
    g = torch.Generator().manual_seed(3)
    bank, labels = torch.randn(50, 8, generator=g), torch.randint(0, 5, (50,), generator=g)
    queries = torch.randn(7, 8, generator=g)
    scores = knn_scores(bank, labels, queries, 5, k=10, temperature=0.1, chunk=3)
    torch.testing.assert_close(scores, _loop_knn(bank, labels, queries, 5, 10, 0.1, True), rtol=1e-4, atol=0)


def test_majority_knn_matches_a_loop_vote():
    g = torch.Generator().manual_seed(4)
    bank, labels = torch.randn(60, 6, generator=g), torch.randint(0, 3, (60,), generator=g)
    queries = torch.randn(20, 6, generator=g)
    scores = knn_scores(bank, labels, queries, 3, k=5, weighted=False)
    ref = _loop_knn(bank, labels, queries, 3, 5, 1.0, False)
    torch.testing.assert_close(scores, ref, rtol=0, atol=1e-5)  # the tie-break term is 1e-6 * sims
    labs = torch.randint(0, 3, (20,), generator=g)
    assert topk_accuracy(scores, labs) == pytest.approx(100.0 * float((ref.argmax(1) == labs).float().mean()))


def test_several_knn_classifiers_from_one_pass_match_their_loop_references():
    g = torch.Generator().manual_seed(5)
    bank, labels = torch.randn(80, 6, generator=g), torch.randint(0, 4, (80,), generator=g)
    queries = torch.randn(13, 6, generator=g)
    weighted, vote = knn_score_sets(bank, labels, queries, 4, [(20, True), (5, False)], temperature=0.2, chunk=4)
    torch.testing.assert_close(weighted, _loop_knn(bank, labels, queries, 4, 20, 0.2, True), rtol=1e-4, atol=0)
    torch.testing.assert_close(vote, _loop_knn(bank, labels, queries, 4, 5, 1.0, False), rtol=0, atol=1e-5)


def test_knn_arguments_are_checked():
    x, y = torch.randn(10, 4), torch.randint(0, 2, (10,))
    with pytest.raises(ValueError, match="k must be"):
        knn_scores(x, y, x, 2, k=0)
    with pytest.raises(ValueError, match="temperature"):
        knn_scores(x, y, x, 2, temperature=0.0)
    with pytest.raises(ValueError, match="same d"):
        knn_scores(x, y, x[:, :3], 2)


def test_selection_workers_follow_n_jobs_and_the_task_count():
    assert workers(6, 1) == 1
    assert workers(6, 4) == 4
    assert workers(3, 8) == 3  # never more processes than fits
    assert 1 <= workers(100) <= (os.cpu_count() or 1)
