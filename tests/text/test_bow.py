"""The bag-of-words quick-thought encoder (``encoder.kind: bow``) against a loop over the
sentences, several offline corpora combined into one list of books, and the one-task SentEval
monitor (``evaluation.monitor_task``) against a plain split-and-fit reference."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from domains.text.config import DataConfig, EncoderConfig, EvaluationConfig
from domains.text.corpora import load_corpus, split_by_book
from domains.text.domain import TextDomain, build_quick_thought_encoder
from domains.text.quickthought import quick_thought_batch
from domains.text.senteval import EncoderEmbedder, Task, quick_accuracy
from domains.text.tokenizer import train_tokenizer

SENTENCES = [
    "the cat sat on the mat.",
    "a dog barked.",
    "it rained all day long in town.",
    "she smiled.",
    "they walked home together after the long dinner.",
]


def _tok():
    return train_tokenizer(SENTENCES * 3, kind="word", vocab_size=60, min_frequency=1)


def _loop_mean(table: torch.Tensor, ids: list[int], pad_id: int) -> torch.Tensor:
    """The mean of the embedding rows of the sentence's real token ids, one row at a time."""
    rows = [table[i].double() for i in ids if i != pad_id]
    total = torch.zeros(table.shape[1], dtype=torch.float64)
    for r in rows:
        total = total + r
    return total / len(rows)


def test_bow_is_the_mean_of_its_own_tables_word_vectors_for_f_and_for_g() -> None:
    tok = _tok()
    torch.manual_seed(0)
    enc = build_quick_thought_encoder(EncoderConfig(kind="bow", embedding_dim=6, init_scale=0.5), tok)
    assert enc.out_dim == 6
    assert enc.f.embedding.weight.data_ptr() != enc.g.embedding.weight.data_ptr()
    assert not torch.equal(enc.f.embedding.weight, enc.g.embedding.weight)  # one table each
    ids = tok.ids(SENTENCES)
    with torch.no_grad():
        u, v = enc(tok.pad(ids), pair=True)
        for k, sentence_ids in enumerate(ids):
            torch.testing.assert_close(u[k].double(), _loop_mean(enc.f.embedding.weight, sentence_ids, tok.pad_id))
            torch.testing.assert_close(v[k].double(), _loop_mean(enc.g.embedding.weight, sentence_ids, tok.pad_id))
    np.testing.assert_allclose(enc.embed(SENTENCES), torch.cat([u, v], 1).numpy(), rtol=1e-6, atol=1e-7)
    # U(-s, s) like the GRU's word embeddings, the padding row zero
    w = enc.f.embedding.weight.detach()
    assert float(w.abs().max()) <= 0.5 and float(w.abs().max()) > 0.4
    assert torch.count_nonzero(w[tok.pad_id]) == 0
    # a gradient through f never reaches g's table
    enc.f(tok.pad(ids)).sum().backward()
    assert enc.g.embedding.weight.grad is None and enc.f.embedding.weight.grad is not None


def test_bow_ignores_padding_even_when_the_padding_row_is_not_zero() -> None:
    tok = _tok()
    enc = build_quick_thought_encoder(EncoderConfig(kind="bow", embedding_dim=4), tok)
    ids = tok.ids(["she smiled."])[0]
    short = torch.tensor([ids])
    long = torch.tensor([ids + [tok.pad_id] * 7])
    with torch.no_grad():
        enc.f.embedding.weight[tok.pad_id] = 3.0  # only the mask may keep padding out
        torch.testing.assert_close(enc.f(long), enc.f(short))
        assert torch.equal(enc.f(torch.full((1, 5), tok.pad_id)), torch.zeros(1, 4))  # no real token


