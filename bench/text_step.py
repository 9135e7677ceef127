"""Sentences per second of a quick-thought training step and of embedding for evaluation.

Training step: a batch of ``--batch`` contiguous sentences (Austen, or the recipe's corpus) -> f, g -> the score matrix and
neighbour mask -> the QT softmax (``info_nce``, plus LMCL's DP with ``--dp``) -> backward -> Adam.
Embedding: ``QuickThoughtEncoder.embed`` (no grad, length-sorted batches) on the Rotten-Tomatoes
(MR) sentences, as the SentEval-style evaluation does it.

``--recipe PATH`` takes the encoder, tokenizer, batch size and learning rate from a text recipe
instead of the flags. ``--before PATH`` also times the step of a second recipe in the same
rounds (interleaved, so load from other processes hits both alike) and prints the ratio of
training sentences per second, after over before: by default the GRU recipe the text
time-to-accuracy work started from (``recipes/text/cpu/qt_austen.yaml``) against the
bag-of-words recipe (``recipes/text/cpu/qt_bow_books.yaml``), each on its own corpus and
vocabulary (the bag-of-words step's cost is mostly the Adam update of its word tables).

Timing: warm-up steps, then ``--repeats`` timed steps; the median and the best step are
printed (the machine may be shared: compare medians of runs made under the same load).

    python bench/text_step.py                               # GRU 256, batch 128, 2 threads
    python bench/text_step.py --recipe recipes/text/cpu/qt_bow_books.yaml --before recipes/text/cpu/qt_austen.yaml
    taskset -c 0 python bench/text_step.py --threads 1      # one pinned core
    python bench/text_step.py --hidden 2400 --embedding 620 --batch 400 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from domains.text.config import EncoderConfig, TokenizerConfig  # noqa: E402
from domains.text.corpora import load_corpus  # noqa: E402
from domains.text.domain import build_quick_thought_encoder  # noqa: E402
from domains.text.quickthought import quick_thought_batch  # noqa: E402
from domains.text.sampling import ContiguousBatches, SentenceTable  # noqa: E402
from domains.text.senteval.tasks import load_task  # noqa: E402
from domains.text.tokenizer import train_tokenizer  # noqa: E402
from toolkit.losses import functional as LF  # noqa: E402
from toolkit.recipe import load_yaml  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402

GRU_RECIPE = ROOT / "recipes/text/cpu/qt_austen.yaml"


@dataclass
class Spec:
    """What a training step depends on: the encoder, the tokenizer, the batch and the rate."""

    label: str
    encoder: EncoderConfig
    tokenizer: TokenizerConfig
    batch: int
    lr: float
    max_length: int = 30
    corpus: str | list[str] = "austen"


def spec_from_recipe(path: str | Path) -> Spec:
    raw = load_yaml(path)
    data = raw.get("data") or {}
    return Spec(
        Path(path).name,
        EncoderConfig(**(raw.get("encoder") or {})),
        TokenizerConfig(**(data.get("tokenizer") or {})),
        int(raw["budget"]["batch_size"]),
        float((raw.get("optimizer") or {}).get("lr", 1e-3)),
        int(data.get("max_length", 30)),
        data.get("corpus", "austen"),
    )


class Step:
    """One quick-thought training step of ``spec`` on its corpus (all but the last book; the
    tokenizer, and so the size of the word tables, is trained on those books as a run does)."""

    def __init__(self, spec: Spec, device: torch.device, dp: bool) -> None:
        books = load_corpus(spec.corpus)[:-1]
        t = spec.tokenizer
        tok = train_tokenizer(
            (s for b in books for s in b.sentences),
            kind=t.kind,
            vocab_size=t.vocab_size,
            lowercase=t.lowercase,
            min_frequency=t.min_frequency,
            max_length=spec.max_length,
        )
        self.spec, self.tok, self.device, self.dp = spec, tok, device, dp
        self.enc = build_quick_thought_encoder(spec.encoder, tok, spec.max_length).to(device)
        self.opt = torch.optim.Adam(self.enc.parameters(), lr=spec.lr)
        self.batches = iter(ContiguousBatches(SentenceTable.build(books, tok), tok, spec.batch, seed=0))
        self.times: list[float] = []
        self.loss = float("nan")

    def describe(self) -> str:
        e = self.spec.encoder
        shape = (
            f"bag of words {e.embedding_dim}"
            if e.kind == "bow"
            else f"{e.kind} hidden {e.hidden_size} (bidirectional {e.bidirectional}), embedding {e.embedding_dim}"
        )
        params = sum(p.numel() for p in self.enc.parameters())
        corpus = self.spec.corpus if isinstance(self.spec.corpus, str) else "+".join(self.spec.corpus)
        return (
            f"{self.spec.label}: {corpus}, {shape}, {self.spec.tokenizer.kind} vocab {self.tok.vocab_size}, "
            f"{params / 1e6:.2f} M parameters; batch {self.spec.batch}, max length {self.spec.max_length}"
        )

    def __call__(self, timed: bool) -> None:
        batch = {key: v.to(self.device) for key, v in next(self.batches).items()}
        start = time.perf_counter()
        cb = quick_thought_batch(batch, self.enc, score=self.spec.encoder.score)
        loss = LF.info_nce_scores(cb.scores, cb.positive_mask, cb.valid_mask, temperature=1.0)
        if self.dp:
            loss = loss + 1.0 * LF.distance_polarization(cb.views[:, 0], reduction="mean")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        if timed:
            self.times.append(time.perf_counter() - start)
        self.loss = float(loss.detach())

    def rate(self) -> float:
        """Training sentences per second at the median step."""
        return self.spec.batch / statistics.median(self.times)

    def report(self) -> str:
        med, best = statistics.median(self.times), min(self.times)
        return (
            f"training step: median {med * 1e3:.0f} ms ({self.spec.batch / med:.0f} sentences/s), "
            f"best {best * 1e3:.0f} ms ({self.spec.batch / best:.0f} sentences/s), loss {self.loss:.3f}"
        )

    def embed_rate(self, sentences: list[str]) -> float:
        self.enc.embed(sentences[:256])  # warm-up
        rates = []
        for _ in range(3):
            start = time.perf_counter()
            self.enc.embed(sentences, batch_size=256)
            rates.append(len(sentences) / (time.perf_counter() - start))
        return statistics.median(rates)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", help="a text recipe: its encoder, tokenizer, batch and lr replace the flags")
    p.add_argument(
        "--before",
        nargs="?",
        const=str(GRU_RECIPE),
        default=None,
        help="also time this recipe's step and print the ratio (default: the GRU recipe)",
    )
    p.add_argument("--kind", choices=["gru", "bow"], default="gru")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--embedding", type=int, default=128)
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--max-length", type=int, default=30)
    p.add_argument("--vocab", type=int, default=16000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument(
        "--dp", action="store_true", help="add LMCL's DP regularizer as the CPU recipes do (mean over pairs, weight 1)"
    )
    p.add_argument("--embed-sentences", type=int, default=4000)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)

    if args.recipe:
        spec = spec_from_recipe(args.recipe)
    else:
        spec = Spec(
            "flags",
            EncoderConfig(
                kind=args.kind, embedding_dim=args.embedding, hidden_size=args.hidden, bidirectional=args.bidirectional
            ),
            TokenizerConfig(vocab_size=args.vocab),
            args.batch,
            5e-4,
            args.max_length,
        )
    steps = [Step(spec, device, args.dp)]
    if args.before:
        steps.append(Step(spec_from_recipe(args.before), device, args.dp))
    print(f"device {device}, threads {args.threads}")
    for step in steps:
        print("  " + step.describe())
        for _ in range(args.warmup):
            step(timed=False)
    for _ in range(args.repeats):  # interleaved: each round times one step of each
        for step in steps:
            step(timed=True)
    sentences = load_task("mr").sentences[: args.embed_sentences]
    for step in steps:
        print(f"{step.spec.label}: {step.report()}")
        print(
            f"  embedding (evaluation): median {step.embed_rate(sentences):.0f} sentences/s over "
            f"{len(sentences)} MR sentences, features {2 * step.enc.out_dim}-d"
        )
    if args.before:
        after, before = steps
        steps_after, steps_before = (1 / statistics.median(s.times) for s in (after, before))
        print(
            f"{after.spec.label} over {before.spec.label}: training sentences/s {after.rate():.0f} / "
            f"{before.rate():.0f} = {after.rate() / before.rate():.2f}x; steps/s {steps_after:.1f} / "
            f"{steps_before:.1f} = {steps_after / steps_before:.2f}x"
        )


if __name__ == "__main__":
    main()
