"""The tabular example domain on its own: recipe validation, split and standardisation, the
encoder, the probes (against plain scikit-learn / torch references written here), and every
recipe and reproduce table the package ships."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from toolkit import recipe as rc
from toolkit.runs import load_recipe
from toolkit.studies.reproduce import discover_tables

METRICS = {"linear_top1", "linear_top1_random_init", "linear_top1_raw_features"}


@pytest.fixture
def tabular(source_on_path):
    import ctk_tabular

    return ctk_tabular


def _load(tabular, overrides=(), name="scarf_nt_xent.yaml"):
    return load_recipe(tabular.RECIPES / name, list(overrides), lambda _: tabular.TabularDomain)


def _problems(tabular, overrides):
    with pytest.raises(rc.RecipeError) as info:
        _load(tabular, overrides)
    return dict(info.value.problems)


def test_domain_sections_report_bad_keys_with_their_path(tabular):
    problems = _problems(
        tabular, ["data.dataset=iris", "data.corruption_rate=1.5", "encoder.widht=3", "evaluation.probe_c=0"]
    )
    assert set(problems) == {"data.dataset", "data.corruption_rate", "encoder.widht", "evaluation.probe_c"}
    assert "breast_cancer" in problems["data.dataset"] and "'iris'" in problems["data.dataset"]
    assert "1.5" in problems["data.corruption_rate"]
    assert problems["encoder.widht"].startswith("unknown key; expected one of: hidden, depth")
    csv = _problems(tabular, ["data.dataset=csv"])
    assert "data.path" in csv["data"] and "data.target" in csv["data"]


def test_every_shipped_recipe_and_table_row_validates(tabular):
    recipes = sorted(tabular.RECIPES.glob("*.yaml"))
    assert len(recipes) >= 3
    losses = {_load(tabular, name=p.name).objective.loss.name for p in recipes}
    assert {"nt_xent", "align_uniform"} <= losses and len(losses) >= 3
    tables = discover_tables([tabular.RECIPES])
    assert tables, "the package ships a reproduce table"
    for table in tables.values():
        assert METRICS <= set(table.metrics)
        assert "no paper" in (table.paper + table.notes).lower()
        for row in table.rows:
            assert row.paper == {}  # there are no paper figures for these settings
            r = load_recipe(row.recipe, row.overrides, lambda _: tabular.TabularDomain)
            assert r.domain == "tabular"


def _domain(tabular, *sets):
    return tabular.TabularDomain(_load(tabular, list(sets)))


def test_split_and_standardisation_match_a_plain_reference(tabular):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    bunch = load_breast_cancer()
    xtr, xte, ytr, yte = train_test_split(
        bunch.data, bunch.target, test_size=0.3, random_state=4, stratify=bunch.target
    )
    mean, std = xtr.mean(0), xtr.std(0)
    s = _domain(tabular).splits(tabular.TabularData(dataset="breast_cancer", split_seed=4))
    assert np.allclose(s.train_x.numpy(), (xtr - mean) / std, atol=1e-5)
    assert np.allclose(s.test_x.numpy(), (xte - mean) / std, atol=1e-5)
    assert np.array_equal(s.train_y.numpy(), ytr) and np.array_equal(s.test_y.numpy(), yte)
    assert s.num_classes == 2 and s.num_features == 30
    other = _domain(tabular).splits(tabular.TabularData(dataset="breast_cancer", split_seed=5))
    assert not torch.equal(other.test_y, s.test_y) or not torch.equal(other.test_x, s.test_x)


def _plain_probe(xtr, ytr, xte, yte, seed=0):
    from sklearn.linear_model import LogisticRegression

    mean, std = xtr.mean(0), xtr.std(0)
    std = np.where(std > 0, std, 1.0)
    clf = LogisticRegression(C=1.0, max_iter=2000, random_state=seed).fit((xtr - mean) / std, ytr)
    return float((clf.predict((xte - mean) / std) == yte).mean() * 100)


def _reference_mlp(m, hidden, depth, head_hidden, out_dim):
    """SCARF's architecture written out: depth x (Linear, ReLU), head Linear-ReLU-Linear."""
    layers, width = [], m
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    backbone = nn.Sequential(*layers)
    head = nn.Sequential(nn.Linear(hidden, head_hidden), nn.ReLU(), nn.Linear(head_hidden, out_dim))
    return backbone, head


