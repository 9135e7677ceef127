"""Which ranking of the memory bank could give Ring Table 5's CNCE values at w_l = 10 and 25?

Table 5 prints CNCE = 0.01241, 0.00220, 7.29e-5, 1.67e-5, 5.87e-6, 1.97e-6 at w_l = 10, 25, 50,
75, 90, 95 (NCE 0.01345). App. B says the negatives of anchor i are "the top p percent" of the
bank by "dot product with the embedding of the current transformed instance"; Thm. 3.1 defines
the support by the critic's own score f(x_i, y). This script ranks the 2000-point bank of each
anchor by several similarities, keeps the candidates j != i from the w_l-th percentile upwards,
draws 100 of them without replacement and prints the estimate
``mean_i [f_ii - log mean_{{i} u N_i} exp f_ij]`` (ctk's ring_mi toy, docs/toy-datasets.md):

* ``--critic optimal``: the exact critic log p(y|x) - log p(y), rankings by f, by x_i x_j,
  -|x_i - x_j|, y_i y_j and -|y_i - y_j| (one data draw per seed);
* ``--critic mlp``: the paper's critic g(x).h(y) trained with in-batch NCE (as ring-mi-toy),
  rankings by f, by the distance and the cosine of g(x_i), h(y_j), and by the dot product,
  cosine and distance of h(y_i), h(y_j) and of g(x_i), g(x_j);
* ``--cnce-trained``: critics trained on CNCE at each w_l with the ring ranked by -|y_i - y_j|
  (a support that does not move with the critic), evaluated the same way.

One core; optimal: about a second per seed, mlp: about 12 s per seed, cnce-trained: about
20 s per critic.

    python scripts/ring_cnce_rankings.py --critic optimal --seeds 5
    python scripts/ring_cnce_rankings.py --critic mlp --seeds 3
    python scripts/ring_cnce_rankings.py --cnce-trained --seeds 2 --w 10,25,50,90
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domains.toy import ring_mi  # noqa: E402

W_L = (0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0)


def ring_estimate(f: torch.Tensor, similarity: torch.Tensor, lower: float, k: int, seed: int) -> float:
    """The estimate with critic scores ``f`` and the ring of each row ranked by ``similarity``
    (w_l = 0: every j != i, i.e. NCE)."""
    return ring_mi.contrastive_mi_estimate(f, lower, k, torch.Generator().manual_seed(seed), ranking=similarity)


def nce_trained(x: torch.Tensor, y: torch.Tensor, seed: int) -> ring_mi.MLPCritic:
    torch.manual_seed(seed)
    critic = ring_mi.MLPCritic().double()
    ring_mi.train_critic(critic, x, y, generator=torch.Generator().manual_seed(seed + 2))
    return critic


def rankings(critic: str, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[torch.Tensor, dict]:
    if critic == "optimal":
        f = ring_mi.optimal_critic(x, y)
        return f, {
            "f(x_i, y_j)": f,
            "x_i x_j": x[:, None] * x[None, :],
            "-|x_i - x_j|": -(x[:, None] - x[None, :]).abs(),
            "y_i y_j": y[:, None] * y[None, :],
            "-|y_i - y_j|": -(y[:, None] - y[None, :]).abs(),
        }
    net = nce_trained(x, y, seed)
    with torch.no_grad():
        g, h = net.g(x[:, None]), net.h(y[:, None])
    gn, hn = F.normalize(g, dim=1), F.normalize(h, dim=1)
    f = g @ h.T
    return f, {
        "f = g(x_i).h(y_j)": f,
        "-|g(x_i) - h(y_j)|": -torch.cdist(g, h),
        "cos(g(x_i), h(y_j))": gn @ hn.T,
        "h(y_i).h(y_j)": h @ h.T,
        "cos(h(y_i), h(y_j))": hn @ hn.T,
        "-|h(y_i) - h(y_j)|": -torch.cdist(h, h),
        "g(x_i).g(x_j)": g @ g.T,
        "cos(g(x_i), g(x_j))": gn @ gn.T,
    }


def cnce_trained(x: torch.Tensor, y: torch.Tensor, lower: float, seed: int) -> float:
    """A critic trained on CNCE at ``lower`` with the ring ranked by -|y_i - y_j|, its estimate."""
    n = len(x)
    similarity = -(y[:, None] - y[None, :]).abs()
    ring = similarity.fill_diagonal_(-math.inf).topk((n - 1) - int(lower / 100.0 * (n - 1)), dim=1).indices
    torch.manual_seed(seed)
    critic = ring_mi.MLPCritic().double()
    draws = torch.Generator().manual_seed(seed + 3)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        scores = critic(x[idx], y)
        keys = torch.rand(len(idx), ring.shape[1], generator=draws, dtype=scores.dtype)
        picked = ring[idx].gather(1, keys.topk(min(100, ring.shape[1]), dim=1).indices)
        both = torch.cat([scores[torch.arange(len(idx)), idx][:, None], scores.gather(1, picked)], dim=1)
        return -(both[:, 0] - torch.logsumexp(both, dim=1) + math.log(both.shape[1])).mean()

    ring_mi.train_critic(critic, x, y, generator=torch.Generator().manual_seed(seed + 2), batch_loss=batch_loss)
    with torch.no_grad():
        f = critic(x, y)
    return ring_estimate(f, similarity, lower, 100, seed + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--critic", choices=["optimal", "mlp"], default="optimal")
    ap.add_argument("--cnce-trained", action="store_true", help="train one critic per w_l on the y-ranked ring")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (the data draw and the critic)")
    ap.add_argument("--w", default=",".join(f"{w:g}" for w in W_L), help="percentiles w_l (0 = NCE)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ws = [float(w) for w in args.w.split(",")]
    print(
        "paper (Table 5): NCE 0.01345; CNCE at 10, 25, 50, 75, 90, 95: 0.01241 0.00220 7.29e-5 1.67e-5 "
        "5.87e-6 1.97e-6; true MI 0.02041"
    )
    print(f"w_l: {', '.join(f'{w:g}' for w in ws)}; mean over seeds 0..{args.seeds - 1}")
    table: dict[str, list[list[float]]] = {}
    for seed in range(args.seeds):
        x, y = ring_mi.sample_pairs(2000, torch.Generator().manual_seed(seed))
        if args.cnce_trained:
            table.setdefault("CNCE-trained, ring by -|y_i - y_j|", []).append([cnce_trained(x, y, w, seed) for w in ws])
            continue
        f, sims = rankings(args.critic, x, y, seed)
        for name, sim in sims.items():
            table.setdefault(f"{args.critic} critic, ring by {name}", []).append(
                [ring_estimate(f, sim, w, 100, seed + 1) for w in ws]
            )
    for name, rows in table.items():
        means = [sum(col) / len(col) for col in zip(*rows)]
        print(f"{name:42s}" + " ".join(f"{m:+.5f}" for m in means))


if __name__ == "__main__":
    main()
