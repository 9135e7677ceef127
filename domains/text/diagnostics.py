"""Geometry of the learned sentence embeddings on held-out books (LMCL Fig. 5, Sec. 5.3).

On the first ``max_sentences`` contiguous sentences of the validation books:

* ``alignment``: Wang & Isola's ``mean ||x_i - x_{i+1}||^2`` over neighbouring sentences of
  the same book (the quick-thought positives), on the L2-normalised embedding ``[f, g]``;
* ``uniformity``: ``log mean_{i<j} exp(-2 ||x_i - x_j||^2)`` (the loss value, lower = more
  uniform);
* ``dp_margin_occupancy``: the share of pairs whose LMCL distance ``D = (1 - x_i.x_j)/2``
  lies inside the DP margin ``(d_plus, d_minus)``, with the distance histogram as a figure;
* ``neighbour_top1``: the quick-thought task itself on held-out text: for each sentence of a
  contiguous block, is the highest-scoring other sentence (``f(s).g(c)``) one of its
  neighbours? (chance is about 2 / block size).

All from ``toolkit.evaluation.metrics`` / ``toolkit.evaluation.plots``; nothing here trains.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from domains.text.quickthought import neighbour_mask
from domains.text.sampling import SentenceTable
from toolkit.evaluation import metrics
from toolkit.evaluation.collapse import collapse_figures
from toolkit.evaluation.plots import distance_histogram_figure

__all__ = ["sentence_geometry", "neighbour_top1"]


@torch.no_grad()
def _pair_embeddings(
    encoder: Any, table: SentenceTable, idx: np.ndarray, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    device = next(encoder.parameters()).device
    us, vs = [], []
    for a in range(0, len(idx), batch_size):
        chunk = idx[a : a + batch_size]
        x = encoder.tokenizer.pad([table.ids[i] for i in chunk]).to(device)
        u, v = encoder(x, pair=True)
        us.append(u.float().cpu())
        vs.append(v.float().cpu())
    return torch.cat(us), torch.cat(vs)


COLLAPSE_SENTENCES = 2000  # held-out sentences the collapse figures are computed on


@torch.no_grad()
def sentence_collapse(encoder: Any, table: SentenceTable, batch_size: int = 400) -> dict[str, float]:
    """The collapse figures (:mod:`toolkit.evaluation.collapse`) of the sentence embedding the
    evaluation reads, ``[f(s), g(s)]``, on the first held-out sentences."""
    idx = np.arange(min(COLLAPSE_SENTENCES, len(table)))
    if len(idx) < 2:
        return {}
    u, v = _pair_embeddings(encoder, table, idx, batch_size)
    return collapse_figures(torch.cat([u, v], dim=1))


@torch.no_grad()
def neighbour_top1(
    encoder: Any, table: SentenceTable, block: int = 400, max_blocks: int = 5, window: int = 1, score: str = "dot"
) -> float:
    """Percent of sentences whose best-scored candidate in their block is a neighbour."""
    hits, total = 0, 0
    starts = range(0, max(len(table) - block + 1, 1), block)
    for b, start in enumerate(starts):
        if b >= max_blocks:
            break
        idx = np.arange(start, min(start + block, len(table)))
        u, v = _pair_embeddings(encoder, table, idx, block)
        if score == "cosine":
            u, v = F.normalize(u, dim=1), F.normalize(v, dim=1)
        s = u @ v.t()
        s.fill_diagonal_(float("-inf"))
        pos = neighbour_mask(torch.from_numpy(table.book[idx]), torch.from_numpy(table.position[idx]), window)
        has = pos.any(1)
        best = s.argmax(1)
        hits += int(pos[torch.arange(len(idx)), best][has].sum())
        total += int(has.sum())
    return 100.0 * hits / max(total, 1)


@torch.no_grad()
def sentence_geometry(
    encoder: Any,
    table: SentenceTable,
    max_sentences: int = 2000,
    d_plus: float = 0.1,
    d_minus: float = 0.5,
    batch_size: int = 256,
    title: str = "sentence embeddings",
) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics and the distance-histogram figure of the held-out sentence embeddings."""
    if len(table) < 3:
        raise ValueError(f"the validation table needs at least 3 sentences, got {len(table)}")
    idx = np.arange(min(max_sentences, len(table)))
    u, v = _pair_embeddings(encoder, table, idx, batch_size)
    x = F.normalize(torch.cat([u, v], dim=1), dim=1).double()
    same_book = table.book[idx[1:]] == table.book[idx[:-1]]
    a = torch.from_numpy(np.flatnonzero(same_book))
    hist = metrics.distance_histogram(x, d_plus=d_plus, d_minus=d_minus)
    out = {
        "alignment": metrics.alignment(x[a], x[a + 1]),
        "uniformity": metrics.uniformity(x, t=2.0),
        "dp_margin_occupancy": float(hist["margin_occupancy"]),
    }
    fig = distance_histogram_figure(
        x, d_plus=d_plus, d_minus=d_minus, title=f"LMCL distances, {title} ({len(idx)} held-out sentences)"
    )
    return out, {"distance_histogram": fig}
