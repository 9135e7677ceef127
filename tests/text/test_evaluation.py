"""The SentEval-style probe and engine: k-fold determinism, the MSRP features, the
two-function face, and the encoder's embedding (order-free, tokenizer saved with it, the
bidirectional GRU against the recurrence written out, the BERT option against unpadded runs)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from domains.text.config import EncoderConfig
from domains.text.domain import build_quick_thought_encoder
from domains.text.senteval import (
    BagOfWords,
    EncoderEmbedder,
    Task,
    evaluate_tasks,
    kfold_accuracy,
    pair_features,
    settings_for,
)
from domains.text.senteval.engine import embed_sentences, grid_edge
from domains.text.tokenizer import train_tokenizer


def _blobs(n: int = 300, d: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + 0.8 * y[:, None]
    return X, y


def test_kfold_same_seed_same_folds_and_score() -> None:
    X, y = _blobs()
    a = kfold_accuracy(X, y, folds=10, seed=3, c_grid=(0.01, 1.0), selection="kfold", inner_folds=3)
    b = kfold_accuracy(X, y, folds=10, seed=3, c_grid=(0.01, 1.0), selection="kfold", inner_folds=3)
    assert a.folds == b.folds and a.accuracy == b.accuracy and a.chosen_c == b.chosen_c
    c = kfold_accuracy(X, y, folds=10, seed=4, c_grid=(0.01, 1.0), selection="kfold", inner_folds=3)
    assert c.folds != a.folds  # another seed, other folds
    assert 60 < a.accuracy < 100 and len(a.folds) == 10


def test_kfold_accuracy_matches_a_plain_loop() -> None:
    """With one C and no selection, the score is the mean over folds of the per-fold accuracy
    of a standardised logistic regression, written out here by hand."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    X, y = _blobs(200, 5, seed=1)
    res = kfold_accuracy(X, y, folds=5, seed=0, c_grid=(0.5,), selection="none")
    accs = []
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        mu, sd = X[tr].mean(0), X[tr].std(0)
        model = LogisticRegression(C=0.5, max_iter=1000).fit((X[tr] - mu) / sd, y[tr])
        pred = model.predict((X[te] - mu) / sd)
        correct = sum(int(p == t) for p, t in zip(pred, y[te]))
        accs.append(100.0 * correct / len(te))
    assert res.folds == pytest.approx(accs) and res.accuracy == pytest.approx(sum(accs) / 5)


def test_probe_bad_arguments() -> None:
    X, y = _blobs(40)
    with pytest.raises(ValueError, match="folds"):
        kfold_accuracy(X, y, folds=1)
    with pytest.raises(ValueError, match="c_grid"):
        kfold_accuracy(X, y, c_grid=(0.0,))
    with pytest.raises(ValueError, match="same length"):
        kfold_accuracy(X, y[:-1])
    with pytest.raises(ValueError, match="mode"):
        settings_for("fast")


def test_pair_features_dense_and_sparse() -> None:
    u = np.array([[1.0, -2.0], [0.5, 0.0]])
    v = np.array([[3.0, 1.0], [0.5, 4.0]])
    f = pair_features(u, v)
    assert np.array_equal(f, [[2.0, 3.0, 3.0, -2.0], [0.0, 4.0, 0.25, 0.0]])
    full = pair_features(u, v, ("u", "v", "absdiff", "product"))
    assert np.array_equal(full[:, :4], np.c_[u, v])
    fs = pair_features(sp.csr_matrix(u), sp.csr_matrix(v))
    assert np.array_equal(fs.toarray(), f)
    with pytest.raises(ValueError, match="include"):
        pair_features(u, v, ("cosine",))


class _Recorder:
    """An embedder that records what the engine asks (the two-function face)."""

    def __init__(self) -> None:
        self.prepared: list[str] = []
        self.batches: list[list[str]] = []

    def prepare(self, task: Task) -> None:
        self.prepared.append(task.name)

    def batcher(self, sentences: list[str]) -> np.ndarray:
        self.batches.append(list(sentences))
        return np.array([[len(s.split()), s.count("good")] for s in sentences], dtype=np.float32)


