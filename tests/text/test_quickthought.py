"""The quick-thought batch: contiguous runs, neighbour positives within a book only, and the
QT softmax against a loop reference written from Logeswaran & Lee (2018), Eq. 1-2."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from domains.text.corpora import Book
from domains.text.quickthought import neighbour_mask, quick_thought_batch
from domains.text.sampling import ContiguousBatches, SentenceTable, contiguous_runs
from domains.text.tokenizer import train_tokenizer
from toolkit.losses.base import LOSSES


def _books() -> list[Book]:
    a = tuple(f"alpha sentence number {i} here." for i in range(7))
    b = tuple(f"beta line {i} now." for i in range(5))
    c = tuple(f"gamma text {i} too." for i in range(6))
    return [Book("a", a, tuple(range(7))), Book("b", b, (0,) * 5), Book("c", c, (0, 0, 1, 1, 2, 2))]


def _table() -> tuple[SentenceTable, object]:
    books = _books()
    tok = train_tokenizer((s for bk in books for s in bk.sentences), kind="word", vocab_size=100, min_frequency=1)
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
            assert order[where[a] : where[a] + b - a].tolist() == list(range(a, b))
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


def _loop_scores(u: torch.Tensor, v: torch.Tensor, score: str = "dot") -> list[list[float]]:
    """Eq. 2 with loops: c(s_a, s_c) = f(s_a) . g(s_c), or its cosine."""
    n, d = u.shape

    def dot(x: torch.Tensor, y: torch.Tensor) -> float:
        return sum(float(x[k]) * float(y[k]) for k in range(d))

    if score == "dot":
        return [[dot(u[a], v[c]) for c in range(n)] for a in range(n)]
    return [[dot(u[a], v[c]) / math.sqrt(dot(u[a], u[a]) * dot(v[c], v[c])) for c in range(n)] for a in range(n)]


def _qt_loop_reference(
    s: list[list[float]], book: list[int], pos: list[int], window: int, zero_logit: bool, tau: float = 1.0
) -> float:
    """Logeswaran & Lee Eq. 1-2 with loops: for each sentence s and each context sentence
    s_ctx (same book, |offset| <= window), -log p(s_ctx | s, S_cand) with
    p = exp(c(s, s_ctx) / tau) / sum_{s' in S_cand} exp(c(s, s') / tau), S_cand = the other
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
            cands.append(s[a][c] / tau)
        log_z = math.log(sum(math.exp(x) for x in cands))
        terms = []
        for p in range(n):
            if p != a and book[p] == book[a] and abs(pos[p] - pos[a]) <= window:
                terms.append(-(s[a][p] / tau - log_z))
        if terms:
            per_anchor.append(sum(terms) / len(terms))
    return sum(per_anchor) / len(per_anchor)


def _qt_loop_gradient(
    s: list[list[float]], book: list[int], pos: list[int], window: int, zero_logit: bool, tau: float = 1.0
) -> list[list[float]]:
    """dL/ds_ac of :func:`_qt_loop_reference`, differentiated by hand: for an anchor a with
    m_a context sentences, (softmax_a(c) - [c is context] / m_a) / (tau A), A = the number of
    anchors with a context; 0 for s_aa (excluded, or the constant zero logit)."""
    n = len(book)
    ctx = [[p for p in range(n) if p != a and book[p] == book[a] and abs(pos[p] - pos[a]) <= window] for a in range(n)]
    anchors = sum(1 for c in ctx if c)
    g = [[0.0] * n for _ in range(n)]
    for a in range(n):
        if not ctx[a]:
            continue
        logits = {c: s[a][c] / tau for c in range(n) if c != a}
        z = sum(math.exp(x) for x in logits.values()) + (1.0 if zero_logit else 0.0)
        for c, x in logits.items():
            g[a][c] = (math.exp(x) / z - (c in ctx[a]) / len(ctx[a])) / (tau * anchors)
    return g