def test_bow_rebuilds_from_its_export_and_has_a_random_twin() -> None:
    tok = _tok()
    cfg = EncoderConfig(kind="bow", embedding_dim=5, score="cosine")
    recipe = SimpleNamespace(
        seed=3,
        encoder=cfg,
        data=SimpleNamespace(max_length=30),
        evaluation=EvaluationConfig(tasks=["mr"]),
        raw={"objective": {}, "budget": {}},
        sections={},
        source="test",
    )
    domain = TextDomain(recipe)
    trained = build_quick_thought_encoder(cfg, tok)
    clone = domain.rebuild_encoder(domain.encoder_extras(trained))
    clone.load_state_dict(trained.state_dict())
    np.testing.assert_allclose(clone.embed(SENTENCES), trained.embed(SENTENCES))
    twin = domain.random_encoder(trained, recipe)
    assert twin.f.embedding.weight.shape == trained.f.embedding.weight.shape
    assert not torch.equal(twin.f.embedding.weight, trained.f.embedding.weight)
    x = tok(SENTENCES)
    batch = {"x": x, "book": torch.zeros(len(SENTENCES), dtype=torch.long), "position": torch.arange(len(SENTENCES))}
    cb = quick_thought_batch(batch, trained, score="cosine")
    u, v = trained(x, pair=True)
    ref = torch.nn.functional.normalize(u, dim=1) @ torch.nn.functional.normalize(v, dim=1).t()
    torch.testing.assert_close(cb.scores, ref)


def _fake_offline_corpora(tmp_path: Path) -> dict[str, Path]:
    """Tiny folders in the layouts of the offline corpora."""
    austen, brown, sotu, moby = (tmp_path / n for n in ("austen", "brown", "sotu", "mobydick"))
    for folder in (austen, brown, sotu, moby):
        folder.mkdir()
    (austen / "1-emma.txt").write_text("Emma smiled. She was glad.\n\nThen she left.\n")
    (austen / "2-persuasion.txt").write_text("Anne waited. Nobody came.\n")
    (brown / "ca01").write_text("The/at jury/nn said/vbd ./.\n\nIt/pps agreed/vbd ./.\n", encoding="latin-1")
    (sotu / "1790_a.json").write_text('{"text": "Fellow citizens. We meet again."}')
    (moby / "mobydick.txt").write_text("Call me Ishmael. Some years ago.\n")
    return {"austen": austen, "brown": brown, "sotu": sotu, "mobydick": moby}


def test_a_list_of_corpora_concatenates_their_books_in_order(tmp_path, monkeypatch) -> None:
    folders = _fake_offline_corpora(tmp_path)
    monkeypatch.setattr("domains.text.corpora._locate", lambda name, root: folders[name])
    books = load_corpus(["brown", "sotu", "mobydick", "austen"])
    expected = []
    for name in ("brown", "sotu", "mobydick", "austen"):
        expected += [(b.name, b.sentences) for b in load_corpus(name)]
    assert [(b.name, b.sentences) for b in books] == expected
    assert [b.name for b in books] == ["ca01", "1790_a", "mobydick", "1-emma", "2-persuasion"]
    assert books[0].sentences == ("The jury said .", "It agreed .")
    # val_books counts from the end of the combined list, or names books of any corpus
    assert [b.name for b in split_by_book(books, 1)[1]] == ["2-persuasion"]
    assert [b.name for b in split_by_book(books, ["1790_a"])[1]] == ["1790_a"]
    assert load_corpus(["austen"], max_books=1)[0].name == "1-emma"  # max_books: per corpus


def test_bad_corpus_names_are_named(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"source\[1\] is 'bogus'.*austen, mobydick, sotu, brown"):
        load_corpus(["austen", "bogus"], root=tmp_path)
    with pytest.raises(ValueError, match="more than once"):
        load_corpus(["austen", "austen"], root=tmp_path)
    with pytest.raises(ValueError, match="path"):
        load_corpus(["austen"], path=tmp_path)
    with pytest.raises(ValidationError, match=r"corpus\[0\] is 'folder'"):
        DataConfig(corpus=["folder"])  # a folder needs its own path: not in a list
    with pytest.raises(ValidationError, match="corpus must be one of austen"):
        DataConfig(corpus="austin")
    assert DataConfig(corpus="sotu").corpus == "sotu"  # one name works as before
    assert DataConfig(corpus=["sotu", "brown"]).corpus == ["sotu", "brown"]


def _toy_task(n: int = 120) -> Task:
    words = ["good", "bad"]
    sentences = [f"a {words[i % 2]} film " + "long " * (i % 5) for i in range(n)]
    return Task("mr", np.array([1 - i % 2 for i in range(n)]), sentences=sentences)


