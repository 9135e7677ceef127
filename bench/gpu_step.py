"""Images per second of ctk's training step against a bare PyTorch loop on the same model, batch,
views and precision, in one process, on whatever device is there (CUDA when torch sees one).

    python bench/gpu_step.py [--recipe recipes/vision/imagenet100/simclr.yaml] [--set key=value ...]
                             [--steps 20] [--warmup 5] [--rounds 2] [--compile] [--device cpu]
    python bench/gpu_step.py --tiny            # a ResNet-18 at 16 px, batch 8: seconds on a CPU
    python bench/gpu_step.py --set encoder.arch=resnet18 --set encoder.stem=cifar \\
        --set data.augment.size=32 --set budget.batch_size=128     # ResNet-18 at 32 px

The two steps, timed in alternating rounds (the median is printed):

* ``ctk``: the recipe loaded, validated and decided as ``ctk run`` does it (``toolkit.runs``:
  device, ``precision: auto`` resolved there), the domain's trainer built by ``Domain.trainer``
  (the toolkit's ``Pretrainer``: its memory format, ``cudnn.benchmark``, optimizer and compile
  choices, printed on its ``[ctk] speed`` line), and ``fit`` timed between two of its per-step
  hooks: a whole step (views drawn and augmented on the device, forward, objective, backward,
  optimizer, schedule, records). The only change: the images are synthetic uint8 tensors
  already on the device (a streamed dataset's come as its workers hand them over: one crop per
  view at the view size, the device doing the rest of the family), so the step is measured, not
  the disk (``bench/vision_input.py`` measures the workers).
* ``bare``: the same encoder (``Domain.build_encoder``) written as a plain loop with what a
  careful PyTorch user writes: channels_last where there are convolutions (CPU and CUDA),
  ``cudnn.benchmark``, fused SGD, autocast in the same precision, NT-Xent through
  ``F.cross_entropy`` on views made once by ctk's augmentation (no augmentation in its step).
  ``--compile`` compiles both (the recipe's ``compile: default``, ``torch.compile`` of the bare
  model). Without it the bare loop is eager and ctk's step follows the recipe's ``compile``,
  ``auto`` by default (``toolkit.training.speed.choose_compile``: eager off CUDA; on CUDA
  ``reduce-overhead`` where its timed trial finds it faster); what it chose, and why, is printed
  for every round and on the ``ctk step`` line.

Also printed: ctk's augmentation alone (the domain's ``make_views`` on a batch, timed apart) as
a share of ctk's step, the ImageNet-100 epoch (126,689 images) and a 200-epoch run at each rate,
and the machine (``toolkit.training.precision.machine_line``). On CUDA every timing point
synchronises the device.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domains import installed  # noqa: E402
from domains.base import DataBundle  # noqa: E402
from toolkit import runs  # noqa: E402
from toolkit.tracking.runlog import RunLog  # noqa: E402
from toolkit.training.batches import TensorBatches  # noqa: E402
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
SYNTHETIC_BATCHES = 4  # distinct batches of images held on the device


class _Stop(Exception):
    """Raised by the timing hook once the timed steps are done."""


def load(recipe_path: str | Path, sets: list[str], device: str | None) -> runs.Plan:
    """The recipe as ``ctk run`` plans it (device and precision decided), for timing steps only:
    no wall-time budget, no monitor, evaluation or checkpoint inside the timed steps."""
    quiet = [
        "budget.minutes=null",
        "budget.monitor_every=null",
        "budget.eval_every=null",
        "budget.checkpoint_every=0",
        "tracking.log_model=false",
    ]
    recipe = runs.load_recipe(recipe_path, [*quiet, *sets], installed.get)
    return runs.decide(recipe, device=device)


def synthetic_domain(plan: runs.Plan) -> object:
    """The recipe's domain with its training data replaced by seeded uint8 images on the device:
    ``[N, C, S, S]`` for an in-memory dataset (the device crops), ``[N, V, C, S, S]`` for a
    streamed one (the workers' crops)."""
    from domains.vision.dataset_table import entry
    from domains.vision.views import training_views

    recipe, device = plan.recipe, plan.device

    class Synthetic(recipe.domain_class):  # type: ignore[misc, valid-type]
        def build_data(self, recipe):  # type: ignore[override]
            split = training_views(recipe)  # as VisionDomain.build_data: the device's part of the views
            self.augment = split.device
            b, size = recipe.budget.batch_size, self.augment.spec.size
            channels = len(entry(recipe.data.dataset).normalization[0])
            n = SYNTHETIC_BATCHES * b
            views = (recipe.objective.views,) if split.crop is not None else ()
            g = torch.Generator().manual_seed(recipe.seed)
            x = torch.randint(0, 256, (n, *views, channels, size, size), generator=g, dtype=torch.uint8)
            y = torch.randint(0, 10, (n,), generator=g)
            batches = TensorBatches({"x": x.to(device), "y": y.to(device)}, b, seed=recipe.seed)
            return DataBundle(train=batches, num_instances=n, sampler=batches)

    return Synthetic(recipe)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ctk_step(plan: runs.Plan, warmup: int, steps: int) -> tuple[float, float, object]:
    """(seconds per step of ctk's trainer, seconds of its augmentation per step, the trainer)."""
    stamps: dict[int, float] = {}
    device = plan.device

    def hook(step: int) -> None:
        if step in (warmup, warmup + steps):
            _sync(device)
            stamps[step] = time.perf_counter()
        if step >= warmup + steps:
            raise _Stop

    domain = synthetic_domain(plan)
    trainer = domain.trainer(plan.recipe, RunLog(), RunOptions(device=device, progress=False, hooks=[hook]))
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
    """SimCLR's NT-Xent of ``2B`` unit rows (view 1 of every image, then view 2), written out."""
    b = z.shape[0] // 2
    sim = (z @ z.t()) / tau
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    return F.cross_entropy(sim, target)


def bare_step(plan: runs.Plan, trainer, warmup: int, steps: int, compiled: bool) -> float:
    """Seconds per step of a plain PyTorch loop on the trainer's encoder design, batch and views."""
    recipe, device = plan.recipe, plan.device
    torch.manual_seed(recipe.seed)
    model = trainer.domain.build_encoder(recipe).to(device)
    if any(isinstance(m, nn.Conv2d) for m in model.modules()):
        model = model.to(memory_format=torch.channels_last)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    batch = {k: v.to(device) for k, v in next(iter(trainer.data.train)).items()}
    with torch.no_grad():
        v = trainer.domain.make_views(batch, 2, torch.Generator(device=device).manual_seed(0))
    views = torch.cat([v[:, 0], v[:, 1]]).contiguous(memory_format=torch.channels_last)
    tau = float(recipe.objective.loss.args.get("temperature", 0.1))
    dtype = autocast_dtype(recipe.precision)
    model.train()
    for step in range(warmup + steps):
        if step == warmup:
            _sync(device)
            start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            z = step_model(views)
        loss = nt_xent(z.float(), tau)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    _sync(device)
    return (time.perf_counter() - start) / steps


def _compile(trainer) -> str:
    """What ctk's trainer chose for the recipe's ``compile``, and why (``auto``)."""
    chosen = getattr(trainer, "speed", None)
    if chosen is None:
        return "ctk compile: a checkout from before the speed line"
    why = getattr(chosen, "compile_reason", "")
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
    ap.add_argument("--tiny", action="store_true", help="ResNet-18 at 16 px, batch 8, 3 steps: a CPU check")
    args = ap.parse_args(argv)
    sets = [*(TINY if args.tiny else []), *args.set, *(["compile=default"] if args.compile else [])]
    if args.tiny:
        args.steps, args.warmup, args.rounds = min(args.steps, 3), min(args.warmup, 1), 1
    plan = load(args.recipe, [*sets, f"budget.steps={args.warmup + args.steps + 1}"], args.device)
    recipe, device = plan.recipe, plan.device
    if recipe.objective is None or recipe.objective.views != 2:
        raise SystemExit("bench/gpu_step.py compares two-view steps: the recipe needs objective.views: 2")
    print(machine_line(), flush=True)
    enc = recipe.encoder
    print(
        f"{recipe.name}: {enc.arch} at {recipe.data.augment.size or 'the preset size'} px, batch "
        f"{recipe.budget.batch_size} x 2 views, {recipe.precision} ({plan.precision.reason}), on {device}; "
        f"synthetic uint8 images on the device; {args.steps} timed steps x {args.rounds} rounds",
        flush=True,
    )
    ctk, bare, aug = [], [], []
    for r in range(args.rounds):
        t_ctk, t_aug, trainer = ctk_step(plan, args.warmup, args.steps)
        t_bare = bare_step(plan, trainer, args.warmup, args.steps, args.compile)
        ctk.append(t_ctk)
        bare.append(t_bare)
        aug.append(t_aug)
        b = recipe.budget.batch_size
        print(
            f"  round {r + 1}: ctk {b / t_ctk:9.1f} images/s   bare {b / t_bare:9.1f} images/s   {_compile(trainer)}",
            flush=True,
        )
    b = recipe.budget.batch_size
    t_ctk, t_bare, t_aug = statistics.median(ctk), statistics.median(bare), statistics.median(aug)
    chose = trainer.speed.line() if hasattr(trainer, "speed") else "a checkout from before the speed line"
    print(f"ctk step      {b / t_ctk:9.1f} images/s  ({1000 * t_ctk:.1f} ms a step; {chose})")
    print(f"bare loop     {b / t_bare:9.1f} images/s  ({1000 * t_bare:.1f} ms a step)")
    print(f"ratio ctk / bare: {t_bare / t_ctk:.2f}x (target on a GPU: >= 0.90x)")
    print(
        f"augmentation: {1000 * t_aug:.1f} ms of ctk's {1000 * t_ctk:.1f} ms step ({100 * t_aug / t_ctk:.1f}%; "
        "target on a GPU: <= 10%)"
    )
    for name, t in (("ctk", t_ctk), ("bare", t_bare)):
        epoch = IMAGENET100_TRAIN / (b / t)
        print(
            f"ImageNet-100 at {name}'s rate: an epoch (126,689 images) {epoch:.0f} s, 200 epochs {_hours(200 * epoch)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
