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


# -- the streamed datasets' probes: features computed once (domains/vision/streamed_eval.py) ------


@pytest.fixture(scope="module")
def streams(photo_folder):
    """The photo folder's train (48) and val (18) splits, decoded in this process at 32 px."""
    from domains.vision.config import LoaderConfig
    from domains.vision.image_folders import FolderSource
    from domains.vision.stream_storage import FolderStreams

    train, val = (FolderSource("imagefolder", photo_folder).split(s) for s in ("train", "val"))
    return FolderStreams(train, val, 32, LoaderConfig(workers=0, decode="cpu"), torch.device("cpu"))


def _backbone():
    """A fixed random conv layer with 3 pooled ReLU features, counting the images it sees: weak
    enough that no probe is right on every test image (64 features score 100%)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 3, 5, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
    ).eval()
    seen = []

    def fn(x):
        seen.append(x.shape[0])
        return net(x)

    return fn, seen


def _cfg(**linear):
    from domains.vision.config import EvaluationConfig, KnnConfig, LinearConfig

    lin = dict(solver="sgd", epochs=6, lr=0.1, milestones=[4], batch_size=16, weight_decay=1e-4)
    return EvaluationConfig(linear=LinearConfig(**{**lin, **linear}), knn=KnnConfig(k=10), batch_size=8)


def _aug():
    from domains.vision.augment import AugmentSpec, BatchAugment
    from domains.vision.dataset_table import IMAGENET_NORMALIZATION

    return BatchAugment(AugmentSpec(32), *IMAGENET_NORMALIZATION)


def test_streamed_probes_run_the_backbone_once_per_split_and_equal_re_streaming(streams):
    from domains.vision.streamed_eval import streamed_probes

    fn, seen = _backbone()
    cached = streamed_probes(fn, streams, _aug(), _cfg(), seed=3)
    # kNN, six SGD epochs, their standardisation and the test scoring: one pass over each split
    assert sum(seen) == len(streams.train) + len(streams.val) == 66
    fn, seen = _backbone()
    again = streamed_probes(fn, streams, _aug(), _cfg(), seed=3, cache=False)
    assert sum(seen) > 8 * len(streams.train)  # the images again for every epoch
    # the same mini-batches in the same order (the loader's permutation of each epoch) and the
    # same centre views: the features differ at most in round-off (the backbone saw other batch
    # sizes), which moves no prediction of the 18 test images
    assert cached == again and set(cached) == {"knn_top1", "knn5_top1", "linear_top1", "linear_top5"}
    # which it would not be with other mini-batches: another seed's order gives another probe
    assert streamed_probes(fn, streams, _aug(), _cfg(), seed=4)["linear_top1"] != cached["linear_top1"] < 100


def test_streamed_probes_through_a_file_of_float16_rows(streams, monkeypatch, tmp_path):
    import tempfile

    from domains.vision.streamed_eval import streamed_probes
    from toolkit.evaluation.features import FeatureCache

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    placed, close = [], FeatureCache.close

    def spy(self):
        placed.append((self.where, self.path is not None and self.path.exists()))
        close(self)

    monkeypatch.setattr(FeatureCache, "close", spy)
    fn, _ = _backbone()
    in_memory = streamed_probes(fn, streams, _aug(), _cfg(), seed=3)
    assert placed == [("memory", False)] * 2
    placed.clear()
    fn, seen = _backbone()
    on_disk = streamed_probes(fn, streams, _aug(), _cfg(), seed=3, memory_limit=0)
    assert placed == [("file", True)] * 2 and sum(seen) == 66
    assert not list(tmp_path.iterdir())  # the files go with the probe
    # float16 rows (relative error <= 2^-11 per value) move no prediction of these 18 images
    assert on_disk == in_memory


def test_an_augmented_streamed_probe_streams_the_training_images_every_epoch(streams):
    from domains.vision.streamed_eval import streamed_probes

    fn, seen = _backbone()
    res = streamed_probes(fn, streams, _aug(), _cfg(epochs=2, augment=True), seed=3, knn=False)
    # the training split for the statistics and each epoch (new crops), the val split once, the
    # width probe (2 blank images)
    assert sum(seen) == 3 * len(streams.train) + len(streams.val) + 2 and "linear_top1" in res
