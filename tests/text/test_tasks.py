"""Each loader on its real offline file (``domains.text.catalogue.locate``): the Austen corpus and the
six SentEval-style tasks (MR, the CR / SUBJ / MPQA / MSRP stand-ins, TREC train_5500)."""

from __future__ import annotations

import numpy as np
import pytest

from domains.text.corpora import load_corpus
from domains.text.senteval.msrp_standin import build_msrp_standin, clean_osis, word_overlap
from domains.text.senteval.tasks import load_task, subsample


def test_austen_six_novels_in_order() -> None:
    books = load_corpus("austen")
    assert [b.name.split("-", 1)[1] for b in books] == [
        "sense-and-sensibility",
        "pride-and-prejudice",
        "mansfield-park",
        "emma",
        "northanger-abbey",
        "persuasion",
    ]
    total = sum(len(b) for b in books)
    assert 30_000 < total < 33_500  # docs/data.md: ~31.7k sentences
    pride = books[1]
    assert pride.sentences[0].startswith("PRIDE AND PREJUDICE")
    first = next(s for s in pride.sentences if s.startswith("It is a truth"))
    assert first == (
        "It is a truth universally acknowledged, that a single man in possession "
        "of a good fortune, must be in want of a wife."
    )
    assert not any(s.startswith("Chapter ") for s in pride.sentences)  # headings dropped
    assert all(s.strip() for b in books for s in b.sentences)
    assert all(np.all(np.diff(b.paragraphs) >= 0) for b in books)  # reading order kept
    assert not any(s.endswith((" Mr.", " Mrs.")) for s in pride.sentences)


def test_mr_is_rotten_tomatoes_fresh_vs_rotten() -> None:
    task = load_task("mr")
    assert task.name == "mr" and not task.standin and not task.is_pair
    assert int(task.labels.sum()) == 7403 and int((task.labels == 0).sum()) == 5405


def test_subj_standin_balanced_objective_vs_subjective() -> None:
    task = load_task("subj", seed=0)
    assert task.name == "subj_standin" and task.standin
    assert (task.labels == 1).sum() == (task.labels == 0).sum() > 5000
    objective = [s for s, y in zip(task.sentences, task.labels) if y == 0]
    assert all(len(s.split()) >= 3 for s in objective)


@pytest.mark.parametrize("name, n_min, n_max", [("cr", 2800, 3707), ("mpqa", 2800, 5189)])
def test_vader_standins(name: str, n_min: int, n_max: int) -> None:
    task = load_task(name, min_abs_rating=0.5)
    assert task.name == f"{name}_standin" and task.standin
    assert n_min <= len(task) <= n_max and set(np.unique(task.labels)) == {0, 1}
    everything = load_task(name, min_abs_rating=0.0)  # only exact zeros dropped
    assert len(everything) > len(task)


def test_trec_train_5500_coarse_labels() -> None:
    task = load_task("trec")
    assert task.name == "trec" and len(task) == 5452 and not task.has_test
    counts = np.bincount(task.labels, minlength=6)
    # Li & Roth train_5500 coarse classes ABBR DESC ENTY HUM LOC NUM
    assert counts.tolist() == [86, 1162, 1250, 1223, 835, 896]
    assert task.sentences[0] == "How did serfdom develop in and then leave Russia ?"


def test_msrp_standin_from_the_bibles_is_balanced_and_overlap_matched() -> None:
    # the four gospels of the real SWORD modules keep the test fast
    task = load_task("msrp", msrp_pairs=600, seed=0, msrp_books=("Matt", "Mark", "Luke", "John"))
    assert task.name == "msrp_standin" and task.standin and task.is_pair and len(task) == 600
    assert task.labels.sum() == 300
    assert all(a and b for a, b in zip(*task.pairs))
    overlaps = np.array([word_overlap(a, b) for a, b in zip(*task.pairs)])
    pos, neg = overlaps[task.labels == 1], overlaps[task.labels == 0]
    assert abs(pos.mean() - neg.mean()) < 0.02  # the naive stand-in differs by ~0.4
    assert "In the beginning" not in clean_osis('<w lemma="x">In</w>')  # tags unwrapped...
    assert clean_osis('God<note placement="foot">a note</note><w>created</w> it .') == "God created it."


def test_msrp_pairs_matching_on_a_toy_bible() -> None:
    chapters = [[("a b c d", "a b c x"), ("e f g h", "e f y z"), ("a b e f", "q r s t")]]
    first, second, labels = build_msrp_standin(chapters, n_pairs=2, bin_width=0.5, seed=0)
    assert len(labels) == 2 and sorted(labels.tolist()) == [0, 1]
    bins = [int(word_overlap(a, b) / 0.5) for a, b in zip(first, second)]
    assert bins[0] == bins[1]


def test_subsample_is_stratified_and_seeded() -> None:
    task = load_task("mr")
    a, b = subsample(task, 1000, seed=1), subsample(task, 1000, seed=1)
    assert a.sentences == b.sentences and abs(len(a) - 1000) <= 2
    assert abs(a.labels.mean() - task.labels.mean()) < 0.01
    with pytest.raises(ValueError, match="task"):
        load_task("sst")
