"""The quick-thought batch: contiguous runs, neighbour positives within a book only, and the
QT softmax against a loop reference written from Logeswaran & Lee (2018), Eq. 1-2."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from domains.text.corpora import Book
from domains.text.quickthought import neighbour_mask, quick_thought_batch
from domains.text.sampling import ContiguousBatches, SentenceTable, contiguous_runs
from domains.text.tokenizer import train_tokenizer
from toolkit.losses.modules import LOSSES


def _books() -> list[Book]:
    a = tuple(f"alpha sentence number {i} here." for i in range(7))
    b = tuple(f"beta line {i} now." for i in range(5))
    c = tuple(f"gamma text {i} too." for i in range(6))
    return [Book("a", a, tuple(range(7))), Book("b", b, (0,) * 5), Book("c", c, (0, 0, 1, 1, 2, 2))]


def _table() -> tuple[SentenceTable, object]:
    books = _books()
    tok = train_tokenizer((s for bk in books for s in bk.sentences), kind="word", vocab_size=100,
                          min_frequency=1)
    return SentenceTable.build(books, tok), tok


def test_neighbour_mask_never_crosses_a_book_boundary() -> None:
    book = torch.tensor([0, 0, 0, 1, 1, 2])
    pos = torch.tensor([5, 6, 7, 0, 1, 0])  # book 0 ends at 7, book 1 starts at 0
    m = neighbour_mask(book, pos, window=1)
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for i, j in [(0, 1), (1, 2), (3, 4)]:
        expected[i, j] = expected[j, i] = True
    assert torch.equal(m, expected)
    m2 = neighbour_mask(book, pos, window=2)
    assert m2[0, 2] and m2[2, 0] and not m2[2, 3] and not m2[2, 4] and not m2.diagonal().any()
    with pytest.raises(ValueError, match="window"):
        neighbour_mask(book, pos, window=0)


def test_batches_are_shuffled_contiguous_runs_and_positives_stay_in_their_book() -> None:
    table, tok = _table()
    assert contiguous_runs(table.book_bounds(), 4) == [(0, 4), (4, 7), (7, 11), (12, 16), (16, 18)]
    data = ContiguousBatches(table, tok, batch_size=6, run_length=4, seed=3)
    seen_orders = set()
    for epoch in range(4):
        data.set_epoch(epoch)
        order = data.order()
        seen_orders.add(tuple(order.tolist()))
        # every run appears once, whole and in reading order (runs move, sentences do not)
        assert sorted(order.tolist()) == [i for a, b in data.runs for i in range(a, b)]
        where = {int(k): p for p, k in enumerate(order)}
        for a, b in data.runs:
            assert order[where[a]:where[a] + b - a].tolist() == list(range(a, b))
        for batch in data:
            m = neighbour_mask(batch["book"], batch["position"])
            i, j = m.nonzero(as_tuple=True)
            assert torch.equal(batch["book"][i], batch["book"][j])
            assert ((batch["position"][i] - batch["position"][j]).abs() == 1).all()
            # the positions are those of the flat table
            idx = batch["index"].numpy()
            assert np.array_equal(batch["book"].numpy(), table.book[idx])
    assert len(seen_orders) > 1  # epochs differ
    data.set_epoch(2)
    again = data.order()
    data.set_epoch(2)
    assert np.array_equal(again, data.order())  # an epoch's order is reproducible (resume)


class _TinyPair(nn.Module):
    """f and g: bags of word embeddings (enough to test the batch and the loss)."""

    def __init__(self, vocab: int, dim: int = 5) -> None:
        super().__init__()
        self.ef, self.eg = nn.Embedding(vocab, dim), nn.Embedding(vocab, dim)

    def forward(self, x: torch.Tensor, pair: bool = False):  # noqa: ANN201
        mask = (x != 0).unsqueeze(-1).float()
        return (self.ef(x) * mask).sum(1), (self.eg(x) * mask).sum(1)


def _qt_loop_reference(u: torch.Tensor, v: torch.Tensor, book: list[int], pos: list[int],
                       window: int, zero_logit: bool) -> float:
    """Logeswaran & Lee Eq. 1-2 with loops: for each sentence s and each context sentence
    s_ctx (same book, |offset| <= window), -log p(s_ctx | s, S_cand) with
    p = exp(f(s).g(s_ctx)) / sum_{s' in S_cand} exp(f(s).g(s')), S_cand = the other
    sentences of the batch (zero_logit: the authors' code keeps s itself with score 0).
    Per sentence the mean over its context sentences; then the mean over sentences that
    have one."""
    n = len(book)
    per_anchor = []
    for a in range(n):
        cands = []
        for c in range(n):
            if c == a:
                if zero_logit:
                    cands.append(0.0)
                continue
            cands.append(sum(float(u[a, k]) * float(v[c, k]) for k in range(u.shape[1])))
        log_z = math.log(sum(math.exp(s) for s in cands))
        terms = []
        for p in range(n):
            if p != a and book[p] == book[a] and abs(pos[p] - pos[a]) <= window:
                score = sum(float(u[a, k]) * float(v[p, k]) for k in range(u.shape[1]))
                terms.append(-(score - log_z))
        if terms:
            per_anchor.append(sum(terms) / len(terms))
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize("window, self_candidate", [(1, "exclude"), (2, "exclude"), (1, "zero_logit")])
def test_qt_softmax_matches_the_loop_reference(window: int, self_candidate: str) -> None:
    table, tok = _table()
    torch.manual_seed(0)
    model = _TinyPair(tok.vocab_size).double()
    idx = np.array([3, 4, 5, 6, 7, 8, 9, 14, 15])  # the end of book a, the start of b, part of c
    batch = {"x": tok.pad([table.ids[i] for i in idx]), "book": torch.from_numpy(table.book[idx]),
             "position": torch.from_numpy(table.position[idx]), "index": torch.from_numpy(idx)}
    cb = quick_thought_batch(batch, model, window=window, self_candidate=self_candidate)
    loss = LOSSES.get("info_nce")()(cb).loss
    u, v = model(batch["x"], pair=True)
    ref = _qt_loop_reference(u.detach(), v.detach(), table.book[idx].tolist(),
                             table.position[idx].tolist(), window, self_candidate == "zero_logit")
    assert loss.item() == pytest.approx(ref, rel=1e-10)
    # the book boundary between positions 6 (a) and 0 (b) gives no positive
    assert not cb.positive_mask[3, 4] and cb.positive_mask[4, 5]
    # views: the L2-normalised f and g embeddings, for view-based regularizers
    assert cb.views.shape == (len(idx), 2, 5)
    assert torch.allclose(cb.views.norm(dim=-1), torch.ones(len(idx), 2, dtype=torch.float64))
    loss.backward()
    assert model.ef.weight.grad.abs().sum() > 0 and model.eg.weight.grad.abs().sum() > 0


def test_cosine_scores_and_bad_options() -> None:
    table, tok = _table()
    model = _TinyPair(tok.vocab_size)
    idx = np.arange(6)
    batch = {"x": tok.pad([table.ids[i] for i in idx]), "book": torch.from_numpy(table.book[idx]),
             "position": torch.from_numpy(table.position[idx])}
    cb = quick_thought_batch(batch, model, score="cosine")
    assert cb.scores.abs().max() <= 1.0 + 1e-6
    assert torch.allclose(cb.scores, cb.views[:, 0] @ cb.views[:, 1].t())
    with pytest.raises(ValueError, match="score"):
        quick_thought_batch(batch, model, score="euclid")
    with pytest.raises(ValueError, match="self_candidate"):
        quick_thought_batch(batch, model, self_candidate="keep")
    with pytest.raises(ValueError, match="position"):
        quick_thought_batch({"x": batch["x"], "book": batch["book"]}, model)
