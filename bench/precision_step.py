"""Step time of the quickstart model in fp32 against bf16 autocast, and the host syncs a step
makes, through the toolkit's own trainer (``Pretrainer``).

* Time: seconds per step between two of the trainer's per-step hooks (start-up and evaluation
  excluded), fp32 and bf16 rounds alternating so that load from other processes hits both;
  the median over rounds and the ratio bf16 / fp32 are reported. On a CPU without native
  bf16 arithmetic (no AVX512-BF16 / AMX) bf16 is expected to be slower: it measures the code
  path, not a speed-up; on a GPU pass ``--device cuda``.
* Syncs (``--sync-free`` forces the augmentation's GPU path on a CPU): every read of a tensor value by the host (``item``, ``tolist``, ``cpu``, ``numpy``,
  ``float()``, ``int()``, ``bool()``, and the operators that read back: ``nonzero``, bool-mask
  indexing, ...; ``toolkit.training.syncs.SyncCounter``) counted per step, reported for log
  steps and for the other steps, with the calls of the rest.

Vision data stays on the device and is augmented batched there (``domains/vision/augment.py``):
there is no DataLoader, so no worker or pinned-memory transfer is part of a step.

Usage::

    python bench/precision_step.py [--steps 24] [--rounds 3] [--device cpu] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
from vision_step import _NullTracker, _Stop, load_recipe  # noqa: E402

from domains.vision import VisionDomain  # noqa: E402
from toolkit import recipe as rc  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402
from toolkit.training.pretrainer import Pretrainer  # noqa: E402
from toolkit.training.syncs import SyncCounter  # noqa: E402
from toolkit.training.trainer import RunOptions  # noqa: E402


def run(
    recipe: rc.Recipe, device: str, warmup: int, steps: int, sync_free: bool | None = None
) -> tuple[float, dict[int, Counter]]:
    """(seconds per timed step, {step: host reads during it}) of ``Pretrainer.fit``."""
    stamps: dict[int, float] = {}
    counter, reads = SyncCounter(), {}

    def hook(step: int) -> None:
        if device == "cuda":
            torch.cuda.synchronize()  # the timing's own sync, outside the counted calls
        reads[step] = Counter(counter.calls)
        counter.calls.clear()
        if step in (warmup, warmup + steps):
            stamps[step] = time.perf_counter()
        if step >= warmup + steps:
            raise _Stop

    options = RunOptions(device=torch.device(device), progress=False, hooks=[hook])
    trainer = Pretrainer(recipe, VisionDomain(recipe), _NullTracker(), options)
    trainer.domain.augment.sync_free = sync_free
    try:
        with counter:
            trainer.fit()
    except _Stop:
        pass
    return (stamps[warmup + steps] - stamps[warmup]) / steps, reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--sync-free", action="store_true", help="the augmentation's GPU path (no host reads) on any device"
    )
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    torch.set_num_threads(args.threads)
    base = [
        "data.train_subset=4096",
        "budget.monitor_every=null",
        "budget.checkpoint_every=0",
        f"device={args.device}",
        *args.set,
    ]
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    reads: dict[int, Counter] = {}
    for _ in range(args.rounds):
        for precision, seconds_list in times.items():
            seconds, per_step = run(
                load_recipe([*base, f"precision={precision}"]),
                args.device,
                args.warmup,
                args.steps,
                True if args.sync_free else None,
            )
            seconds_list.append(seconds)
            reads = per_step
    recipe = load_recipe(base)
    fp32, bf16 = (statistics.median(times[p]) for p in ("fp32", "bf16"))
    path = "sync-free augmentation" if args.sync_free else "augmentation's default path"
    print(
        f"quickstart step, batch {recipe.budget.batch_size}, {args.device} ({path}), {args.threads} threads, "
        f"median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"  fp32: {fp32 * 1e3:8.1f} ms/step")
    print(f"  bf16: {bf16 * 1e3:8.1f} ms/step   ratio bf16/fp32 = {bf16 / fp32:.2f}")
    log_every = recipe.budget.log_every
    timed = [s for s in reads if s > 1]  # the first step also draws the epoch's order
    log = [s for s in timed if s % log_every == 0]
    other = [s for s in timed if s % log_every]
    for label, steps in (("log steps", log), ("other steps", other)):
        calls = sum((reads[s] for s in steps), Counter())
        per = sum(calls.values()) / max(len(steps), 1)
        print(f"  host syncs per step, {label} ({len(steps)}): {per:.2f}  {dict(calls)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
