"""The non-contrastive family's parts in the core, each against what its paper writes: the
target network's momentum schedule and its EMA, the predictor, the stopped gradient (SimSiam),
the support set (NNCLR), SwAV's prototypes and multi-view codes, DINO's centre and teacher
temperature, DINO's head, the freezes of the first steps and what validation asks of a recipe (the collapse
figures: tests/core/test_collapse.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf
from torch import nn

from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.heads import DINOHead, MLPHead, Prototypes, cancel_gradients
from toolkit.losses import functional as F
from toolkit.losses.base import ContrastiveBatch, RunLength


def _section(**objective):
    return rc.ObjectiveSection.model_validate(objective)


def _encoder(d_in=6, d_out=5, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, d_out))


def _built(total=100, steps_per_epoch=10, **objective):
    obj = objective_mod.build(_section(**objective))
    enc = _encoder()
    obj.attach(enc, 5, 64, torch.Generator().manual_seed(1), RunLength(lambda: total, steps_per_epoch))
    return obj, enc


def _batch(enc, obj, x, step=0, labels=None):
    n, v = x.shape[:2]
    z = enc(x.flatten(0, 1)).view(n, v, -1)
    keys = None
    if obj.key_encoder is not None:
        with torch.no_grad():
            keys = obj.key_encoder(x.flatten(0, 1)).view(n, v, -1)
    return obj.prepare(ContrastiveBatch(views=z, keys=keys, labels=labels, step=step))


# -- the target network ---------------------------------------------------------------------


def test_cosine_momentum_follows_byol_schedule():
    obj, _ = _built(total=50, loss={"name": "byol"}, predictor={"hidden": [8]}, target={"momentum": 0.996})
    for k in (0, 1, 10, 25, 49, 50, 60):
        expected = 1 - (1 - 0.996) * (math.cos(math.pi * min(k, 50) / 50) + 1) / 2
        assert obj.target_momentum(k) == pytest.approx(expected, abs=1e-15)
    assert obj.target_momentum(0) == pytest.approx(0.996) and obj.target_momentum(50) == pytest.approx(1.0)
    const, _ = _built(
        loss={"name": "byol"}, predictor={"hidden": [8]}, target={"momentum": 0.99, "schedule": "constant"}
    )
    assert const.target_momentum(0) == const.target_momentum(77) == 0.99


def test_the_target_is_an_ema_with_the_scheduled_momentum_and_gets_no_gradient():
    obj, enc = _built(total=20, loss={"name": "byol"}, predictor={"hidden": [8]}, target={"momentum": 0.9})
    opt = torch.optim.SGD([*enc.parameters(), *obj.trainable_parameters()], lr=0.1)
    target = obj.key_encoder
    assert target is not None and all(not p.requires_grad for p in target.parameters())
    for step in range(3):
        before = [p.detach().clone() for p in target.parameters()]
        x = torch.randn(16, 2, 6, generator=torch.Generator().manual_seed(step))
        batch = _batch(enc, obj, x, step)
        out = obj(batch)
        opt.zero_grad()
        out.loss.backward()
        assert all(p.grad is None for p in target.parameters())
        assert all(p.grad is not None for p in obj.predictor.parameters())
        opt.step()
        obj.after_step(batch, enc)
        m = obj.target_momentum(step + 1)
        for b, t, q in zip(before, target.parameters(), enc.parameters()):
            torch.testing.assert_close(t, m * b + (1 - m) * q.detach(), rtol=0, atol=1e-6)


def test_byol_loss_of_the_objective_is_the_papers_symmetrised_form():
    obj, enc = _built(loss={"name": "byol"}, predictor={"hidden": [8]}, target={"momentum": 0.99})
    x = torch.randn(12, 2, 6, generator=torch.Generator().manual_seed(3))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    p, k = batch.predictions.double(), batch.keys.double()

    def reg(a, b):
        return (2 - 2 * (nnf.normalize(a, dim=-1) * nnf.normalize(b, dim=-1)).sum(-1)).mean()

    torch.testing.assert_close(out.loss.double(), reg(p[:, 0], k[:, 1]) + reg(p[:, 1], k[:, 0]), rtol=1e-5, atol=1e-6)


def test_simsiam_momentum_zero_is_the_stopped_online_embedding_without_a_copy():
    obj, enc = _built(loss={"name": "simsiam"}, predictor={"hidden": [3]}, target={"momentum": 0.0})
    assert obj.key_encoder is None
    x = torch.randn(10, 2, 6, generator=torch.Generator().manual_seed(4))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    assert torch.equal(batch.keys, batch.views.detach()) and not batch.keys.requires_grad
    # the gradient reaches the encoder through p only: d loss / d z through the target is zero
    z = batch.views
    g = torch.autograd.grad(out.loss, z, retain_graph=True)[0]
    p = batch.predictions
    gp = torch.autograd.grad(out.loss, p, retain_graph=True)[0]
    # recompute the gradient with an explicitly detached target and compare
    z2 = z.detach().requires_grad_(True)
    p2 = obj.predictor(z2.flatten(0, 1)).view_as(p)
    ref = F.simsiam(p2[:, 0], z2[:, 1].detach()) / 2 + F.simsiam(p2[:, 1], z2[:, 0].detach()) / 2
    torch.testing.assert_close(torch.autograd.grad(ref, z2)[0], g, rtol=1e-5, atol=1e-7)
    assert gp.abs().sum() > 0


def test_moco_v3_objective_uses_predictor_queries_and_target_keys():
    obj, enc = _built(
        loss={"name": "moco_v3", "temperature": 0.5},
        predictor={"hidden": [8], "last_batch_norm": False},
        target={"momentum": 0.99},
    )
    x = torch.randn(9, 2, 6, generator=torch.Generator().manual_seed(5))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    q, k = batch.predictions.double(), batch.keys.double()

    def ctr(a, b):
        logits = nnf.normalize(a, dim=1) @ nnf.normalize(b, dim=1).t() / 0.5
        return nnf.cross_entropy(logits, torch.arange(a.shape[0])) * 2 * 0.5

    torch.testing.assert_close(out.loss.double(), ctr(q[:, 0], k[:, 1]) + ctr(q[:, 1], k[:, 0]), rtol=1e-5, atol=1e-6)


# -- the predictor ---------------------------------------------------------------------------


def test_predictor_shapes_and_batch_norms():
    p = MLPHead(5, [7], 5, batch_norm=True, last_batch_norm=True)
    kinds = [type(m) for m in p.net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d]
    assert p.net[0].bias is None and p.net[3].bias is None and p.net[4].affine is False
    assert p(torch.randn(4, 5)).shape == (4, 5)
    plain = MLPHead(5, [], 3, batch_norm=False)
    assert [type(m) for m in plain.net] == [nn.Linear] and plain.net[0].bias is not None
    with pytest.raises(ValueError, match="hidden"):
        MLPHead(5, [0], 3)
    obj, _ = _built(loss={"name": "byol"}, predictor={"hidden": [8], "out_dim": 4}, target={"momentum": 0.9})
    assert obj.predictor.out_dim == 4


# -- the support set -------------------------------------------------------------------------


def test_support_set_is_filled_with_past_first_views_after_the_loss():
    obj, enc = _built(loss={"name": "nnclr"}, negatives={"source": "support_set", "size": 20})
    assert obj.support is not None and obj.key_encoder is None
    x = torch.randn(8, 2, 6, generator=torch.Generator().manual_seed(6))
    batch = _batch(enc, obj, x)
    before = batch.negatives.clone()
    out = obj(batch)
    out.loss.backward()
    obj.after_step(batch, enc)
    rows = obj.support.rows()
    torch.testing.assert_close(rows[:8], batch.views[:, 0].detach())
    torch.testing.assert_close(rows[8:], before[8:])
    batch2 = _batch(enc, obj, x, step=1)
    torch.testing.assert_close(batch2.negatives[:8], batch.views[:, 0].detach())
    assert batch2.negatives.grad_fn is None


def test_nnclr_objective_is_the_symmetrised_functional_loss():
    obj, enc = _built(loss={"name": "nnclr", "temperature": 0.3}, negatives={"source": "support_set", "size": 32})
    x = torch.randn(8, 2, 6, generator=torch.Generator().manual_seed(7))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    z, s = batch.views, batch.negatives
    ref = (F.nnclr(z[:, 0], z[:, 1], s, temperature=0.3) + F.nnclr(z[:, 1], z[:, 0], s, temperature=0.3)) / 2
    torch.testing.assert_close(out.loss, ref)


# -- SwAV ------------------------------------------------------------------------------------


def test_swav_module_with_two_views_equals_the_functional_loss():
    obj, enc = _built(loss={"name": "swav", "prototypes": 7, "temperature": 0.2, "freeze_prototypes_steps": 0})
    x = torch.randn(16, 2, 6, generator=torch.Generator().manual_seed(8))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    z = nnf.normalize(batch.views, dim=-1)
    s = obj.loss.prototypes(z.flatten(0, 1)).view(16, 2, -1)
    ref = F.swav(s[:, 0], s[:, 1], temperature=0.2, epsilon=0.05, iterations=3)
    torch.testing.assert_close(out.loss, ref, rtol=1e-5, atol=1e-6)
    assert obj.loss.prototypes.weight in set(obj.trainable_parameters())


def test_swav_multicrop_codes_come_from_global_views_only():
    obj, enc = _built(loss={"name": "swav", "prototypes": 5, "freeze_prototypes_steps": 0})
    x = torch.randn(12, 4, 6, generator=torch.Generator().manual_seed(9))
    batch = _batch(enc, obj, x)
    batch.global_views = 2
    out = obj(batch)
    z = nnf.normalize(batch.views.double(), dim=-1)
    s = z @ nnf.normalize(obj.loss.prototypes.weight.double(), dim=1).t()
    logp = torch.log_softmax(s / 0.1, dim=-1)
    total, pairs = 0.0, 0
    for i in range(2):
        q = F.sinkhorn_knopp(s[:, i].detach(), epsilon=0.05, iterations=3)
        for v in range(4):
            if v != i:
                total = total - (q * logp[:, v]).sum(-1).mean()
                pairs += 1
    torch.testing.assert_close(out.loss.double(), total / pairs, rtol=1e-5, atol=1e-6)


def test_prototypes_are_frozen_then_normalised_after_each_step():
    obj, enc = _built(loss={"name": "swav", "prototypes": 6, "freeze_prototypes_steps": 2})
    protos = obj.loss.prototypes
    opt = torch.optim.SGD([*enc.parameters(), *obj.trainable_parameters()], lr=0.5)
    for step in range(4):
        before = protos.weight.detach().clone()
        x = torch.randn(16, 2, 6, generator=torch.Generator().manual_seed(10 + step))
        batch = _batch(enc, obj, x, step)
        opt.zero_grad()
        obj(batch).loss.backward()
        cancel_gradients(step, enc, obj)
        opt.step()
        obj.after_step(batch, enc)
        moved = float((protos.weight.detach() - before).abs().max())
        if step < 2:
            assert moved < 1e-6  # frozen (the renormalisation only rounds)
        else:
            assert moved > 1e-4
        torch.testing.assert_close(protos.weight.norm(dim=1), torch.ones(6))


def test_swav_queue_takes_part_in_the_codes_from_its_start_step():
    obj, enc = _built(loss={"name": "swav", "prototypes": 5, "queue_size": 16, "queue_start_step": 1})
    x = torch.randn(8, 2, 6, generator=torch.Generator().manual_seed(11))
    b0 = _batch(enc, obj, x, step=0)
    s0 = torch.randn(8, 5)
    torch.testing.assert_close(obj.loss._codes(s0, 0), F.sinkhorn_knopp(s0, epsilon=0.05, iterations=3))
    obj(b0).loss.backward()
    obj.after_step(b0, enc)
    queued = obj.loss.prototypes(obj.loss.queue.rows())
    expect = F.sinkhorn_knopp(torch.cat([queued, s0]), epsilon=0.05, iterations=3)[-8:]
    torch.testing.assert_close(obj.loss._codes(s0, 1), expect)


# -- DINO ------------------------------------------------------------------------------------


def test_dino_teacher_temperature_warms_up_linearly_then_stays():
    obj, _ = _built(
        steps_per_epoch=10,
        loss={"name": "dino", "warmup_epochs": 2.0, "warmup_teacher_temperature": 0.04, "teacher_temperature": 0.07},
        target={"momentum": 0.996},
    )
    loss = obj.loss
    assert loss.teacher_temperature_at(0) == pytest.approx(0.04)
    assert loss.teacher_temperature_at(10) == pytest.approx(0.055)
    assert loss.teacher_temperature_at(20) == pytest.approx(0.07) == loss.teacher_temperature_at(500)


def test_dino_objective_and_its_centre():
    obj, enc = _built(loss={"name": "dino", "warmup_epochs": 0.0, "center_momentum": 0.9}, target={"momentum": 0.9})
    x = torch.randn(10, 3, 6, generator=torch.Generator().manual_seed(12))
    batch = _batch(enc, obj, x, step=5)
    batch.global_views = 2
    obj.loss.center.copy_(torch.randn(1, 5))
    c0 = obj.loss.center.clone()
    out = obj(batch)
    ref = F.dino(
        batch.views.transpose(0, 1),
        batch.keys[:, :2].transpose(0, 1),
        c0,
        student_temperature=0.1,
        teacher_temperature=0.07,
    )
    torch.testing.assert_close(out.loss, ref)
    out.loss.backward()
    assert all(p.grad is None for p in obj.key_encoder.parameters())
    obj.after_step(batch, enc)
    mean = batch.keys[:, :2].reshape(-1, 5).mean(0, keepdim=True)
    torch.testing.assert_close(obj.loss.center, 0.9 * c0 + 0.1 * mean)


def test_dino_head_weight_norm_is_fixed_and_last_layer_frozen_for_its_steps():
    head = DINOHead(6, out_dim=11, hidden=9, bottleneck=4, layers=3, freeze_last_layer_steps=2)
    y = head(torch.randn(5, 6))
    assert y.shape == (5, 11)
    w = head.last_layer.weight
    torch.testing.assert_close(w.norm(dim=1), torch.ones(11))
    trainable = [n for n, p in head.named_parameters() if p.requires_grad]
    assert "last_layer.parametrizations.weight.original0" not in trainable
    y.sum().backward()
    cancel_gradients(1, head)
    assert all(p.grad is None for p in head.last_layer.parameters())
    assert all(p.grad is not None for p in head.mlp.parameters())
    head.zero_grad()
    head(torch.randn(5, 6)).sum().backward()
    cancel_gradients(2, head)
    assert head.last_layer.parametrizations.weight.original1.grad is not None


def test_prototypes_scores_are_dot_products():
    p = Prototypes(4, 3)
    z = torch.randn(5, 4)
    torch.testing.assert_close(p(z), z @ p.weight.t())
    with pytest.raises(ValueError, match="count"):
        Prototypes(4, 0)


# -- SupCon in the objective -------------------------------------------------------------------


def test_supcon_objective_reads_labels():
    obj, enc = _built(loss={"name": "supcon", "temperature": 0.1})
    assert "labels" in obj.needs
    x = torch.randn(8, 2, 6, generator=torch.Generator().manual_seed(13))
    labels = torch.tensor([0, 1, 0, 1, 2, 2, 3, 3])
    out = obj(_batch(enc, obj, x, labels=labels))
    assert torch.isfinite(out.loss)
    with pytest.raises(ValueError, match="labels"):
        obj(_batch(enc, obj, x))


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "objective, path, words",
    [
        ({"loss": {"name": "byol"}, "target": {"momentum": 0.99}}, "objective.predictor", "predictor"),
        ({"loss": {"name": "byol"}, "predictor": {"hidden": [8]}}, "objective.target", "target"),
        ({"loss": {"name": "simsiam"}, "predictor": {"hidden": [8]}}, "objective.target", "momentum 0"),
        ({"loss": {"name": "dino"}}, "objective.target", "target"),
        ({"loss": {"name": "nnclr"}}, "objective.negatives.source", "support set"),
        (
            {"loss": {"name": "nt_xent"}, "negatives": {"source": "support_set"}},
            "objective.negatives.source",
            "in_batch",
        ),
    ],
)
def test_validation_names_the_missing_part(objective, path, words):
    problems = objective_mod.check(_section(**objective))
    assert any(p == path and words in m for p, m in problems), problems


def test_recipe_refuses_bad_part_values():
    with pytest.raises(Exception, match="momentum"):
        rc.TargetSection.model_validate({"momentum": 1.5})
    with pytest.raises(Exception, match="hidden"):
        rc.PredictorSection.model_validate({"hidden": [0]})


def test_uniformity_regularizer_composes_with_a_family_loss():
    obj, enc = _built(loss={"name": "barlow_twins"}, regularizers=[{"name": "uniformity", "weight": 0.5, "t": 2.0}])
    x = torch.randn(10, 2, 6, generator=torch.Generator().manual_seed(16))
    batch = _batch(enc, obj, x)
    out = obj(batch)
    u = nnf.normalize(batch.views[:, 0].detach().double(), dim=1)
    pairs = [math.exp(-2.0 * float(((u[i] - u[j]) ** 2).sum())) for i in range(10) for j in range(i + 1, 10)]
    reference = math.log(sum(pairs) / len(pairs))
    assert float(out.records["uniformity"]) == pytest.approx(reference, rel=1e-5)
    expected = F.barlow_twins(batch.views[:, 0], batch.views[:, 1]) + 0.5 * out.records["uniformity"]
    torch.testing.assert_close(out.loss, expected)
