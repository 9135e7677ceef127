"""The toy domain's face: recipes and tables, data and views, encoder, evaluation, the shared
loop (CPCL-Full beats an untrained encoder) and the ring_mi run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from domains.toy import ToyDomain, clusters, mixture
from domains.toy.encoders import ToyEncoder
from domains.toy.evaluation import kmeans_accuracy, linear_probe_error, sector_accuracy_ceiling
from domains.toy.ring_experiment import metric_name
from toolkit import recipe as rc
from toolkit.recipe import RecipeError
from toolkit.runs import load_recipe
from toolkit.studies.reproduce import discover_tables
from toolkit.tracking.runlog import RunLog

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes" / "toy"


@pytest.fixture(autouse=True)
def _checkpoints_in_tmp(tmp_path, monkeypatch):
    """The shared loop checkpoints under $CTK_CHECKPOINTS; keep the tests' out of the repo."""
    monkeypatch.setenv("CTK_CHECKPOINTS", str(tmp_path / "checkpoints"))


def _lookup(name: str):
    assert name == "toy"
    return ToyDomain


def _recipe(path: str | Path, *sets: str) -> rc.Recipe:
    return load_recipe(str(path), list(sets), _lookup)


class RecordingTracker(RunLog):
    run_id = None

    def __init__(self) -> None:
        self.metrics: dict[str, list[tuple[int, float]]] = {}
        self.figures: list[str] = []

    def log_metrics(self, metrics, step, flush=True):
        for k, v in metrics.items():
            self.metrics.setdefault(k, []).append((step, float(v)))

    def flush(self):
        pass

    def log_figure(self, figure, name):
        self.figures.append(name)

    def log_model(self, module, recipe=None, extras=None, name="encoder"):
        pass


# -- recipes and tables -------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_validates_and_names_its_paper(path):
    r = _recipe(path)
    assert r.domain == "toy" and r.paper is not None and r.paper.source
    assert r.data.experiment in ("ring_mi", "cpcl_mixture", "lmcl_clusters")


def test_tables_point_at_recipes_and_metrics_the_runs_produce():
    tables = discover_tables([ROOT / "recipes" / "toy"])
    assert set(tables) == {
        "ring-mi-toy",
        "ring-mi-toy-cnce-critic",
        "cpcl-gaussian-mixture",
        "cpcl-gaussian-mixture-hard",
        "lmcl-toy",
    }
    produced = {
        "ring_mi": {"mi_true", "mi_nce", *(metric_name(w) for w in (10, 25, 50, 75, 90, 95))},
        "cpcl_mixture": {"linear_probe_error", "af_probe_error", "raw_probe_error", "bayes_error"},
        "lmcl_clusters": {"kmeans_accuracy", "kmeans_accuracy_euclidean", "kmeans_accuracy_ceiling"},
    }
    for table in tables.values():
        for row in table.rows:
            r = _recipe(row.recipe, *row.overrides)
            assert set(table.metrics) <= produced[r.data.experiment], (table.name, row.label)
            assert set(row.paper) <= set(table.metrics)
    assert "NOT reproducible" in tables["lmcl-toy"].title
    ring = tables["ring-mi-toy"].rows[0].paper
    assert ring["mi_true"] == 0.02041 and ring["mi_cnce_w95"] == 1.97e-6


def test_bad_sections_are_reported_with_their_path():
    with pytest.raises(rc.RecipeError) as err:
        _recipe(RECIPES / "lmcl_three_bars_cl.yaml", "encoder.init=zero", "data.lmcl_clusters.view_std=-1")
    text = str(err.value)
    assert "encoder" in text and "LMCL Table 1" in text
    assert "data.lmcl_clusters.view_std" in text
    with pytest.raises(rc.RecipeError) as err:
        _recipe(RECIPES / "lmcl_three_bars_cl.yaml", "data.dataset=gaussian_mixture")
    text = str(err.value)
    assert "data" in text and "gaussian_mixture" in text and "nested_moons" in text


def _data(recipe):
    return ToyDomain(recipe).build_data(recipe)


def _run(recipe, tracker):
    trainer = ToyDomain(recipe).trainer(recipe, tracker)
    trainer.fit()
    return trainer.evaluate()