def test_engine_face_order_and_pairs() -> None:
    words = ["good", "bad", "fine", "good good", "awful thing", "a good one here"]
    sentences = [words[i % 6] + " x" * (i % 5) for i in range(60)]
    labels = np.array([int("good" in s) for s in sentences])
    rec = _Recorder()
    feats = embed_sentences(rec, sentences, batch_size=16)
    assert np.array_equal(feats[:, 0], [len(s.split()) for s in sentences])  # input order restored
    assert all(len(b) <= 16 for b in rec.batches)
    single = Task("toy", labels, sentences=sentences)
    pair = Task("toy_pairs", labels, pairs=(sentences, sentences[::-1]))
    m = evaluate_tasks(rec, [single, pair], settings_for("prototyping", folds=3), prefix="r_")
    assert rec.prepared == ["toy", "toy_pairs"]
    assert m["r_toy"] >= 95.0  # the "good" count separates the classes
    assert "r_toy_pairs_f1" in m and "r_toy_seconds" in m
    bow = BagOfWords()
    bow.prepare(single)
    assert sp.issparse(bow.batcher(["good x"])) and bow.batcher(["good x"]).sum() == 2


def _loop_gru(gru: torch.nn.GRU, x: list[torch.Tensor], suffix: str) -> torch.Tensor:
    """The GRU recurrence written out (torch.nn.GRU's equations, gates r, z, n in that order):
    r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(W_iz x + ... ), n = tanh(W_in x + b_in +
    r (W_hn h + b_hn)), h <- (1 - z) n + z h, over the tokens ``x`` in the order given."""
    w_ih, w_hh = (getattr(gru, f"weight_{k}_l0{suffix}").double() for k in ("ih", "hh"))
    b_ih, b_hh = (getattr(gru, f"bias_{k}_l0{suffix}").double() for k in ("ih", "hh"))
    units = w_hh.shape[1]
    h = torch.zeros(units, dtype=torch.float64)
    for token in x:
        gi, gh = w_ih @ token + b_ih, w_hh @ h + b_hh
        r = torch.sigmoid(gi[:units] + gh[:units])
        z = torch.sigmoid(gi[units : 2 * units] + gh[units : 2 * units])
        n = torch.tanh(gi[2 * units :] + r * gh[2 * units :])
        h = (1 - z) * n + z * h
    return h


def _loop_sentence_vector(encoder, ids: list[int]) -> torch.Tensor:
    """[last forward state, last backward state] over the sentence's own tokens (no padding)."""
    x = [encoder.embedding.weight[i].double() for i in ids]
    return torch.cat([_loop_gru(encoder.rnn, x, ""), _loop_gru(encoder.rnn, x[::-1], "_reverse")])


def test_encoder_embedding_is_order_free_and_carries_its_tokenizer() -> None:
    sentences = [
        "the cat sat on the mat.",
        "a dog barked.",
        "it rained all day long in town.",
        "she smiled.",
        "they walked home together after the long dinner.",
    ] * 3
    tok = train_tokenizer(sentences, kind="wordpiece", vocab_size=80, min_frequency=1)
    torch.manual_seed(0)
    enc = build_quick_thought_encoder(EncoderConfig(embedding_dim=8, hidden_size=6), tok)
    e1 = enc.embed(sentences[:5], batch_size=2)
    e2 = enc.embed(sentences[:5][::-1], batch_size=5)[::-1]
    assert e1.shape == (5, 12) and np.allclose(e1, e2, atol=1e-6)  # padding does not leak
    assert np.allclose(EncoderEmbedder(enc).batcher(sentences[:5]), e1)
    state = enc.state_dict()
    torch.manual_seed(1)
    other_tok = train_tokenizer(["x y z"] * 3, kind="word", vocab_size=20, min_frequency=1)
    clone = build_quick_thought_encoder(EncoderConfig(embedding_dim=8, hidden_size=6), tok)
    clone.tokenizer = other_tok
    clone.load_state_dict(state)  # the tokenizer travels in the state dict
    assert clone.tokenizer.to_json() == tok.to_json()
    assert np.allclose(clone.embed(sentences[:5]), e1)
    bi = build_quick_thought_encoder(EncoderConfig(embedding_dim=8, hidden_size=6, bidirectional=True), tok)
    # sentences of different lengths share a padded chunk: the backward direction must start at
    # each sentence's own last token, so the loop runs on the unpadded ids
    with torch.no_grad():
        ref = np.stack(
            [
                torch.cat([_loop_sentence_vector(bi.f, ids), _loop_sentence_vector(bi.g, ids)]).numpy()
                for ids in tok.ids(sentences[:5])
            ]
        )
    np.testing.assert_allclose(bi.embed(sentences[:5]), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="hidden_size"):
        build_quick_thought_encoder(EncoderConfig(embedding_dim=8, hidden_size=7, bidirectional=True), tok)