def test_quick_accuracy_is_one_split_and_one_fixed_c_probe() -> None:
    task = _toy_task()
    tok = train_tokenizer(task.sentences, kind="word", vocab_size=40, min_frequency=1)
    torch.manual_seed(0)
    enc = build_quick_thought_encoder(EncoderConfig(kind="bow", embedding_dim=6), tok)
    got = quick_accuracy(EncoderEmbedder(enc), task, c=0.3, seed=5)
    X = enc.embed(task.sentences)
    tr, te = next(StratifiedShuffleSplit(1, test_size=0.2, random_state=5).split(X, task.labels))
    scaler = StandardScaler().fit(X[tr])
    model = LogisticRegression(C=0.3, max_iter=1000).fit(scaler.transform(X[tr]), task.labels[tr])
    ref = 100.0 * float(np.mean(model.predict(scaler.transform(X[te])) == task.labels[te]))
    assert got == pytest.approx(ref)
    with pytest.raises(ValueError, match="test_fraction"):
        quick_accuracy(EncoderEmbedder(enc), task, test_fraction=1.0)


def test_monitor_task_reports_a_percentage_and_bad_names_are_refused() -> None:
    task = _toy_task()
    tok = train_tokenizer(task.sentences, kind="word", vocab_size=40, min_frequency=1)
    cfg = EncoderConfig(kind="bow", embedding_dim=6)
    ev = EvaluationConfig(tasks=["mr"], monitor_task="mr", monitor_c=0.5)
    recipe = SimpleNamespace(
        seed=1,
        encoder=cfg,
        data=SimpleNamespace(max_length=30),
        evaluation=ev,
        raw={"objective": {}, "budget": {}},
        sections={},
        source="test",
    )
    domain = TextDomain(recipe)
    domain._load_task = lambda name, ev, seed: task  # type: ignore[method-assign]
    enc = build_quick_thought_encoder(cfg, tok)
    out = domain.monitor(enc, SimpleNamespace(eval={"val": None}))
    assert set(out) == {"senteval_mr"} and 0.0 <= out["senteval_mr"] <= 100.0
    assert out["senteval_mr"] == pytest.approx(quick_accuracy(EncoderEmbedder(enc), task, 0.5, 1))
    with pytest.raises(ValidationError, match=r"monitor_task[\s\S]*'mr'"):
        EvaluationConfig(monitor_task="movie_reviews")


def test_the_bow_recipe_validates_and_rejects_a_bad_monitor_task() -> None:
    from domains import installed
    from toolkit.recipe import RecipeError
    from toolkit.runs import load_recipe

    path = Path(__file__).resolve().parents[2] / "recipes" / "text" / "cpu" / "qt_bow_books.yaml"
    recipe = load_recipe(path, [], installed.get)
    assert recipe.encoder.kind == "bow" and isinstance(recipe.data.corpus, list)
    assert recipe.evaluation.monitor_task == "mr" and recipe.budget.monitor_every
    with pytest.raises(RecipeError, match=r"evaluation.monitor_task.*'xx'"):
        load_recipe(path, ["evaluation.monitor_task=xx"], installed.get)
    with pytest.raises(RecipeError, match=r"data.corpus.*'bogus'"):
        load_recipe(path, ["data.corpus=[austen,bogus]"], installed.get)


def test_a_text_encoder_exports_as_data_and_loads_back_with_its_tokenizer(tmp_path) -> None:
    """The logged model of a text run (``model/encoder.pt``): the state dict holds the
    tokenizer as extra state (plain data), which the export keeps and the loader restores."""
    from domains import installed
    from domains.export import load_encoder
    from toolkit.checkpoint import load
    from toolkit.runs import load_recipe
    from toolkit.tracking.encoder_file import save_encoder

    path = Path(__file__).resolve().parents[2] / "recipes" / "text" / "cpu" / "qt_bow_books.yaml"
    recipe = load_recipe(path, ["encoder.embedding_dim=8"], installed.get)
    tok = _tok()
    torch.manual_seed(0)
    trained = build_quick_thought_encoder(recipe.encoder, tok)
    domain = TextDomain(recipe)
    out = save_encoder(tmp_path / "enc.pt", trained, recipe.resolved, domain.encoder_extras(trained))
    stored = load(out)["state_dict"]
    assert stored["_extra_state"]["tokenizer"] == tok.state()  # data, not a tokenizer object
    loaded = load_encoder(out)
    assert loaded.tokenizer.to_json() == tok.to_json()
    np.testing.assert_array_equal(loaded.embed(SENTENCES), trained.embed(SENTENCES))