# -- data and views -----------------------------------------------------------------------


def test_cpcl_data_views_and_pool():
    r = _recipe(
        RECIPES / "cpcl_mixture_cpcl_full.yaml",
        "data.cpcl_mixture.per_component=50",
        "data.cpcl_mixture.test_per_component=30",
        "budget.batch_size=40",
        "data.cpcl_mixture.views=fresh",
    )
    dom = ToyDomain(r)
    data = dom.build_data(r)
    assert data.num_instances == 200 and len(data.eval["test_x"]) == 120 and len(data.eval["pool"]) == 400
    batch = next(iter(data.train))
    assert set(batch) == {"x", "y", "index"} and batch["x"].shape == (40, 2)
    assert torch.equal(data.eval["x"][batch["index"]], batch["x"])
    views = dom.make_views(batch, 3, torch.Generator().manual_seed(0))
    assert views.shape == (40, 3, 2)
    assert torch.equal(dom.natural_view(batch), batch["x"])
    many = dom.make_views(
        {"x": torch.zeros(20000, 2), "index": torch.zeros(20000, dtype=torch.long)}, 2, torch.Generator().manual_seed(1)
    )
    assert float(many.var(0).mean()) == pytest.approx(4.0, rel=0.05)  # s_a = 4 is a variance


def test_pool_views_follow_the_augmentation_matrix():
    r = _recipe(
        RECIPES / "cpcl_mixture_cpcl_full.yaml",
        "data.cpcl_mixture.per_component=2",
        "data.cpcl_mixture.views=pool",
        "budget.batch_size=4",
    )
    dom = ToyDomain(r)
    data = dom.build_data(r)
    pool, a = data.eval["pool"], dom._aug_matrix
    index = torch.full((4000,), 3)
    views = dom.make_views({"x": data.eval["x"][index], "index": index}, 5, torch.Generator().manual_seed(2))
    match = (views.reshape(-1, 1, 2) == pool[None]).all(-1)
    assert match.any(1).all()  # every view is a pool point
    freq = match.double().sum(0) / match.shape[0]
    assert torch.allclose(freq, a[3].double(), atol=0.015)


def test_lmcl_views_pair_each_point_with_a_noisy_copy():
    r = _recipe(RECIPES / "lmcl_nested_moons_cl.yaml", "data.lmcl_clusters.view_std=0.3")
    dom = ToyDomain(r)
    data = dom.build_data(r)
    assert data.num_instances == 400
    x = torch.randn(5000, 2)
    v = dom.make_views({"x": x}, 2, torch.Generator().manual_seed(3))
    assert torch.equal(v[:, 0], x)
    assert float((v[:, 1] - x).std()) == pytest.approx(0.3, rel=0.05)


def test_data_seed_pins_the_draw_and_defaults_to_the_recipe_seed():
    path = RECIPES / "lmcl_three_bars_cl.yaml"
    x0 = _data(_recipe(path, "seed=0")).eval["x"]
    x1 = _data(_recipe(path, "seed=1")).eval["x"]
    x1_pinned = _data(_recipe(path, "seed=1", "data.seed=0")).eval["x"]
    assert not torch.equal(x0, x1) and torch.equal(x0, x1_pinned)


def test_ring_mi_has_no_shared_loop_data():
    with pytest.raises(ValueError, match="ring_mi"):
        _data(_recipe(RECIPES / "ring_mi_optimal.yaml"))


# -- encoder and evaluation ---------------------------------------------------------------


def test_linear_encoder_identity_init_is_the_normalised_point():
    enc = ToyEncoder(in_dim=2, embed_dim=2, depth=1, bias=False, init="identity")
    x = torch.tensor([[3.0, 4.0], [-1.0, 0.0]])
    assert torch.allclose(enc(x), torch.tensor([[0.6, 0.8], [-1.0, 0.0]]))
    mlp = ToyEncoder(in_dim=2, embed_dim=16, depth=3, hidden=32)
    assert torch.allclose(mlp(torch.randn(7, 2)).norm(dim=1), torch.ones(7), atol=1e-6)
    with pytest.raises(ValueError, match="LMCL Table 1"):
        ToyEncoder(init="zero")
    assert ToyEncoder(init="zero", normalize=False)(x).abs().sum() == 0


