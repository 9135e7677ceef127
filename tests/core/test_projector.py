"""``objective.projector``: the MLP ("expander") between a domain's embedding and the loss, for
domains whose encoder has no head of its own (quick-thought sentences, CURL features). The loss,
the predictor and the sources read its output; with a target network the target's projector is
an EMA copy of the online one."""

from __future__ import annotations

import pytest
import torch

from toolkit import recipe as rc
from toolkit.losses import functional as F
from toolkit.losses.base import ContrastiveBatch

from .test_family_parts import _batch, _built

PROJ = {"hidden": [16], "out_dim": 12}


def _mlp(head, z):
    """The projector's layers applied by hand, rows of both views in one batch (train-mode BN)."""
    x = z.flatten(0, 1)
    for layer in head.net:
        x = layer(x)
    return x.view(*z.shape[:2], -1)


def test_barlow_twins_reads_the_projection_and_the_projector_trains():
    obj, enc = _built(loss={"name": "barlow_twins"}, projector=PROJ)
    assert obj.projector is not None and obj.target_projector is None  # no target: nothing to copy
    x = torch.randn(32, 2, 6)
    z = enc(x.flatten(0, 1)).view(32, 2, -1)
    expected = F.barlow_twins(*_mlp(obj.projector, z).unbind(1))
    out = obj(_batch(enc, obj, x))
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    out.loss.backward()
    assert all(p.grad is not None for p in obj.projector.parameters())
    assert all(p.grad is not None for p in enc.parameters())
    assert set(map(id, obj.projector.parameters())) <= set(map(id, obj.trainable_parameters()))


def test_byol_target_projector_is_an_ema_copy_without_gradient():
    obj, enc = _built(
        loss={"name": "byol"},
        projector=PROJ,
        predictor={"hidden": [16]},
        target={"momentum": 0.9, "schedule": "constant"},
    )
    online, target = obj.projector, obj.target_projector.module
    assert obj.predictor.net[0].in_features == 12  # the predictor maps projections to projections
    for p, q in zip(online.parameters(), target.parameters()):
        assert torch.equal(p, q) and not q.requires_grad
    x = torch.randn(16, 2, 6)
    batch = _batch(enc, obj, x)
    with torch.no_grad():
        keys = obj.key_encoder(x.flatten(0, 1)).view(16, 2, -1)
        expected_keys = _mlp(target, keys)
    out = obj(batch)
    assert torch.allclose(batch.keys, expected_keys, atol=1e-6) and batch.keys.shape[-1] == 12
    opt = torch.optim.SGD(list(enc.parameters()) + obj.trainable_parameters(), lr=0.5)
    before = [q.detach().clone() for q in target.parameters()]
    out.loss.backward()
    assert all(q.grad is None for q in target.parameters())
    opt.step()
    obj.after_step(batch, enc)
    for p, q, b in zip(online.parameters(), target.parameters(), before):
        assert torch.allclose(q, 0.9 * b + 0.1 * p, atol=1e-7)
        assert not torch.equal(q, b)


def test_simsiam_keys_are_the_stopped_projection():
    obj, enc = _built(loss={"name": "simsiam"}, projector=PROJ, predictor={"hidden": [4]}, target={"momentum": 0.0})
    assert obj.target_projector is None and obj.key_encoder is None
    batch = _batch(enc, obj, torch.randn(8, 2, 6))
    obj(batch)
    assert batch.keys.shape == (8, 2, 12) and not batch.keys.requires_grad
    assert torch.equal(batch.keys, batch.views.detach())


def test_sources_hold_projections():
    obj, _ = _built(
        loss={"name": "nnclr"},
        projector=PROJ,
        predictor={"hidden": [8]},
        negatives={"source": "support_set", "size": 32},
    )
    assert obj.support.rows().shape[-1] == 12


def test_a_projector_on_a_batch_the_domain_scored_itself_is_refused():
    obj, _ = _built(loss={"name": "info_nce"}, projector=PROJ)
    scored = ContrastiveBatch(views=torch.randn(4, 2, 5), scores=torch.randn(4, 4))
    with pytest.raises(ValueError, match="objective.projector.*scored"):
        obj(scored)


def test_recipe_refuses_bad_projector_values():
    with pytest.raises(ValueError, match="hidden"):
        rc.ProjectorSection.model_validate({"hidden": [0]})
    with pytest.raises(ValueError, match="out_dim"):
        rc.ProjectorSection.model_validate({"out_dim": 0})
