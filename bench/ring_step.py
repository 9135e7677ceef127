"""What Ring's selection costs against the logits it selects from.

For N queries (default 512) of width d (128) against a MoCo queue of M keys (65,536), every case
runs forward + backward into the queries and is timed back to back with the plain MoCo
cross-entropy ``F.cross_entropy(cat([q.k, q.Q^T]) / tau)`` (bench/losses.py's reference, same
inputs); the ratio printed is the median of the per-repeat ratios, measured in this one run:

* ``moco_infonce``: the package's MoCo loss, all negatives;
* ``ring_nce (lo, hi)``: MoCoRing with fixed percentiles, e.g. the issue's (50, 90), the
  authors' (90, 99) and (0, 100) (plain MoCo through ring_nce);
* ``ring_nce (50, 90) + stats``: the same with the training statistics (``neg_sim`` over the ring),
  as the loss module always asks;
* ``moco_infonce + ring selector``: the annealed-ring path (the ``ring`` selector's mask from
  :func:`toolkit.samplers.ring_mask` on a separate product, then ``moco_infonce`` with it), at
  (50, 90);
* ``ring_mask (50, 90)`` alone (no loss, no gradient): the selection itself (on CPU two
  partitions per row and a compare; see :func:`toolkit.samplers.ring_mask`).

Target: every ring case at most ``--target`` (1.3) times the reference. The figures depend on
the machine and on what else runs on it; ``machine_line`` names the machine.

    python bench/ring_step.py                 # N=512, d=128, M=65536, 2 threads
    python bench/ring_step.py --repeats 5 --queue 16384
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import toolkit.losses.functional as LF  # noqa: E402
from bench.losses import make_inputs, paired_times, reference_fn  # noqa: E402
from toolkit.samplers import ring_mask  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402


def cases(t: dict) -> dict:
    q, k, queue = t["q"], t["k"], t["queue"]

    def grad(loss_of):
        return lambda: torch.autograd.grad(loss_of(), q)

    def selected(lo: float, hi: float):
        with torch.no_grad():
            mask = ring_mask(q @ queue.T, lo, hi)
        return LF.moco_infonce(q, k, queue, 0.07, neg_mask=mask)

    def mask_only():
        with torch.no_grad():
            ring_mask(q @ queue.T, 50.0, 90.0)

    out = {"moco_infonce": grad(lambda: LF.moco_infonce(q, k, queue, 0.07))}
    for lo, hi in ((50.0, 90.0), (90.0, 99.0), (0.0, 100.0)):
        out[f"ring_nce ({lo:g}, {hi:g})"] = grad(lambda lo=lo, hi=hi: LF.ring_nce(q, k, queue, 0.07, lo, hi))
    out["ring_nce (50, 90) + stats"] = grad(lambda: LF.ring_nce(q, k, queue, 0.07, 50.0, 90.0, stats={}))
    out["moco_infonce + ring selector (50, 90)"] = grad(lambda: selected(50.0, 90.0))
    out["ring_mask (50, 90) alone"] = mask_only
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--queue", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", type=float, default=1.3)
    args = ap.parse_args()
    print(machine_line(), flush=True)
    torch.set_num_threads(args.threads)
    t = make_inputs(args.n, args.d, args.queue)
    reference = reference_fn(t)
    print(
        f"N={args.n}, d={args.d}, queue={args.queue}, threads={args.threads}, repeats={args.repeats}; "
        "ratio = median over repeats of case / plain cross-entropy MoCo step, timed back to back"
    )
    print(f"{'case':42s}{'ms':>9s}{'ref ms':>9s}{'x ref':>8s}")
    missed = []
    for name, run in cases(t).items():
        tc, tr = paired_times(run, reference, args.repeats, warmup=2)
        ratio = statistics.median(a / b for a, b in zip(tc, tr))
        print(f"{name:42s}{statistics.median(tc) * 1e3:9.1f}{statistics.median(tr) * 1e3:9.1f}{ratio:8.2f}", flush=True)
        if name.startswith(("ring_nce", "moco_infonce + ring")) and ratio > args.target:
            missed.append(name)
    print(f"target {args.target:.1f}x ref: " + ("met" if not missed else "missed by " + ", ".join(missed)))


if __name__ == "__main__":
    main()