def test_probe_and_kmeans_metrics():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(3).repeat_interleave(50)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = centres[y] + 0.1 * torch.randn(150, 2, generator=g)
    assert linear_probe_error(x, y, x, y) == 0.0
    assert linear_probe_error(x, y, x, (y + 1) % 3) == 100.0
    assert kmeans_accuracy(x, y) == 100.0
    assert kmeans_accuracy(x, (y + 2) % 3) == 100.0  # cluster ids are matched, not compared
    mixed = torch.tensor([0, 1] * 75)
    assert kmeans_accuracy(x, mixed) == pytest.approx(100 * 76 / 150, abs=2.0)


def test_bayes_error_is_the_nearest_mean_error_and_15_11_percent_in_expectation():
    from scipy import integrate, stats

    x, y = mixture.sample_mixture(2000, generator=torch.Generator().manual_seed(0))
    means = mixture.circle_means(4, 2.0).tolist()
    nearest = [min(range(4), key=lambda c: (p[0] - means[c][0]) ** 2 + (p[1] - means[c][1]) ** 2) for p in x.tolist()]
    expected = 100 * np.mean(np.array(nearest) != y.numpy())
    assert mixture.bayes_error(x, y) == pytest.approx(expected)
    inside, _ = integrate.dblquad(
        lambda v, u: stats.norm.pdf(u - 2) * stats.norm.pdf(v), 0, 20, lambda u: -u, lambda u: u
    )
    assert 100 * (1 - inside) == pytest.approx(15.11, abs=0.01)
    assert mixture.bayes_error(x, y) == pytest.approx(15.11, abs=3 * 100 * math.sqrt(0.15 * 0.85 / 8000))


def test_sector_ceiling_is_the_best_split_into_two_angular_sectors():
    x, y = clusters.make_cluster_set("nested_moons", 30, torch.Generator().manual_seed(1))
    angle = np.arctan2(x[:, 1].numpy(), x[:, 0].numpy())
    best = 0.0
    for a in angle:  # brute force over every pair of cut angles
        for b in angle:
            inside = (angle >= a) & (angle < b) if a < b else ~((angle >= b) & (angle < a))
            agree = np.mean(inside == (y.numpy() == 1))
            best = max(best, agree, 1 - agree)
    assert sector_accuracy_ceiling(x, y) == pytest.approx(100 * best)
    g = torch.Generator().manual_seed(2)  # and it bounds k-means of P x / ||P x||
    for _ in range(5):
        z = torch.nn.functional.normalize(x @ torch.randn(2, 2, generator=g), dim=1)
        assert kmeans_accuracy(z, y) <= sector_accuracy_ceiling(x, y) + 1e-9
    three, labels = clusters.make_cluster_set("three_bars", 20, torch.Generator().manual_seed(0))
    assert sector_accuracy_ceiling(three, labels) is None


# -- the shared loop ----------------------------------------------------------------------


def test_short_cpcl_full_run_beats_an_untrained_encoder():
    r = _recipe(
        RECIPES / "cpcl_mixture_cpcl_full.yaml",
        "encoder.embed_dim=4",
        "budget.epochs=20",
        "evaluation.augmentation_feature=false",
        "evaluation.histogram=false",
    )
    dom = ToyDomain(r)
    data = dom.build_data(r)
    untrained = dom.evaluate(dom.build_encoder(r), data, r).metrics["linear_probe_error"]
    tracker = RecordingTracker()
    trained = _run(r, tracker)
    assert trained["linear_probe_error"] < untrained - 3.0
    assert trained["raw_probe_error"] < 20.0  # the mixture is learnable at all
    assert "train/loss" in tracker.metrics and "loss_curve" in tracker.figures


