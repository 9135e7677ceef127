"""Images per second of one pretraining step of the quickstart model: the toolkit's loop against
a bare PyTorch loop doing the same work, in the same process.

A step is: batched augmentation of two views (uint8 batch -> float views), forward of both views,
NT-Xent (SimCLR 2B form), backward, Adam update, learning-rate schedule. The two paths:

* ``toolkit``: ``toolkit.training.pretrainer.Pretrainer`` itself (the shared trainer: seeded batches,
  ``VisionDomain.contrastive_batch``, the recipe's ``Objective`` with its records, optimizer,
  scheduler, ``after_step``, record averaging), timed between two of its per-step hooks so that
  start-up and evaluation are excluded; a hook stops the run after the timed steps.
* ``bare``: the same model, data, augmentation and optimizer in a hand-written loop; NT-Xent
  written out with ``F.cross_entropy``. It also times the augmentation on its own, whose share
  of the bare step is reported.

Rounds alternate the two paths so that load from other processes hits both alike; the median
over rounds is reported. Usage::

    python bench/vision_step.py [--steps 20] [--rounds 3] [--threads 2] [--set key=value ...]
                                [--before key=value ... | --before none]

``--before`` also times the toolkit step under other overrides (by default the quickstart as it
was before the time-to-accuracy work: three conv blocks in float32) in the same rounds, and
prints the ratio of images per second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domains.vision import VisionDomain  # noqa: E402
from toolkit import objective as objective_mod  # noqa: E402
from toolkit import recipe as rc  # noqa: E402
from toolkit.runs import precision_choice  # noqa: E402
from toolkit.tracking.runlog import RunLog  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402

# the quickstart's step before the time-to-accuracy work (three conv blocks, float32)
BEFORE = ["encoder.blocks=3", "precision=fp32"]


class _Stop(Exception):
    """Raised by the timing hook once the timed steps are done."""


class _NullTracker(RunLog):
    """Keeps nothing (the declared face's defaults)."""


def load_recipe(overrides: list[str], path: Path = ROOT / "recipes/vision/quickstart.yaml") -> rc.Recipe:
    """The quickstart recipe (or the vision recipe at ``path``) under ``overrides``, without its
    wall-time budget: a benchmark times steps, and ``budget.minutes`` would spend the first ones
    calibrating a step count."""
    raw = rc.apply_overrides(rc.load_yaml(path), ["budget.minutes=null", *overrides])
    # `auto` as `ctk run` resolves it on this machine (the bare loop needs the resolved value too)
    choice = precision_choice(rc.get_path(raw, "precision", "auto"), "cpu", VisionDomain)
    raw = rc.apply_overrides(raw, [f"precision={choice.value}"])
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, domain_check=VisionDomain.check)


def timed_run(warmup: int, steps: int) -> list[str]:
    """The overrides of a benchmarked run: nothing logged, monitored, evaluated or checkpointed,
    and just enough steps for the warm-up and the timed ones."""
    return [
        "tracking.log_model=false",
        "budget.monitor_every=null",
        "budget.eval_every=null",
        "budget.checkpoint_every=null",
        f"budget.steps={warmup + steps + 5}",
    ]


def toolkit_steps(recipe: rc.Recipe, warmup: int, steps: int) -> float:
    """Seconds per step of the toolkit's own trainer (``Pretrainer.fit``), after ``warmup`` steps."""
    from toolkit.training.pretrainer import Pretrainer
    from toolkit.training.trainer import RunOptions

    stamps: dict[int, float] = {}

    def hook(step: int) -> None:
        if step in (warmup, warmup + steps):
            stamps[step] = time.perf_counter()
        if step >= warmup + steps:
            raise _Stop

    try:
        options = RunOptions(device=torch.device("cpu"), progress=False, hooks=[hook])
        Pretrainer(recipe, VisionDomain(recipe), _NullTracker(), options).fit()
    except _Stop:
        pass
    return (stamps[warmup + steps] - stamps[warmup]) / steps


