"""Sentence and paragraph splitting on tricky text (abbreviations, initials, dialogue,
ellipses), and the book-level corpus structure built from it."""

from __future__ import annotations

import pytest

from domains.text.corpora import Book, book_from_text, read_text_folder, split_by_book
from domains.text.splitting import is_heading, split_paragraphs, split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        # titles are not sentence ends
        ("Mr. Darcy bowed. Mrs. Bennet smiled at Dr. Jones.", ["Mr. Darcy bowed.", "Mrs. Bennet smiled at Dr. Jones."]),
        ("They met St. John and Capt. Wentworth. It rained.", ["They met St. John and Capt. Wentworth.", "It rained."]),
        # Latin abbreviations, before lower and upper case
        (
            "Some fruit, e.g. apples, keeps well. Others, i.e. Pears, do not.",
            ["Some fruit, e.g. apples, keeps well.", "Others, i.e. Pears, do not."],
        ),
        # initials
        ("J. R. R. Tolkien wrote it. He was a professor.", ["J. R. R. Tolkien wrote it.", "He was a professor."]),
        ("The U.S. Navy arrived. It was late.", ["The U.S. Navy arrived.", "It was late."]),
        # numbering abbreviations
        ("See No. 5 for details. Then stop.", ["See No. 5 for details.", "Then stop."]),
        # quoted dialogue: ?/! inside quotes followed by a lower-case word continues the sentence
        (
            '"Is it true?" said Elizabeth. "It is!" cried Lydia.',
            ['"Is it true?" said Elizabeth.', '"It is!" cried Lydia.'],
        ),
        ('He said, "Go away!" and left. "Why?" She asked.', ['He said, "Go away!" and left.', '"Why?"', "She asked."]),
        # a closing quote after the period stays with its sentence; an opening quote starts one
        ('"I am here." She smiled. "Come in," said he.', ['"I am here."', "She smiled.", '"Come in," said he.']),
        # ellipses: continuation in lower case, boundary before a capital
        (
            "Perhaps... perhaps not. He paused... Then he left.",
            ["Perhaps... perhaps not.", "He paused...", "Then he left."],
        ),
        ("Wait\u2026 listen. Stop\u2026 Now go.", ["Wait\u2026 listen.", "Stop\u2026", "Now go."]),
        # several terminators and a sentence without one at the end
        ("What?! No way. and then nothing", ["What?!", "No way. and then nothing"]),
        ("What?! No. Never", ["What?!", "No.", "Never"]),
    ],
)
def test_split_sentences_tricky(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_joins_line_breaks_and_keeps_every_character() -> None:
    text = "It is a truth universally\nacknowledged, that a single man. He\nwas rich."
    out = split_sentences(text)
    assert out == ["It is a truth universally acknowledged, that a single man.", "He was rich."]
    assert "".join(out).replace(" ", "") == text.replace("\n", "").replace(" ", "")


def test_paragraphs_and_headings() -> None:
    text = "CHAPTER I\n\n\nFirst line of\nthe paragraph. Second.\n\n  \nNew paragraph here.\n"
    assert split_paragraphs(text) == ["CHAPTER I", "First line of the paragraph. Second.", "New paragraph here."]
    assert is_heading("CHAPTER XII") and is_heading("Chapter 3") and is_heading("IV.")
    assert is_heading("CHAPTER 1. Loomings.") and is_heading("VOLUME I")
    assert not is_heading("Chapter and verse were quoted at length.")
    assert not is_heading("Part of the company walked on. The rest stayed behind.")
    book = book_from_text("b", text)
    assert book.sentences == ("First line of the paragraph.", "Second.", "New paragraph here.")
    assert book.paragraphs == (1, 1, 2)  # the heading paragraph (0) was dropped, ids kept


def test_read_text_folder_orders_books_and_splits_by_book(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "2-second.txt").write_text("B one. B two.\n\nB three.", encoding="utf-8")
    (tmp_path / "10-third.txt").write_text("C one.", encoding="utf-8")
    (tmp_path / "1-first.txt").write_text("A one. A two.", encoding="utf-8")
    books = read_text_folder(tmp_path)
    assert [b.name for b in books] == ["1-first", "2-second", "10-third"]
    train, val = split_by_book(books, 1)
    assert [b.name for b in train] == ["1-first", "2-second"] and [b.name for b in val] == ["10-third"]
    train, val = split_by_book(books, ["1-first"])
    assert [b.name for b in val] == ["1-first"]
    with pytest.raises(ValueError, match="val_books"):
        split_by_book(books, ["nope"])
    with pytest.raises(ValueError, match="val_books"):
        split_by_book(books, 3)


def test_bad_input_raises_value_error() -> None:
    with pytest.raises(ValueError, match="paragraph"):
        split_sentences(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sentences"):
        Book("x", ("a",), (0, 1))
