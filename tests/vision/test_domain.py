"""The vision domain end to end on tiny real data (Fashion-MNIST): views, each method for a few
steps with the toolkit's objective, memory-bank / queue semantics at the domain boundary, and
evaluation."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from domains.vision import VisionDomain
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.evaluation.knn import knn_scores, topk_accuracy

BASE = {
    "domain": "vision",
    "seed": 0,
    "device": "cpu",
    "data": {"dataset": "fashion-mnist", "train_subset": 64, "augment": {"preset": "grey"}},
    "encoder": {"arch": "convnet", "width": 4, "head": {"hidden": [16], "out_dim": 8}},
    "objective": {"loss": {"name": "nt_xent", "temperature": 0.5}, "views": 2},
    "optimizer": {"name": "sgd", "lr": 0.1},
    "schedule": {"name": "constant"},
    "budget": {"steps": 2, "batch_size": 16},
    "evaluation": {
        "probe_train_subset": 200,
        "test_subset": 100,
        "monitor": {"train_samples": 100, "test_samples": 50},
        "diagnostics": {"samples": 64, "entropy_batch": 32, "figures": False},
    },
}

METHODS = {
    "simclr": {"loss": {"name": "nt_xent"}},
    "instance_discrimination_bank": {
        "loss": {"name": "wl_contrastive", "temperature": 0.07},
        "negatives": {"source": "memory_bank"},
        "views": 1,
    },
    "wang_liu_hard_bank": {
        "loss": {"name": "wl_hard", "temperature": 0.2, "num_hard": 8},
        "negatives": {"source": "memory_bank"},
        "views": 1,
    },
    "moco_v2": {"loss": {"name": "moco_infonce"}, "negatives": {"source": "queue", "size": 40}},
    "moco_ring_annealed": {
        "loss": {"name": "moco_infonce"},
        "negatives": {"source": "queue", "size": 40},
        "selector": {
            "name": "ring",
            "theta_inner": 0.1,
            "schedule": {"name": "linear", "init": 1.0, "final": 0.1, "steps": 2},
        },
    },
    "cacr_moco": {"loss": {"name": "cacr_moco"}, "negatives": {"source": "queue", "size": 40}, "views": 3},
    "cmc_k4": {"loss": {"name": "cmc"}, "views": 5},
    "cacr_k4": {"loss": {"name": "cacr", "t_neg": 0.9}, "views": 5},
    "simclr_dp": {"loss": {"name": "nt_xent"}, "regularizers": [{"name": "distance_polarization", "weight": 0.1}]},
    "cpcl_a": {"loss": {"name": "cpcl_a"}},
    "cpcl_full": {"loss": {"name": "cpcl_full", "alpha": 1.0}},
}


def make_recipe(root, **sections):
    data = copy.deepcopy(BASE)
    data["data"]["root"] = str(root)
    for key, value in sections.items():
        data[key] = value
    return rc.validate(data, VisionDomain.sections(), objective_mod.check)


def train_steps(recipe, steps=2):
    """The shared loop's step, written out (views -> objective -> update -> sources)."""
    torch.manual_seed(recipe.seed)
    dom = VisionDomain(recipe)
    data = dom.build_data(recipe)
    enc = dom.build_encoder(recipe)
    obj = objective_mod.build(recipe.objective)
    obj.attach(enc, enc.out_dim, data.num_instances, torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(enc.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(2)
    seen = []
    for step, batch in zip(range(steps), data.train):
        before_bank = obj.bank.bank.clone() if obj.bank is not None else None
        cb = dom.contrastive_batch(batch, enc, obj.key_encoder, obj.needs, recipe.objective.views, step, gen)
        assert torch.equal(cb.indices, batch["index"])  # dataset positions reach the objective
        obj.prepare(cb)
        out = obj(cb)
        assert torch.isfinite(out.loss)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        obj.after_step(cb, enc)
        seen.append((batch, cb, before_bank, out))
    return dom, data, enc, obj, seen


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_trains_for_a_few_steps(fmnist_root, method):
    recipe = make_recipe(fmnist_root, objective=METHODS[method])
    init = VisionDomain(recipe)
    init.build_data(recipe)
    torch.manual_seed(recipe.seed)
    start = [p.detach().clone() for p in init.build_encoder(recipe).parameters()]
    _, _, enc, _, seen = train_steps(recipe)
    assert len(seen) == 2
    moved = sum(float((p.detach() - q).abs().sum()) for p, q in zip(enc.parameters(), start))
    assert math.isfinite(moved) and moved > 0


def test_memory_bank_slots_follow_dataset_indices(fmnist_root):
    recipe = make_recipe(fmnist_root, objective=METHODS["instance_discrimination_bank"])
    _, data, _, obj, seen = train_steps(recipe, steps=1)
    batch, cb, before, _ = seen[0]
    after = obj.bank.bank
    touched = (after != before).any(dim=1).nonzero(as_tuple=True)[0]
    assert sorted(touched.tolist()) == sorted(batch["index"].tolist())
    m = recipe.objective.negatives.bank_momentum
    expect = torch.nn.functional.normalize(m * before[batch["index"]] + (1 - m) * cb.views[:, 0].detach(), dim=1)
    assert torch.allclose(after[batch["index"]], expect, atol=1e-6)
    assert data.num_instances == 64 and obj.bank.bank.shape[0] == 64


def test_queue_receives_this_steps_keys_after_the_loss(fmnist_root):
    recipe = make_recipe(fmnist_root, objective=METHODS["moco_v2"])
    _, _, _, obj, seen = train_steps(recipe, steps=1)
    _, cb, _, _ = seen[0]
    assert not any(torch.allclose(cb.negatives[j], cb.keys[0, 1]) for j in range(cb.negatives.shape[0]))
    assert torch.allclose(obj.queue.queue[:16], cb.keys[:, 1])


def test_views_and_natural_view(fmnist_root):
    recipe = make_recipe(fmnist_root)
    dom = VisionDomain(recipe)
    data = dom.build_data(recipe)
    batch = next(iter(data.train))
    assert batch["x"].dtype == torch.uint8 and batch["x"].shape == (16, 1, 28, 28)
    views = dom.make_views(batch, 4, torch.Generator().manual_seed(0))
    assert views.shape == (16, 4, 1, 28, 28)
    assert not torch.allclose(views[:, 0], views[:, 1])
    again = dom.make_views(batch, 4, torch.Generator().manual_seed(0))
    assert torch.equal(views, again)
    nat = dom.natural_view(batch)
    ref = (batch["x"].float() / 255 - 0.2860) / 0.3530
    assert torch.allclose(nat, ref, atol=1e-6)
    enc = dom.build_encoder(recipe)
    cb = dom.contrastive_batch(batch, enc, None, {"views", "natural"}, 3, 0, torch.Generator().manual_seed(0))
    assert cb.views.shape == (16, 3, 8) and cb.natural.shape == (16, 8)


def test_evaluate_reports_probes_baselines_and_geometry(fmnist_root):
    ev = copy.deepcopy(BASE["evaluation"])
    ev["baselines"] = ["random_init", "raw_pixels"]
    ev["linear"] = {"epochs": 20}
    recipe = make_recipe(fmnist_root, evaluation=ev)
    dom, data, enc, _, _ = train_steps(recipe, steps=1)
    enc.eval()
    with torch.no_grad():  # as the loop calls it
        result = dom.evaluate(enc, data, recipe)
    m = result.metrics
    for name in (
        "linear_top1",
        "knn_top1",
        "knn5_top1",
        "linear_top1_random_init",
        "linear_top1_raw_pixels",
        "alignment",
        "uniformity",
        "neg_uniformity",
        "tolerance",
        "cond_entropy",
        "dp_margin_occupancy",
        "pos_similarity",
        "top1_neg_similarity",
    ):
        assert name in m and math.isfinite(m[name]), name
    assert 10.0 < m["linear_top1_raw_pixels"] <= 100.0  # 10 classes: chance is 10%
    # the pixels' kNN: the same weighted kNN on the normalised pixels of the same splits
    ev_data = data.eval
    pixels = [ev_data.augment.natural(split.images).flatten(1) for split in (ev_data.probe_train, ev_data.test)]
    knn = recipe.evaluation.knn
    ref = topk_accuracy(
        knn_scores(
            pixels[0], ev_data.probe_train.labels, pixels[1], ev_data.num_classes, k=knn.k, temperature=knn.temperature
        ),
        ev_data.test.labels,
        1,
    )
    assert m["knn_top1_raw_pixels"] == pytest.approx(ref)
    assert 0.0 <= m["knn5_top1_raw_pixels"] <= 100.0
    lin = recipe.evaluation.linear  # C = 1 / (weight_decay N) without select_c
    chosen = result.settings  # the probe's L2 strength is a setting the run chose, not a result
    assert not lin.select_c and chosen["linear_c"] == pytest.approx(1.0 / (lin.weight_decay * len(ev_data.probe_train)))
    assert not any(k.startswith("linear_c") for k in m) and "linear_c_raw_pixels" in chosen
    assert m["uniformity"] == pytest.approx(-m["neg_uniformity"])
    assert m["cond_entropy"] <= math.log(31) + 1e-9  # at most log(M - 1), M = 32
    online = dom.monitor(enc, data)
    assert set(online) == {"knn_top1", "embedding_std", "embedding_std_ratio", "effective_rank"}
    assert 0.0 <= online["knn_top1"] <= 100.0
    # the collapse figures are those of the projection of the evaluation images (here: the test split)
    from toolkit.evaluation.collapse import collapse_figures

    with torch.no_grad():
        z = enc(ev_data.augment.natural(ev_data.test.images[:2000]))
    expected = collapse_figures(z)
    assert m["effective_rank"] == pytest.approx(expected["effective_rank"], rel=1e-4)
    assert m["embedding_std_ratio"] == pytest.approx(expected["embedding_std_ratio"], rel=1e-4)
    assert 0 < m["embedding_std_ratio"] <= 1.0 + 1e-9 and 1.0 <= m["effective_rank"] <= z.shape[1]


def test_config_errors_name_the_key(fmnist_root):
    with pytest.raises(rc.RecipeError, match="data.dataset"):
        make_recipe(fmnist_root, data={"dataset": "svhn"})
    with pytest.raises(rc.RecipeError, match="imbalance"):
        make_recipe(fmnist_root, data={"dataset": "fashion-mnist", "imbalance": "linear"})
    with pytest.raises(rc.RecipeError, match="preset"):
        make_recipe(fmnist_root, data={"dataset": "fashion-mnist", "augment": {"preset": "nope"}})


def test_evaluation_image_size_sees_full_size_images_while_training_views_stay_small(fmnist_root):
    data_cfg = {
        "dataset": "fashion-mnist",
        "root": str(fmnist_root),
        "train_subset": 64,
        "augment": {"preset": "grey", "size": 20},
    }
    ev = {**copy.deepcopy(BASE["evaluation"]), "image_size": 28, "baselines": ["raw_pixels"], "linear": {"epochs": 5}}
    recipe = make_recipe(fmnist_root, data=data_cfg, evaluation=ev)
    dom = VisionDomain(recipe)
    data = dom.build_data(recipe)
    batch = next(iter(data.train))
    assert dom.make_views(batch, 2, torch.Generator().manual_seed(0)).shape == (16, 2, 1, 20, 20)
    ev_data = data.eval
    # the probes' images: the 28x28 images normalised, not resized (what the pixel baseline reads)
    ref = (ev_data.test.images.float() / 255 - 0.2860) / 0.3530
    assert torch.allclose(ev_data.augment.natural(ev_data.test.images), ref, atol=1e-6)
    enc = dom.build_encoder(recipe)
    enc.eval()
    with torch.no_grad():
        m = dom.evaluate(enc, data, recipe).metrics
    knn = recipe.evaluation.knn
    pixels = [((s.images.float() / 255 - 0.2860) / 0.3530).flatten(1) for s in (ev_data.probe_train, ev_data.test)]
    expected = topk_accuracy(
        knn_scores(
            pixels[0], ev_data.probe_train.labels, pixels[1], ev_data.num_classes, k=knn.k, temperature=knn.temperature
        ),
        ev_data.test.labels,
        1,
    )
    assert m["knn_top1_raw_pixels"] == pytest.approx(expected)
    # unset, the evaluation sees the training view size, as before
    plain = make_recipe(fmnist_root, data=data_cfg)
    plain_dom = VisionDomain(plain)
    assert plain_dom.build_data(plain).eval.augment.natural(ev_data.test.images[:4]).shape == (4, 1, 20, 20)


def test_evaluation_image_size_needs_a_size_agnostic_encoder(fmnist_root):
    raw = copy.deepcopy(BASE)
    raw["data"]["root"] = str(fmnist_root)
    raw["encoder"] = {"arch": "small_alexnet", "head": {"hidden": [16], "out_dim": 8}}
    raw["evaluation"] = {**raw["evaluation"], "image_size": 32}
    with pytest.raises(rc.RecipeError, match=r"evaluation.image_size: small_alexnet .*\(28\), got 32"):
        rc.validate(raw, VisionDomain.sections(), objective_mod.check, domain_check=VisionDomain.check)
    raw["evaluation"]["image_size"] = 28  # the view size itself is fine
    rc.validate(raw, VisionDomain.sections(), objective_mod.check, domain_check=VisionDomain.check)
