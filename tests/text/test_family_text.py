"""The non-contrastive family on quick-thought batches: the neighbour pairs' two branches
(f of a sentence, g of its neighbour) against a loop over the batch, each text recipe of the
family building and training to finite losses, its target network getting no gradient, and a
killed run resuming where the uninterrupted one ends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from domains import installed
from domains.text.quickthought import neighbour_pair_batch
from domains.text.sampling import ContiguousBatches
from tests.text.test_quickthought import _table, _TinyPair
from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for

ROOT = Path(__file__).resolve().parents[2]
FAMILY = ["byol", "barlow_twins", "vicreg"]
TINY = [
    "data.corpus=[austen]",
    "data.tokenizer.vocab_size=1500",
    "encoder.embedding_dim=16",
    "budget.epochs=null",
    "budget.steps=12",
    "budget.batch_size=64",
    "budget.checkpoint_every=4",
    "budget.log_every=4",
    "budget.monitor_every=null",
    "evaluation.tasks=[mr]",
    "evaluation.max_examples=200",
    "evaluation.baselines=[random]",
    "evaluation.diagnostics=false",
    "tracking.log_model=false",
    "tracking.experiment=text-family-test",
]


def test_neighbour_pairs_are_f_of_a_sentence_and_g_of_its_next_neighbour():
    table, tok = _table()
    data = ContiguousBatches(table, tok, batch_size=8, run_length=4, seed=1)
    batch = next(iter(data))
    torch.manual_seed(0)
    enc = _TinyPair(tok.vocab_size)
    cb = neighbour_pair_batch(batch, enc, key_encoder=enc, window=1)
    u, v = enc(batch["x"], pair=True)
    book, pos = batch["book"].tolist(), batch["position"].tolist()
    pairs = [
        (a, b) for a in range(len(book)) for b in range(a + 1, len(book)) if book[a] == book[b] and pos[b] - pos[a] == 1
    ]
    assert len(pairs) == cb.views.shape[0] >= 2
    for p, (a, b) in enumerate(pairs):
        torch.testing.assert_close(cb.views[p, 0], u[a])
        torch.testing.assert_close(cb.views[p, 1], v[b])
    torch.testing.assert_close(cb.keys, cb.views.detach())
    assert cb.scores is None and not cb.keys.requires_grad
    lonely = {k: t[:1] for k, t in batch.items()}
    with pytest.raises(ValueError, match="neighbouring pairs"):
        neighbour_pair_batch(lonely, enc)
    # both orders: the forward pairs, then each reversed (f of the later sentence, g of the earlier)
    both = neighbour_pair_batch(batch, enc, key_encoder=enc, window=1, directions="both")
    assert both.views.shape[0] == 2 * len(pairs)
    for p, (a, b) in enumerate(pairs + [(b, a) for a, b in pairs]):
        torch.testing.assert_close(both.views[p, 0], u[a])
        torch.testing.assert_close(both.views[p, 1], v[b])
    torch.testing.assert_close(both.keys, both.views.detach())
    with pytest.raises(ValueError, match="directions must be one of forward, both, got 'backward'"):
        neighbour_pair_batch(batch, enc, directions="backward")


@pytest.mark.parametrize("method", FAMILY)
def test_family_text_recipe_trains_and_its_target_gets_no_gradient(method, data_workdir):
    from domains.text import TextDomain
    from toolkit.training.pretrainer import Pretrainer
    from toolkit.training.trainer import RunOptions

    r = load_recipe(ROOT / f"recipes/text/cpu/qt_bow_books_{method}.yaml", TINY, installed.get)
    trainer = Pretrainer(r, TextDomain(r), None, RunOptions(progress=False))
    assert "pairs" in trainer.objective.needs

    def no_gradient_in_the_target(step):
        target = trainer.objective.key_encoder
        assert target is None or all(p.grad is None for p in target.parameters())

    trainer.options.hooks.append(no_gradient_in_the_target)
    trainer.fit()
    assert trainer.state.step == 12
    losses = [loss for _, loss in trainer.state.history]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    if method == "byol":
        assert trainer.objective.key_encoder is not None and trainer.objective.predictor is not None


@pytest.mark.slow
def test_killed_text_family_run_resumes_like_the_uninterrupted_one(data_workdir):
    class Killed(Exception):
        pass

    def kill_at(step):
        if step == 7:
            raise Killed

    r = load_recipe(ROOT / "recipes/text/cpu/qt_bow_books_byol.yaml", TINY, installed.get)
    ref_id, ref = execute(r, progress=False)
    with pytest.raises(Killed):
        execute(r, progress=False, hooks=[kill_at])
    client = client_for()
    exp = client.get_experiment_by_name(r.tracking.experiment).experiment_id
    killed = client.search_runs([exp], order_by=["attributes.start_time DESC"])[0].info.run_id
    run_id, got = execute(r, progress=False, resume=killed)
    a = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(ref_id)))["trainer"]
    b = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]
    for part in ("encoder", "objective"):
        tensors = [k for k in a[part] if torch.is_tensor(a[part][k]) and a[part][k].is_floating_point()]
        assert tensors and all(torch.allclose(a[part][k].double(), b[part][k].double(), atol=1e-6) for k in tensors)
    assert any(k.startswith("key_encoder.") for k in a["objective"]) and any(
        k.startswith("predictor.") for k in a["objective"]
    )
    stable = {k: v for k, v in got.items() if not k.endswith("_seconds")}
    assert stable == pytest.approx({k: v for k, v in ref.items() if not k.endswith("_seconds")}, abs=1e-6)


def test_text_refuses_a_loss_that_needs_labels():
    from domains.text.domain import TextDomain

    table, tok = _table()
    batch = next(iter(ContiguousBatches(table, tok, batch_size=8, run_length=4, seed=1)))
    domain = TextDomain.__new__(TextDomain)  # the step needs no recipe (window and score: the defaults)
    with pytest.raises(ValueError, match="labels"):
        domain.contrastive_batch(batch, _TinyPair(tok.vocab_size), None, {"views", "labels"}, 2, 0)
    with pytest.raises(ValueError, match="labels"):
        domain.contrastive_batch(batch, _TinyPair(tok.vocab_size), None, {"views", "labels", "pairs"}, 2, 0)


def test_recipe_pairs_both_reaches_the_batch_with_every_pair_reversed(data_workdir):
    """``data.pairs: both`` through the domain: twice the forward pairs, the second half the first
    reversed; a value other than forward / both is a recipe error naming the key."""
    from domains.text import TextDomain

    batches = {}
    for pairs in ("forward", "both"):
        r = load_recipe(
            ROOT / "recipes/text/cpu/qt_bow_books_vicreg.yaml", [*TINY, f"data.pairs={pairs}"], installed.get
        )
        domain = TextDomain(r)
        batch = next(iter(domain.build_data(r).train))
        torch.manual_seed(0)
        enc = domain.build_encoder(r)
        batches[pairs] = domain.contrastive_batch(batch, enc, None, {"views", "pairs"}, 2, 0)
    n = batches["forward"].views.shape[0]
    assert n >= 2 and batches["both"].views.shape[0] == 2 * n
    torch.testing.assert_close(batches["both"].views[:n], batches["forward"].views)
    with pytest.raises(Exception, match="data.pairs"):
        load_recipe(ROOT / "recipes/text/cpu/qt_bow_books_vicreg.yaml", [*TINY, "data.pairs=backward"], installed.get)