def bare_steps(recipe: rc.Recipe, warmup: int, steps: int) -> tuple[float, float]:
    """(seconds per step, seconds of augmentation per step) of a hand-written loop."""
    torch.manual_seed(recipe.seed)
    domain = VisionDomain(recipe)
    data = domain.build_data(recipe)
    model = domain.build_encoder(recipe)
    augment = domain.augment
    opt = torch.optim.Adam(model.parameters(), lr=recipe.optimizer.lr, weight_decay=recipe.optimizer.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    tau = recipe.objective.loss.args.get("temperature", 0.5)
    images = data.train.tensors["x"]
    n_img = images.shape[0]
    b = recipe.budget.batch_size
    order = torch.randperm(n_img, generator=torch.Generator().manual_seed(recipe.seed))
    aug_time, t0 = 0.0, 0.0
    model.train()
    for step in range(warmup + steps):
        if step == warmup:
            t0, aug_time = time.perf_counter(), 0.0
        idx = order[(step * b) % (n_img - b) :][:b]
        x = images[idx]
        ta = time.perf_counter()
        v1, v2 = augment(x, gen), augment(x, gen)
        aug_time += time.perf_counter() - ta
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.precision == "bf16"):
            z = model(torch.cat([v1, v2]))  # [2B, d], unit rows
        z = z.float()
        sim = z @ z.t() / tau
        sim.fill_diagonal_(float("-inf"))
        target = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)])
        loss = F.cross_entropy(sim, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return (time.perf_counter() - t0) / steps, aug_time / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    parser.add_argument(
        "--before",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="also time the toolkit step of the recipe with these overrides (an "
        "earlier setting), interleaved, and print the images/s ratio; "
        "--before none: skip (default: the quickstart before the "
        "time-to-accuracy work: " + " ".join(BEFORE) + ")",
    )
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    torch.set_num_threads(args.threads)
    common = timed_run(args.warmup, args.steps)
    recipe = load_recipe([*common, *args.set])
    before_sets = BEFORE if args.before is None else [s for s in args.before if s != "none"]
    before = load_recipe([*common, *args.set, *before_sets]) if before_sets else None
    b = recipe.budget.batch_size
    print(
        f"quickstart step: batch {b} x {recipe.objective.views} views, "
        f"{recipe.encoder.arch} width {recipe.encoder.width} blocks {recipe.encoder.blocks}, "
        f"{recipe.precision}, {args.threads} threads, "
        f"{args.steps} timed steps x {args.rounds} rounds"
    )
    tk, bare, aug, old = [], [], [], []
    for r in range(args.rounds):
        t_tk = toolkit_steps(recipe, args.warmup, args.steps)
        t_bare, t_aug = bare_steps(recipe, args.warmup, args.steps)
        tk.append(t_tk)
        bare.append(t_bare)
        aug.append(t_aug)
        line = (
            f"  round {r + 1}: toolkit {b / t_tk:8.1f} img/s   bare {b / t_bare:8.1f} img/s   "
            f"augmentation {1000 * t_aug:6.1f} ms/step ({100 * t_aug / t_bare:4.1f}% of the bare step)"
        )
        if before is not None:
            old.append(toolkit_steps(before, args.warmup, args.steps))
            line += f"   before {before.budget.batch_size / old[-1]:8.1f} img/s"
        print(line)
    t_tk, t_bare, t_aug = statistics.median(tk), statistics.median(bare), statistics.median(aug)
    if before is not None:
        t_old = statistics.median(old)
        ratio = (b / t_tk) / (before.budget.batch_size / t_old)
        print(
            f"before ({' '.join(before_sets)}): {before.budget.batch_size / t_old:.1f} img/s; "
            f"the recipe now: {b / t_tk:.1f} img/s, ratio {ratio:.2f}x"
        )
    overhead = 100.0 * (t_tk / t_bare - 1.0)
    print(
        f"median: toolkit {b / t_tk:.1f} img/s, bare PyTorch {b / t_bare:.1f} img/s, "
        f"toolkit overhead {overhead:+.1f}% (target < 5%)"
    )
    print(f"augmentation: {1000 * t_aug:.1f} ms of a {1000 * t_bare:.1f} ms step ({100 * t_aug / t_bare:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