def test_evaluation_probes_match_references(tabular):
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    recipe = _load(
        tabular,
        [
            "data.dataset=wine",
            "seed=3",
            "encoder.hidden=32",
            "encoder.depth=2",
            "encoder.head_hidden=16",
            "encoder.out_dim=8",
            "budget.batch_size=32",
        ],
    )
    domain = _domain(tabular)
    data = domain.build_data(recipe)
    torch.manual_seed(3)
    trained = domain.build_encoder(recipe)
    with torch.no_grad():  # perturb: a "trained" encoder differs from its initial weights
        for p in trained.parameters():
            p.add_(0.5 * torch.randn_like(p))
    result = domain.evaluate(trained.eval(), data, recipe).metrics
    assert set(result) == METRICS | {"alignment", "uniformity", "tolerance"}
    assert domain.monitor(trained, data) == {"linear_top1": pytest.approx(result["linear_top1"])}

    bunch = load_wine()
    xtr, xte, ytr, yte = train_test_split(
        bunch.data, bunch.target, test_size=0.3, random_state=0, stratify=bunch.target
    )
    one_row = 100.0 / len(yte) + 1e-9
    assert abs(result["linear_top1_raw_features"] - _plain_probe(xtr, ytr, xte, yte, seed=3)) <= one_row

    torch.manual_seed(3)
    backbone, head = _reference_mlp(13, 32, 2, 16, 8)
    # the random-init baseline is the seed's initial weights, exactly
    reference = [p for m in (backbone, head) for p in m.parameters()]
    baseline = list(domain.random_init_encoder(recipe).parameters())
    assert len(baseline) == len(reference)
    assert all(torch.equal(a, b) for a, b in zip(baseline, reference))
    mean, std = xtr.mean(0), xtr.std(0)
    with torch.no_grad():
        f = [backbone(torch.tensor((a - mean) / std, dtype=torch.float32)).numpy() for a in (xtr, xte)]
    assert abs(result["linear_top1_random_init"] - _plain_probe(f[0], ytr, f[1], yte, seed=3)) <= one_row

    with torch.no_grad():
        g = [trained.features(torch.tensor((a - mean) / std, dtype=torch.float32)).numpy() for a in (xtr, xte)]
    assert abs(result["linear_top1"] - _plain_probe(g[0], ytr, g[1], yte, seed=3)) <= one_row

    # geometry of the held-out projections, plain loops over pairs (Wang & Isola Eq. 5,
    # Wang & Liu Eq. 11)
    with torch.no_grad():
        z = trained(torch.tensor((xte - mean) / std, dtype=torch.float32)).double()
    n = len(z)
    pairs = [math.exp(-2.0 * float((z[i] - z[j]).pow(2).sum())) for i in range(n) for j in range(i + 1, n)]
    assert result["uniformity"] == pytest.approx(math.log(sum(pairs) / len(pairs)), abs=1e-4)
    same = [float(z[i] @ z[j]) for i in range(n) for j in range(n) if i != j and yte[i] == yte[j]]
    assert result["tolerance"] == pytest.approx(sum(same) / len(same), abs=1e-4)
    assert 0.0 <= result["alignment"] <= 4.0


def test_encoder_shapes_and_normalisation(tabular):
    enc = tabular.MLPEncoder(
        13, hidden=24, depth=3, head_hidden=10, head_depth=2, out_dim=5, batch_norm=True, dropout=0.1
    ).eval()
    x = torch.randn(7, 13)
    assert enc.features(x).shape == (7, 24) and enc.out_dim == 5
    z = enc(x)
    assert z.shape == (7, 5) and torch.allclose(z.norm(dim=1), torch.ones(7), atol=1e-5)
    with pytest.raises(ValueError, match="encoder.depth"):
        tabular.MLPEncoder(13, depth=0)


def test_views_need_data_and_batch_must_fit(tabular):
    domain = _domain(tabular)
    with pytest.raises(ValueError, match="build_data"):
        domain.make_views({"x": torch.randn(4, 13)}, 2)
    with pytest.raises(ValueError, match="budget.batch_size=256 exceeds the 124 training rows"):
        domain.build_data(_load(tabular, ["data.dataset=wine", "budget.batch_size=256"]))
    recipe = _load(tabular, ["data.dataset=wine", "budget.batch_size=16"])
    data = domain.build_data(recipe)
    batch = next(iter(data.train))
    views = domain.make_views(batch, 2, torch.Generator().manual_seed(0))
    assert views.shape == (16, 2, 13)
    changed = (views != batch["x"][:, None]).sum(-1)
    assert changed.max() <= 7  # floor(0.6 * 13); a donor may share the row's value


def test_csv_tables(tabular, tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "table.csv"
    lines = ["a,b,label,c"] + [
        f"{rng.normal():.4f},{rng.normal():.4f},{'yes' if i % 3 else 'no'},{i}" for i in range(40)
    ]
    path.write_text("\n".join(lines) + "\n")
    s = _domain(tabular).splits(tabular.TabularData(dataset="csv", path=str(path), target="label"))
    assert s.num_features == 3 and s.feature_names == ["a", "b", "c"] and s.num_classes == 2
    assert len(s.train_x) + len(s.test_x) == 40
    path.write_text("a,label\n1.0,x\noops,y\n")
    with pytest.raises(ValueError, match="line 3, column 'a'"):
        _domain(tabular).splits(tabular.TabularData(dataset="csv", path=str(path), target="label"))
    with pytest.raises(ValueError, match="data.target"):
        _domain(tabular).splits(tabular.TabularData(dataset="csv", path=str(path), target="nope"))