def test_lmcl_run_logs_the_margin_and_figures():
    r = _recipe(RECIPES / "lmcl_three_bars_dp.yaml", "budget.steps=30")
    tracker = RecordingTracker()
    m = _run(r, tracker)
    assert 0.0 <= m["dp_margin_occupancy"] <= 1.0
    assert 0.0 < m["kmeans_accuracy"] <= 100.0
    # the Euclidean baseline of Table 1, recomputed with scikit-learn and scipy's Hungarian match
    from scipy.optimize import linear_sum_assignment
    from sklearn.cluster import KMeans

    data = _data(r).eval
    x, y = data["x"].double().numpy(), data["y"].numpy()
    pred = KMeans(n_clusters=3, n_init=10, random_state=r.seed).fit_predict(x)
    counts = np.zeros((3, 3))
    np.add.at(counts, (pred, y), 1)
    rows, cols = linear_sum_assignment(-counts)
    assert m["kmeans_accuracy_euclidean"] == pytest.approx(100 * counts[rows, cols].sum() / len(y), abs=1e-9)
    assert {"distance_histogram", "embedding"} <= set(tracker.figures)
    assert "train/distance_polarization" in tracker.metrics


def test_trainable_experiments_need_an_objective_at_load_time():
    raw = yaml.safe_load((RECIPES / "cpcl_mixture_simclr.yaml").read_text())
    raw.pop("objective")
    raw.pop("budget")
    with pytest.raises(RecipeError) as info:
        load_recipe("inline", [], _lookup, data=raw)
    assert sorted(p for p, _ in info.value.problems) == ["budget", "objective"]


def test_three_toy_mistakes_give_three_messages():
    bad = [
        "data.cpcl_mixture.views=pool",
        "data.cpcl_mixture.augment_variance=0",
        "budget.batch_size=100000",
        "objective.loss.temperature=-1",
    ]
    with pytest.raises(RecipeError) as info:
        _recipe(RECIPES / "cpcl_mixture_simclr.yaml", *bad)
    paths = [p for p, _ in info.value.problems]
    assert {"data.cpcl_mixture.views", "budget.batch_size", "objective.loss.temperature"} <= set(paths)
    with pytest.raises(RecipeError, match="classes"):
        _recipe(RECIPES / "cpcl_mixture_simclr.yaml", "data.cpcl_mixture.classes=5")


# -- ring_mi ------------------------------------------------------------------------------


def test_ring_mi_run_logs_one_metric_per_percentile_and_a_figure():
    r = _recipe(
        RECIPES / "ring_mi_optimal.yaml", "data.ring_mi.num_points=300", "evaluation.ring_mi.num_negatives=null"
    )
    tracker = RecordingTracker()
    m = _run(r, tracker)
    assert m["mi_true"] == pytest.approx(0.0204110, abs=1e-7)
    ws = [10, 25, 50, 75, 90, 95]
    values = [m["mi_nce"], *(m[metric_name(w)] for w in ws)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert m["nce_log_bound"] == pytest.approx(math.log(300))
    assert tracker.figures == ["mi_vs_percentile"]
    assert set(tracker.metrics) >= {"mi_true", "mi_nce", "mi_cnce_w95"}


def test_ring_mi_trains_the_mlp_critic_with_the_recipe_objective():
    r = _recipe(
        RECIPES / "ring_mi_mlp.yaml",
        "data.ring_mi.num_points=256",
        "budget.epochs=3",
        "evaluation.ring_mi.percentiles=[50]",
    )
    tracker = RecordingTracker()
    m = _run(r, tracker)
    assert [s for s, _ in tracker.metrics["train/loss"]] == [1, 2, 3]
    assert m["critic_final_loss"] == tracker.metrics["train/loss"][-1][1]
    assert m["mi_cnce_w50"] < m["mi_nce"] <= math.log(101)
    with pytest.raises(ValueError, match="normalize"):
        _run(
            _recipe(
                RECIPES / "ring_mi_mlp.yaml", "encoder.normalize=true", "budget.epochs=1", "data.ring_mi.num_points=256"
            ),
            tracker,
        )


@pytest.mark.parametrize("name", ["simclr", "spectral", "cpcl_a", "cpcl_full"])
def test_cpcl_recipes_draw_views_from_the_papers_pool(name):
    """CPCL Sec. 5: two augmentations per point form a finite pool; views are drawn from it."""
    assert _recipe(RECIPES / f"cpcl_mixture_{name}.yaml").data.cpcl_mixture.views == "pool"
