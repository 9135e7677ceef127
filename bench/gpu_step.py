"""Images per second of ctk's training step against a bare PyTorch loop on the same model, batch,
views, optimizer, compile mode, precision and feeding, in one process, on whatever device is
there (CUDA when torch sees one).

    python bench/gpu_step.py [--recipe recipes/vision/imagenet100/simclr.yaml] [--set key=value ...]
                             [--steps 20] [--warmup 5] [--rounds 2] [--compile] [--sgd] [--resident]
                             [--device cpu] [--json FILE]
    python bench/gpu_step.py --tiny            # a ResNet-18 at 16 px, batch 8: seconds on a CPU
    python bench/gpu_step.py --set encoder.arch=resnet18 --set encoder.stem=cifar \\
        --set data.augment.size=32 --set budget.batch_size=128     # ResNet-18 at 32 px

The two steps, timed in alternating rounds (the median is printed), alike in everything but
what ctk adds:

* ``ctk``: the recipe loaded, validated and decided as ``ctk run`` does it (``toolkit.runs``:
  device, ``precision: auto`` resolved there), the domain's trainer built by ``Domain.trainer``
  (the toolkit's ``Pretrainer``: its memory format, ``cudnn.benchmark``, optimizer and compile
  choices, printed on its ``[ctk] speed`` line; ``compile: auto`` weighs the recipe's own length,
  as a run does), and ``fit`` timed between two of its per-step hooks: a whole step (the batch
  copied to the device, views drawn and augmented there, forward, objective, backward,
  optimizer, schedule, records). The images are synthetic uint8 tensors, fed as a run feeds
  them: a few distinct batches held in pinned host memory (a streamed dataset's as its workers
  hand them over: one crop per view at the view size, the device doing the rest of the family),
  each copied to the device by the step (``non_blocking``), labels and dataset indices with
  them; ``--resident`` holds them on the device instead (no copy, nothing indexed on the host),
  on both sides. ``bench/vision_input.py`` measures the workers.
* ``bare``: the same encoder (``Domain.build_encoder``) in a plain loop: the same memory format
  and ``cudnn.benchmark`` (``toolkit.training.speed.prepare``), the recipe's optimizer built by
  the same code as ctk's (``toolkit.training.optim.build_optimizer``: LARS for the SimCLR
  recipe; ``--sgd`` makes both fused SGD), autocast in the same precision, compiled in the mode
  ctk's trainer chose (``compile: auto``'s choice, or the recipe's; ``--compile`` asks both for
  ``default``), each step's batch copied to the device as ctk's is, NT-Xent through
  ``F.cross_entropy`` with its targets made on the device, on views made once by ctk's
  augmentation (no augmentation in its step: ctk's is timed apart).

Printed: both rates, the ratio with the compile mode, optimizer and feeding both sides used,
ctk's augmentation alone (the domain's ``make_views`` on a batch, timed apart) as a share of
ctk's step, the ImageNet-100 epoch (126,689 images) and a 200-epoch run at each rate, and the
machine (``toolkit.training.precision.machine_line``). ``--json FILE`` writes the same figures
(``bench/gpu_report.py`` reads them). On CUDA every timing point synchronises the device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domains import installed  # noqa: E402
from domains.base import DataBundle  # noqa: E402
from toolkit import runs  # noqa: E402
from toolkit.tracking.runlog import RunLog  # noqa: E402
from toolkit.training import speed  # noqa: E402
from toolkit.training.batches import Batches  # noqa: E402
from toolkit.training.optim import build_optimizer, implementation  # noqa: E402
from toolkit.training.precision import autocast_dtype, machine_line  # noqa: E402
from toolkit.training.trainer import RunOptions  # noqa: E402

RECIPE = ROOT / "recipes" / "vision" / "imagenet100" / "simclr.yaml"
IMAGENET100_TRAIN = 126_689
TINY = [
    "encoder.arch=resnet18",
    "encoder.stem=cifar",
    "encoder.head.hidden=[64]",
    "encoder.head.out_dim=32",
    "data.augment.size=16",
    "budget.batch_size=8",
]
SYNTHETIC_BATCHES = 4  # distinct batches fed in turn
# training images of the datasets the recipes name, so an epoch has its real number of steps
# (what compile: auto weighs); data.train_subset wins where a recipe sets it
TRAIN_IMAGES = {"imagenet100": IMAGENET100_TRAIN, "fashion-mnist": 60_000, "cifar10": 50_000, "cifar100": 50_000}


class _Stop(Exception):
    """Raised by the timing hook once the timed steps are done."""


def load(recipe_path: str | Path, sets: list[str], device: str | None) -> runs.Plan:
    """The recipe as ``ctk run`` plans it (device and precision decided), its length kept (what
    ``compile: auto`` weighs), for timing steps only: no monitor, evaluation or checkpoint inside
    the timed steps (:func:`ctk_step` sets the steps it runs)."""
    quiet = [
        "budget.monitor_every=null",
        "budget.eval_every=null",
        "budget.checkpoint_every=0",
        "tracking.log_model=false",
    ]
    recipe = runs.load_recipe(recipe_path, [*quiet, *sets], installed.get)
    return runs.decide(recipe, device=device)


class FedBatches(Batches):
    """An epoch of ``length`` batches made of a few distinct ones handed over in turn, as a run's
    loader hands its own: in pinned host memory (on CUDA; the step copies each to the device) or
    already on the device."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], length: int) -> None:
        self.batches, self.length = batches, max(length, len(batches))

    def __len__(self) -> int:
        return self.length

    def iter_from(self, start: int):
        for b in range(start, self.length):
            yield dict(self.batches[b % len(self.batches)])


