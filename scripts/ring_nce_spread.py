"""How much Ring App. B's NCE estimate moves between data draws, with the exact optimal critic.

Table 5 reports NCE = 0.01345 +- 0.001 (5 seeds) against a true MI of 0.02041. This script draws
``--draws`` independent 2000-point data sets (Ring App. B's correlated Gaussians), computes the
NCE estimate of each with the Bayes-optimal critic and 100 sampled negatives (ctk's
``ring_mi`` toy, docs/toy-datasets.md), and prints the mean, the standard deviation across
draws, and how often one draw falls at or below the paper's 0.01345; then the spread when the
data draw is fixed and only the negative sampling is reseeded (the paper's stdev of 0.001
looks like that). One core, about a second per draw.

    python scripts/ring_nce_spread.py --draws 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domains.toy import ring_mi  # noqa: E402

PAPER_NCE = 0.01345


def nce(data_seed: int, sample_seed: int, n: int) -> float:
    x, y = ring_mi.sample_pairs(n, torch.Generator().manual_seed(data_seed))
    scores = ring_mi.optimal_critic(x, y)
    return ring_mi.contrastive_mi_estimate(scores, 0.0, 100, torch.Generator().manual_seed(sample_seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--first-seed", type=int, default=1000, help="data seeds first-seed, first-seed + 1, ...")
    args = ap.parse_args()
    torch.set_num_threads(1)
    true = ring_mi.true_mutual_information()
    draws = [nce(args.first_seed + i, args.first_seed + i + 1, args.n) for i in range(args.draws)]
    mean, sd = statistics.mean(draws), statistics.stdev(draws)
    below = sum(v <= PAPER_NCE for v in draws)
    print(f"true MI {true:.5f}; optimal critic, n = {args.n}, 100 sampled negatives, {args.draws} data draws:")
    print(
        f"  NCE mean {mean:.5f} (SE {sd / len(draws) ** 0.5:.5f}), sd across draws {sd:.5f}, "
        f"range [{min(draws):.5f}, {max(draws):.5f}]; {below} of {len(draws)} draws <= the paper's {PAPER_NCE}"
    )
    fixed = [nce(args.first_seed, 7 + i, args.n) for i in range(5)]
    print(
        f"  one data draw, 5 negative-sampling seeds: sd {statistics.stdev(fixed):.5f} "
        f"(mean {statistics.mean(fixed):.5f})"
    )


if __name__ == "__main__":
    main()