@pytest.mark.parametrize("window, self_candidate", [(1, "exclude"), (2, "exclude"), (1, "zero_logit")])
def test_qt_softmax_matches_the_loop_reference(window: int, self_candidate: str) -> None:
    table, tok = _table()
    torch.manual_seed(0)
    model = _TinyPair(tok.vocab_size).double()
    idx = np.array([3, 4, 5, 6, 7, 8, 9, 14, 15])  # the end of book a, the start of b, part of c
    batch = {
        "x": tok.pad([table.ids[i] for i in idx]),
        "book": torch.from_numpy(table.book[idx]),
        "position": torch.from_numpy(table.position[idx]),
        "index": torch.from_numpy(idx),
    }
    cb = quick_thought_batch(batch, model, window=window, self_candidate=self_candidate)
    loss = LOSSES.get("info_nce")()(cb).loss
    u, v = model(batch["x"], pair=True)
    loop_args = (
        _loop_scores(u.detach(), v.detach()),
        table.book[idx].tolist(),
        table.position[idx].tolist(),
        window,
        self_candidate == "zero_logit",
    )
    ref = _qt_loop_reference(*loop_args)
    assert loss.item() == pytest.approx(ref, rel=1e-10)
    # the book boundary between positions 6 (a) and 0 (b) gives no positive
    assert not cb.positive_mask[3, 4] and cb.positive_mask[4, 5]
    # views: the L2-normalised f and g embeddings, for view-based regularizers
    assert cb.views.shape == (len(idx), 2, 5)
    assert torch.allclose(cb.views.norm(dim=-1), torch.ones(len(idx), 2, dtype=torch.float64))
    # gradients of f and g: the loop's dL/ds chained through s = f g^T by autograd
    g_loop = torch.tensor(_qt_loop_gradient(*loop_args), dtype=torch.float64)
    g_ref = torch.autograd.grad((g_loop * (u @ v.t())).sum(), [model.ef.weight, model.eg.weight])
    loss.backward()
    assert g_ref[0].abs().sum() > 0 and g_ref[1].abs().sum() > 0
    torch.testing.assert_close(model.ef.weight.grad, g_ref[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model.eg.weight.grad, g_ref[1], rtol=1e-10, atol=1e-12)


def test_cosine_scores_and_bad_options() -> None:
    table, tok = _table()
    model = _TinyPair(tok.vocab_size)
    idx = np.arange(6)
    batch = {
        "x": tok.pad([table.ids[i] for i in idx]),
        "book": torch.from_numpy(table.book[idx]),
        "position": torch.from_numpy(table.position[idx]),
    }
    cb = quick_thought_batch(batch, model, score="cosine")
    assert cb.scores.abs().max() <= 1.0 + 1e-6
    assert torch.allclose(cb.scores, cb.views[:, 0] @ cb.views[:, 1].t())
    with pytest.raises(ValueError, match="score"):
        quick_thought_batch(batch, model, score="euclid")
    with pytest.raises(ValueError, match="self_candidate"):
        quick_thought_batch(batch, model, self_candidate="keep")
    with pytest.raises(ValueError, match="position"):
        quick_thought_batch({"x": batch["x"], "book": batch["book"]}, model)


def _debiased_loop_reference(
    s: list[list[float]], book: list[int], pos: list[int], window: int, tau: float, tau_plus: float, beta: float | None
) -> float:
    """DCL (Chuang et al. 2020, Eq. 6 with its clamp) and HCL (Robinson et al. 2021, Eq. 5,
    importance weights e^{beta s / tau} normalised to mean 1) on the quick-thought candidates:
    the negatives of s_a are the other sentences that are not its neighbours (N_a of them),
    and for each neighbour p, Ng = max((R - tau+ N_a e^{s_ap/tau}) / (1 - tau+), N_a e^{-1/tau})
    with R the (weighted) sum of e^{s_an/tau}; l_ap = -log(e^{s_ap/tau} / (e^{s_ap/tau} + Ng)).
    Per sentence the mean over its neighbours, then the mean over sentences that have one."""
    n = len(book)
    per_anchor = []
    for a in range(n):
        near = [c for c in range(n) if c != a and book[c] == book[a] and 1 <= abs(pos[c] - pos[a]) <= window]
        if not near:
            continue
        far = [c for c in range(n) if c != a and c not in near]
        e = [math.exp(s[a][c] / tau) for c in far]
        if beta is None:
            r = sum(e)
        else:
            w = [math.exp(beta * s[a][c] / tau) for c in far]
            r = sum(wi * ei for wi, ei in zip(w, e)) / (sum(w) / len(w))
        terms = []
        for p in near:
            e_pos = math.exp(s[a][p] / tau)
            ng = max((r - tau_plus * len(far) * e_pos) / (1 - tau_plus), len(far) * math.exp(-1 / tau))
            terms.append(-math.log(e_pos / (e_pos + ng)))
        per_anchor.append(sum(terms) / len(terms))
    return sum(per_anchor) / len(per_anchor)


def _dp_loop_reference(u: torch.Tensor, d_plus: float, d_minus: float) -> tuple[float, int]:
    """LMCL Eq. 9: R1 = sum over ordered pairs i != j of |min((D - d+)(D - d-), 0)| with
    D = (1 - cos(f_i, f_j)) / 2, and the number of pairs inside the margin."""
    cos = _loop_scores(u, u, "cosine")
    total, inside = 0.0, 0
    for i in range(u.shape[0]):
        for j in range(u.shape[0]):
            if i != j:
                d = (1.0 - cos[i][j]) / 2.0
                total += abs(min((d - d_plus) * (d - d_minus), 0.0))
                inside += int(d_plus < d < d_minus)
    return total, inside


def _scores_recipe(path: Path) -> bool:
    """A recipe whose loss reads the quick-thought scores (the non-contrastive family's
    recipes compare two branches instead: tests/text/test_family_text.py)."""
    import yaml

    name = yaml.safe_load(path.read_text(encoding="utf-8"))["objective"]["loss"]["name"]
    return not LOSSES.get(name).two_branches


CPU_RECIPES = sorted(
    p for p in (Path(__file__).resolve().parents[2] / "recipes" / "text" / "cpu").glob("*.yaml") if _scores_recipe(p)
)


@pytest.mark.parametrize("path", CPU_RECIPES, ids=lambda p: p.stem)
def test_each_cpu_recipe_objective_matches_loop_references(path: Path) -> None:
    """The objective each CPU recipe builds (loss on the quick-thought scores of the recipe's
    score function, plus its weighted DP term on the normalised f embeddings) equals the same
    quantities written out with loops from the papers' equations, on a tiny batch that
    straddles two book boundaries."""
    from domains import installed
    from toolkit.objective import build
    from toolkit.runs import load_recipe

    recipe = load_recipe(path, [], installed.get)
    assert recipe.data.self_candidate == "exclude"  # the references below drop s from its candidates
    table, tok = _table()
    torch.manual_seed(1)
    model = _TinyPair(tok.vocab_size).double()
    idx = np.array([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])  # a's end, all of b, c's start
    book, pos = table.book[idx].tolist(), table.position[idx].tolist()
    batch = {
        "x": tok.pad([table.ids[i] for i in idx]),
        "book": torch.from_numpy(table.book[idx]),
        "position": torch.from_numpy(table.position[idx]),
        "index": torch.from_numpy(idx),
    }
    cb = quick_thought_batch(
        batch, model, window=recipe.data.window, score=recipe.encoder.score, self_candidate=recipe.data.self_candidate
    )
    out = build(recipe.objective)(cb)

    u, v = (t.detach() for t in model(batch["x"], pair=True))
    n = len(idx)
    s = _loop_scores(u, v, recipe.encoder.score)
    loss = recipe.objective.loss
    if loss.name == "info_nce":
        ref = _qt_loop_reference(s, book, pos, recipe.data.window, False, loss.args["temperature"])
    else:
        ref = _debiased_loop_reference(
            s,
            book,
            pos,
            recipe.data.window,
            loss.args["temperature"],
            loss.args["tau_plus"],
            loss.args.get("beta", 1.0) if loss.name == "hcl" else None,
        )
    assert float(out.records["contrastive"]) == pytest.approx(ref, rel=1e-9)

    for spec in recipe.objective.regularizers:
        assert spec.name == "distance_polarization"
        r1, inside = _dp_loop_reference(u, spec.args.get("d_plus", 0.1), spec.args.get("d_minus", 0.5))
        assert inside > 0  # the margin is populated, so the comparison means something
        if spec.args.get("reduction", "sum") == "mean":
            r1 /= n * (n - 1)
        assert float(out.records["distance_polarization"]) == pytest.approx(r1, rel=1e-9)
        ref += spec.weight * r1
    assert float(out.loss.detach()) == pytest.approx(ref, rel=1e-9)