def feeding(device: torch.device, resident: bool) -> str:
    """How the synthetic images reach the step, in words."""
    if resident:
        return "synthetic uint8 images resident on the device"
    if device.type == "cuda":
        return "synthetic uint8 images from pinned host memory, copied by each step"
    return "synthetic uint8 images in host memory"


def synthetic_domain(plan: runs.Plan, resident: bool = False) -> object:
    """The recipe's domain with its training data replaced by seeded uint8 images:
    ``[N, C, S, S]`` for an in-memory dataset (the device crops), ``[N, V, C, S, S]`` for a
    streamed one (the workers' crops); in pinned host memory on CUDA, or on the device with
    ``resident`` (see :class:`FedBatches`)."""
    from domains.vision.dataset_table import entry
    from domains.vision.views import training_views

    recipe, device = plan.recipe, plan.device

    class Synthetic(recipe.domain_class):  # type: ignore[misc, valid-type]
        def build_data(self, recipe):  # type: ignore[override]
            split = training_views(recipe)  # as VisionDomain.build_data: the device's part of the views
            self.augment = split.device
            self.local_augment = getattr(split, "local", None)
            b, size = recipe.budget.batch_size, self.augment.spec.size
            channels = len(entry(recipe.data.dataset).normalization[0])
            views = (recipe.objective.views,) if split.crop is not None else ()
            g = torch.Generator().manual_seed(recipe.seed)
            batches = []
            for i in range(SYNTHETIC_BATCHES):
                batch = {
                    "x": torch.randint(0, 256, (b, *views, channels, size, size), generator=g, dtype=torch.uint8),
                    "y": torch.randint(0, 10, (b,), generator=g),
                    "index": torch.arange(i * b, (i + 1) * b),
                }
                if resident:
                    batch = {k: v.to(device) for k, v in batch.items()}
                elif device.type == "cuda":
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                batches.append(batch)
            images = recipe.data.train_subset or TRAIN_IMAGES.get(recipe.data.dataset, SYNTHETIC_BATCHES * b)
            fed = FedBatches(batches, images // b)
            return DataBundle(train=fed, num_instances=images, sampler=fed)

    return Synthetic(recipe)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ctk_step(plan: runs.Plan, warmup: int, steps: int, resident: bool = False) -> tuple[float, float, Any]:
    """(seconds per step of ctk's trainer, seconds of its augmentation per step, the trainer)."""
    stamps: dict[int, float] = {}
    device = plan.device

    def hook(step: int) -> None:
        if step in (warmup, warmup + steps):
            _sync(device)
            stamps[step] = time.perf_counter()
        if step >= warmup + steps:
            raise _Stop

    domain = synthetic_domain(plan, resident)
    trainer = domain.trainer(plan.recipe, RunLog(), RunOptions(device=device, progress=False, hooks=[hook]))
    # built with the recipe's length (compile: auto weighs it); the timed steps are these, and
    # fixing them skips budget.minutes' calibration
    trainer.total = trainer.state.planned_steps = warmup + steps + 1
    try:
        trainer.fit()
    except _Stop:
        pass
    per_step = (stamps[warmup + steps] - stamps[warmup]) / steps
    batch = {k: v.to(device) for k, v in next(iter(trainer.data.train)).items()}
    views = plan.recipe.objective.views
    for _ in range(2):  # warm
        domain.make_views(batch, views, trainer.views_gen)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        domain.make_views(batch, views, trainer.views_gen)
    _sync(device)
    return per_step, (time.perf_counter() - start) / steps, trainer


def nt_xent(z: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCLR's NT-Xent of ``2B`` unit rows (view 1 of every image, then view 2), written out;
    the targets are made on the rows' device."""
    b = z.shape[0] // 2
    sim = (z @ z.t()) / tau
    sim.fill_diagonal_(float("-inf"))
    target = torch.arange(2 * b, device=z.device).roll(b)  # row i's positive: i + b, then i - b
    return F.cross_entropy(sim, target)


def bare_step(plan: runs.Plan, trainer: Any, warmup: int, steps: int) -> tuple[float, str]:
    """(seconds per step, the optimizer's form) of a plain PyTorch loop on the trainer's encoder
    design, batches and views, with the optimizer and compile mode the trainer has."""
    recipe, device = plan.recipe, plan.device
    torch.manual_seed(recipe.seed)
    model = trainer.domain.build_encoder(recipe).to(device)
    layout = speed.prepare(model, device)  # ctk's memory format and cudnn.benchmark
    step_model = speed.compiled(model, trainer.speed.compile)
    opt = build_optimizer(model.parameters(), recipe.optimizer, recipe.budget.batch_size)
    fed = trainer.data.train.batches
    with torch.no_grad():
        first = {k: v.to(device) for k, v in fed[0].items()}
        v = trainer.domain.make_views(first, 2, torch.Generator(device=device).manual_seed(0))
    views = torch.cat([v[:, 0], v[:, 1]])
    if layout == "channels_last":
        views = views.contiguous(memory_format=torch.channels_last)
    tau = float(recipe.objective.loss.args.get("temperature", 0.1))
    dtype = autocast_dtype(recipe.precision)
    model.train()
    for step in range(warmup + steps):
        if step == warmup:
            _sync(device)
            start = time.perf_counter()
        # each step's batch reaches the device as ctk's does (its views were made once)
        batch = {k: t.to(device, non_blocking=True) for k, t in fed[step % len(fed)].items()}
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            z = step_model(views)
        loss = nt_xent(z.float(), tau)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del batch
    _sync(device)
    return (time.perf_counter() - start) / steps, implementation(opt)


def _compile(trainer: Any) -> str:
    """What ctk's trainer chose for the recipe's ``compile``, and why (``auto``)."""
    chosen = trainer.speed
    why = chosen.compile_reason
    return f"ctk compile: {trainer.recipe.compile} -> {chosen.compile}" + (f" ({why})" if why else "")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=str(RECIPE))
    ap.add_argument("--set", action="append", default=[], help="recipe override key=value")
    ap.add_argument("--device", default=None, help="cpu / cuda (default: the recipe's, auto: cuda when present)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile both steps (compile: default)")
    ap.add_argument("--sgd", action="store_true", help="both steps with fused SGD (the recipe's lr, momentum, decay)")
    ap.add_argument("--resident", action="store_true", help="synthetic images held on the device, on both sides")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the figures to FILE as JSON")
    ap.add_argument("--tiny", action="store_true", help="ResNet-18 at 16 px, batch 8, 3 steps: a CPU check")
    args = ap.parse_args(argv)
    sets = [
        *(TINY if args.tiny else []),
        *args.set,
        *(["compile=default"] if args.compile else []),
        *(["optimizer.name=sgd"] if args.sgd else []),
    ]
    if args.tiny:
        args.steps, args.warmup, args.rounds = min(args.steps, 3), min(args.warmup, 1), 1
    plan = load(args.recipe, sets, args.device)
    recipe, device = plan.recipe, plan.device
    if recipe.objective is None or recipe.objective.views != 2:
        raise SystemExit("bench/gpu_step.py compares two-view steps: the recipe needs objective.views: 2")
    machine = machine_line()
    print(machine, flush=True)
    enc, fed = recipe.encoder, feeding(device, args.resident)
    shape = (
        f"{enc.arch} at {recipe.data.augment.size or 'the preset size'} px, batch {recipe.budget.batch_size} x 2 views"
    )
    print(
        f"{recipe.name}: {shape}, {recipe.precision} ({plan.precision.reason}), on {device}; "
        f"{fed}; {args.steps} timed steps x {args.rounds} rounds",
        flush=True,
    )
    ctk, bare, aug = [], [], []
    b = recipe.budget.batch_size
    for r in range(args.rounds):
        t_ctk, t_aug, trainer = ctk_step(plan, args.warmup, args.steps, args.resident)
        t_bare, bare_optimizer = bare_step(plan, trainer, args.warmup, args.steps)
        ctk.append(t_ctk)
        bare.append(t_bare)
        aug.append(t_aug)
        print(
            f"  round {r + 1}: ctk {b / t_ctk:9.1f} images/s   bare {b / t_bare:9.1f} images/s   {_compile(trainer)}",
            flush=True,
        )
    t_ctk, t_bare, t_aug = statistics.median(ctk), statistics.median(bare), statistics.median(aug)
    chosen = trainer.speed
    mode = "not compiled" if chosen.compile == "off" else f"compiled in {chosen.compile}"
    why = f"compile: {recipe.compile}" + (
        f", which chose it ({chosen.compile_reason})" if chosen.compile_reason else ""
    )
    print(f"ctk step      {b / t_ctk:9.1f} images/s  ({1000 * t_ctk:.1f} ms a step; {chosen.line()})")
    print(
        f"bare loop     {b / t_bare:9.1f} images/s  ({1000 * t_bare:.1f} ms a step; the same encoder, "
        f"optimizer {bare_optimizer}, {mode})"
    )
    print(
        f"ratio ctk / bare: {t_bare / t_ctk:.2f}x (both {mode}, as {why}; optimizer {chosen.optimizer} / "
        f"{bare_optimizer}; {fed}; target on a GPU: >= 0.90x)"
    )
    print(
        f"augmentation: {1000 * t_aug:.1f} ms of ctk's {1000 * t_ctk:.1f} ms step ({100 * t_aug / t_ctk:.1f}%; "
        "target on a GPU: <= 10%)"
    )
    epochs = {}
    for name, t in (("ctk", t_ctk), ("bare", t_bare)):
        epochs[name] = IMAGENET100_TRAIN / (b / t)
        print(
            f"ImageNet-100 at {name}'s rate: an epoch (126,689 images) {epochs[name]:.0f} s, "
            f"200 epochs {_hours(200 * epochs[name])}"
        )
    if args.json:
        figures = {
            "machine": machine,
            "recipe": recipe.name,
            "shape": shape,
            "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "precision": recipe.precision,
            "feeding": fed,
            "rounds": args.rounds,
            "steps": args.steps,
            "batch": b,
            "compile_asked": recipe.compile,
            "compile": chosen.compile,
            "compile_reason": chosen.compile_reason,
            "speed_line": chosen.line(),
            "optimizer": {"ctk": chosen.optimizer, "bare": bare_optimizer},
            "ctk_ms": 1000 * t_ctk,
            "bare_ms": 1000 * t_bare,
            "ctk_images_per_s": b / t_ctk,
            "bare_images_per_s": b / t_bare,
            "ratio": t_bare / t_ctk,
            "augmentation_ms": 1000 * t_aug,
            "augmentation_share": t_aug / t_ctk,
            "imagenet100_epoch_s": epochs,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
