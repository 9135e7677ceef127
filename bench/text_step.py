"""Sentences per second of a quick-thought training step and of embedding for evaluation.

Training step: a batch of ``--batch`` contiguous Austen sentences -> f, g (GRU) -> the score
matrix and neighbour mask -> the QT softmax (``info_nce``, plus LMCL's DP with ``--dp``) ->
backward -> Adam. Embedding: ``QuickThoughtEncoder.embed`` (no grad, length-sorted batches) on
the Rotten-Tomatoes (MR) sentences, as the SentEval-style evaluation does it.

Timing: warm-up steps, then ``--repeats`` timed steps; the median and the best step are
printed (the machine may be shared: compare medians of runs made under the same load).

    python bench/text_step.py                               # the CPU recipes: GRU 256, batch 128, 2 threads
    taskset -c 0 python bench/text_step.py --threads 1      # one pinned core
    python bench/text_step.py --hidden 2400 --embedding 620 --batch 400 --repeats 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from domains.text.config import EncoderConfig  # noqa: E402
from domains.text.corpora import load_corpus  # noqa: E402
from domains.text.domain import build_quick_thought_encoder  # noqa: E402
from domains.text.quickthought import quick_thought_batch  # noqa: E402
from domains.text.sampling import ContiguousBatches, SentenceTable  # noqa: E402
from domains.text.senteval.tasks import load_task  # noqa: E402
from domains.text.tokenizer import train_tokenizer  # noqa: E402
from toolkit.losses import functional as LF  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--embedding", type=int, default=128)
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--max-length", type=int, default=30)
    p.add_argument("--vocab", type=int, default=16000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--dp", action="store_true", help="add LMCL's DP regularizer as the CPU recipes do (mean over pairs, weight 1)")
    p.add_argument("--embed-sentences", type=int, default=4000)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)

    books = load_corpus("austen")
    tok = train_tokenizer((s for b in books[:5] for s in b.sentences), vocab_size=args.vocab,
                          max_length=args.max_length)
    table = SentenceTable.build(books[:5], tok)
    cfg = EncoderConfig(embedding_dim=args.embedding, hidden_size=args.hidden,
                        bidirectional=args.bidirectional)
    enc = build_quick_thought_encoder(cfg, tok, args.max_length).to(device)
    opt = torch.optim.Adam(enc.parameters(), lr=5e-4)
    batches = iter(ContiguousBatches(table, tok, args.batch, seed=0))
    params = sum(p.numel() for p in enc.parameters())
    print(f"device {device}, threads {args.threads}; GRU hidden {args.hidden} (bidirectional "
          f"{args.bidirectional}), embedding {args.embedding}, vocab {tok.vocab_size}, "
          f"{params / 1e6:.2f} M parameters; batch {args.batch}, max length {args.max_length}")

    times = []
    for k in range(args.warmup + args.repeats):
        batch = {key: v.to(device) for key, v in next(batches).items()}
        start = time.perf_counter()
        cb = quick_thought_batch(batch, enc)
        loss = LF.info_nce_scores(cb.scores, cb.positive_mask, cb.valid_mask, temperature=1.0)
        if args.dp:
            loss = loss + 1.0 * LF.distance_polarization(cb.views[:, 0], reduction="mean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if k >= args.warmup:
            times.append(time.perf_counter() - start)
    med, best = statistics.median(times), min(times)
    print(f"training step: median {med * 1e3:.0f} ms ({args.batch / med:.0f} sentences/s), "
          f"best {best * 1e3:.0f} ms ({args.batch / best:.0f} sentences/s), loss {loss.item():.3f}")

    sentences = load_task("mr").sentences[: args.embed_sentences]
    enc.embed(sentences[:256])  # warm-up
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        enc.embed(sentences, batch_size=256)
        rates.append(len(sentences) / (time.perf_counter() - start))
    print(f"embedding (evaluation): median {statistics.median(rates):.0f} sentences/s, best "
          f"{max(rates):.0f} sentences/s over {len(sentences)} MR sentences, features "
          f"{2 * enc.out_dim}-d")


if __name__ == "__main__":
    main()
