"""Each method of the non-contrastive family against NT-Xent: milliseconds per training step of
the quickstart model, through the toolkit's own trainer, in one process.

Every recipe of ``recipes/vision/family/`` (the quickstart's data, conv net, batch, optimizer and
precision; the objective and what it needs of the head differ: BYOL / SimSiam / MoCo v3 / NNCLR
add a predictor and, but SimSiam, a target network's forward pass; Barlow Twins and VICReg a
256-256-256 projector; DINO its head to 256 outputs and a teacher; SwAV 100 prototypes and
Sinkhorn) is timed with ``bench/vision_step.py``'s ``toolkit_steps`` (``Pretrainer.fit``
between two per-step hooks), interleaved round by round with the quickstart recipe (NT-Xent) so
that load from other processes hits all alike; the median over rounds is reported with its
ratio to NT-Xent's step. Target (issue 52): within 1.3x. Two views each (multi-crop aside).

    python bench/family_step.py [--steps 20] [--rounds 3] [--threads 2] [--method byol ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from vision_step import load_recipe, timed_run, toolkit_steps  # noqa: E402

from toolkit.losses import LOSSES  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402

FAMILY = ROOT / "recipes" / "vision" / "family"
TARGET = 1.3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--method", action="append", default=None, help="only these (file names without .yaml)")
    parser.add_argument("--set", action="append", default=[], help="recipe override for every recipe")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    torch.set_num_threads(args.threads)
    common = [*timed_run(args.warmup, args.steps), *args.set]
    names = args.method or sorted(p.stem for p in FAMILY.glob("*.yaml") if p.stem in LOSSES)  # not collapse.yaml
    recipes = {"nt_xent": load_recipe(common)}
    recipes.update({n: load_recipe(common, FAMILY / f"{n}.yaml") for n in names})
    base = recipes["nt_xent"]
    print(
        f"quickstart model: batch {base.budget.batch_size} x 2 views, {base.encoder.arch} width "
        f"{base.encoder.width} blocks {base.encoder.blocks}, {base.precision}, {args.threads} threads, "
        f"{args.steps} timed steps x {args.rounds} rounds",
        flush=True,
    )
    times: dict[str, list[float]] = {n: [] for n in recipes}
    for r in range(args.rounds):
        for name, recipe in recipes.items():
            times[name].append(toolkit_steps(recipe, args.warmup, args.steps))
        print(
            f"  round {r + 1}: " + "  ".join(f"{n} {1000 * t[-1]:.1f}" for n, t in times.items()) + " (ms/step)",
            flush=True,
        )
    ref = statistics.median(times["nt_xent"])
    print(f"{'method':<14}{'ms/step':>9}{'x NT-Xent':>11}  target <= {TARGET}x")
    worst = 0.0
    for name, t in times.items():
        med = statistics.median(t)
        ratio = med / ref
        if name != "nt_xent":
            worst = max(worst, ratio)
        mark = "" if name == "nt_xent" else ("  ok" if ratio <= TARGET else "  OVER")
        print(f"{name:<14}{1000 * med:>9.1f}{ratio:>10.2f}x{mark}")
    print(f"slowest step against NT-Xent's: {worst:.2f}x (target <= {TARGET}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