def test_transformer_option_builds_locally_and_pools_the_real_tokens() -> None:
    tok = train_tokenizer(["one two three four.", "five six seven."] * 4, kind="word", vocab_size=30, min_frequency=1)
    enc = build_quick_thought_encoder(EncoderConfig(kind="transformer", hidden_size=16, num_layers=1, num_heads=2), tok)
    sentences = ["one two three four.", "five six."]
    out = enc.embed(sentences)
    # the mean of BERT's last hidden states over the real tokens: each sentence run alone,
    # unpadded, must give its row of the padded batch
    enc.eval()
    with torch.no_grad():
        ref = np.stack(
            [
                torch.cat(
                    [m.model(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0) for m in (enc.f, enc.g)]
                ).numpy()
                for ids in tok.ids(sentences)
            ]
        )
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    u, v = enc(tok(sentences), pair=True)
    np.testing.assert_allclose(torch.cat([u, v], dim=1).detach().numpy(), ref, rtol=1e-5, atol=1e-5)


def test_baselines_random_encoder_of_the_same_size_and_bag_of_words() -> None:
    """``evaluation.baselines`` adds ``random_<task>`` (an untrained encoder of the trained
    one's architecture and vocabulary, seeded, the global random state untouched) and
    ``bow_<task>`` for every task."""
    from types import SimpleNamespace

    from domains.text.config import EvaluationConfig
    from domains.text.domain import TextDomain

    sentences = [("a good " if i % 2 else "a bad ") + "film " * (i % 4) + "today." for i in range(80)]
    labels = np.array([i % 2 for i in range(80)])
    tok = train_tokenizer(sentences, kind="word", vocab_size=40, min_frequency=1)
    cfg = EncoderConfig(embedding_dim=8, hidden_size=6)
    recipe = SimpleNamespace(
        seed=3,
        encoder=cfg,
        data=SimpleNamespace(max_length=30),
        evaluation=EvaluationConfig(tasks=["mr", "trec"], baselines=["random", "bow"], diagnostics=False, folds=4),
        raw={"objective": {}, "budget": {}},
        sections={},
        source="test",
    )
    torch.manual_seed(0)
    trained = build_quick_thought_encoder(cfg, tok)
    domain = TextDomain(recipe)

    state = torch.get_rng_state()
    rand = domain.random_encoder(trained, recipe)
    assert torch.equal(torch.get_rng_state(), state)
    again = domain.random_encoder(trained, recipe)
    shapes = {k: tuple(v.shape) for k, v in trained.state_dict().items() if isinstance(v, torch.Tensor)}
    assert {k: tuple(v.shape) for k, v in rand.state_dict().items() if isinstance(v, torch.Tensor)} == shapes
    assert all(torch.equal(a, b) for a, b in zip(rand.parameters(), again.parameters()))
    assert not torch.equal(rand.f.rnn.weight_hh_l0, trained.f.rnn.weight_hh_l0)
    assert rand.tokenizer is trained.tokenizer

    # two tiny tasks stand in for the real ones (their loaders are tested in test_tasks.py)
    tasks = [Task("mr", labels, sentences=sentences), Task("trec", labels[::-1].copy(), sentences=sentences[::-1])]
    domain._load_tasks = lambda ev, seed: tasks  # type: ignore[method-assign]
    metrics = domain.evaluate(trained, None, recipe).metrics
    for name in ("mr", "trec"):
        assert {name, f"random_{name}", f"bow_{name}"} <= set(metrics)
        assert metrics[f"bow_{name}"] == 100.0  # "good" vs "bad" is one word of the bag


def test_grid_edge_note_only_when_every_fold_sits_on_one_end() -> None:
    s = settings_for("prototyping")  # grid 0.01, 0.1, 1
    low = grid_edge([0.01] * 5, s)
    assert "smallest C (0.01)" in low and "lower" in low
    assert "largest C (1)" in grid_edge([1.0, 1.0], s)
    assert grid_edge([0.01, 0.1, 0.01], s) == ""  # the folds disagree: the grid holds an optimum
    assert grid_edge([0.1] * 5, s) == ""
    assert grid_edge([0.01] * 5, settings_for("prototyping", selection="none")) == ""  # nothing searched
    assert grid_edge([0.01], settings_for("prototyping", c_grid=(0.01,))) == ""
